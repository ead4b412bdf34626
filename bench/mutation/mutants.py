"""Hand-written mutants of the broker and the controller.

Each is one small change of the kind a real bug makes, breaking one
guarantee of docs/design.md#guarantees: `find` must occur exactly once in
`file`, and is replaced by `replace`. `breaks` names the guarantee (its
anchor); `note` says how the bug would show. bench/mutation/runner.py runs
the suites against each; bench/mutation/README.md has the results and,
for every survivor, why it survived.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    find: str
    replace: str
    breaks: str       # the guarantee (docs/design.md anchor)
    note: str = ""
    # Why no run can tell this mutant from the original, when that is so
    # (an equivalent mutant: run and reported, left out of the score).
    equivalent: str = ""


P = "cluster/server/partition.py"
RM = "cluster/server/replica_manager.py"
FETCHER = "cluster/server/fetcher.py"
APIS = "cluster/server/kafka_apis.py"
PRODUCERS = "cluster/server/producer_state.py"
LOG = "cluster/log/log.py"
EPOCHS = "cluster/log/epoch_cache.py"
BATCH = "cluster/log/batch.py"
SELECT = "cluster/controller/leader_selectors.py"
PSM = "cluster/controller/partition_state_machine.py"
CTRL = "cluster/controller/controller.py"
REASSIGN = "cluster/controller/reassignment.py"
RSM = "cluster/controller/replica_state_machine.py"
METADATA = "cluster/server/metadata_cache.py"

MUTANTS: list[Mutant] = [
    # -- high watermark and what consumers read -------------------------------------------------
    Mutant("hw-ignores-followers", P,
           "                if leo < new:\n                    new = leo",
           "                if leo < new and False:\n                    new = leo",
           "g-hw", "the leader's HW follows its own LEO: acks=all acknowledged before replication"),
    Mutant("hw-one-past-followers", P,
           "                leo = r.leo if r is not None else -1",
           "                leo = r.leo + 1 if r is not None else -1",
           "g-hw", "off by one: the HW passes the slowest in-sync follower by one record"),
    Mutant("consumers-read-to-leo", P,
           "        max_offset = None if replica_id >= 0 else self.hw",
           "        max_offset = None",
           "g-committed-reads", "consumer fetches are served up to the LEO, not the HW"),
    Mutant("follower-hw-uncapped", P,
           "        new = min(leader_hw, self.leo)",
           "        new = leader_hw",
           "g-hw", "a follower's HW may pass its own LEO",
           equivalent="every reader of a follower's HW caps it at the LEO again: make_leader, "
                      "init_hw after a restart, truncate_to (a no-op past the LEO); a follower "
                      "answers no consumer; only the checkpoint file shows the larger value, "
                      "and only while the follower catches up"),
    Mutant("hw-checkpoint-is-leo", RM,
           "        return {tp: p.hw for tp, p in self.partitions.items()}",
           "        return {tp: p.leo for tp, p in self.partitions.items()}",
           "g-hw", "the HW checkpoint records the LEO: after a restart uncommitted records count as committed"),
    # -- acks and min.insync.replicas -----------------------------------------------------------
    Mutant("min-isr-not-checked", P,
           "        if acks == -1 and len(self.isr) < min_isr:",
           "        if acks == -1 and len(self.isr) < 0:",
           "g-min-isr", "acks=all appended and acknowledged with an ISR below min.insync.replicas"),
    Mutant("ack-ignores-shrunk-isr", P,
           "        return E.NONE if len(self.isr) >= self.min_isr else E.NOT_ENOUGH_REPLICAS_AFTER_APPEND",
           "        return E.NONE",
           "g-min-isr", "a write whose ISR shrank while it waited is acknowledged anyway"),
    # -- ISR --------------------------------------------------------------------------------------
    Mutant("isr-never-shrinks", P,
           "        return self.isr - out if out else None",
           "        return None",
           "g-isr-liveness", "a stuck follower is never removed: acks=all stalls while it is cut off"),
    Mutant("isr-joins-before-caught-up", P,
           "        return r.may_join_isr and fetch_offset >= self.hw",
           "        return r.may_join_isr",
           "g-isr", "a follower joins the ISR before it holds the committed records",
           equivalent="the same condition is checked again where the new ISR is computed "
                      "(Partition.expanded_isr: r.leo >= self.hw), so no follower joins early"),
    Mutant("isr-joins-on-first-fetch", P,
           "        return self.fetches >= 2 and self.leo >= 0",
           "        return self.leo >= 0",
           "g-isr", "a follower the controller took out (controlled shutdown) rejoins on a stale fetch"),
    Mutant("isr-change-not-notified", RM,
           "        self._isr_changes.add(p.tp)",
           "        pass",
           "g-metadata", "leader-made ISR changes never reach the controller: brokers serve stale ISRs"),
    # -- fencing of a deposed leader --------------------------------------------------------------
    Mutant("fenced-leader-appends", P,
           "        if not self.is_leader or self.fenced:",
           "        if not self.is_leader:",
           "g-fencing", "a leader whose ISR write met a newer version keeps taking writes"),
    Mutant("stale-isr-write-applied", RM,
           "                p.fence()",
           "                p.apply_isr(new_isr, version)",
           "g-fencing", "a zombie leader shrinks its ISR to itself although ZooKeeper refused it"),
    Mutant("stale-controller-accepted", RM,
           "        if epoch < self.controller_epoch:",
           "        if epoch < 0:",
           "g-controller-epoch", "requests of a deposed controller are applied"),
    Mutant("misdelivered-request-applied", RM,
           "        if (req.broker_id >= 0 and req.broker_id != self.broker_id) or (",
           "        if (req.broker_id >= 0 and req.broker_id != req.broker_id) or (",
           "g-controller-epoch", "a request for another broker (a reused address) is applied"),
    # -- truncation and leader epochs ---------------------------------------------------------------
    Mutant("no-epoch-truncation", RM,
           "            self.fetchers.add(p.tp, s.leader, p.leo, truncating=epochs,",
           "            self.fetchers.add(p.tp, s.leader, p.leo, truncating=False,",
           "g-replicas-agree", "a new follower keeps its divergent tail (no OffsetForLeaderEpoch)"),
    Mutant("same-leader-no-truncation", RM,
           '        same_leader = (self.truncation == "hw" and not p.is_leader',
           "        same_leader = (not p.is_leader",
           "g-replicas-agree", "a follower told of a newer epoch of the leader it last followed keeps "
                               "fetching from its LEO: records replaced in the epochs it missed stay "
                               "(the bug the pressure suite found at seed 219)"),
    Mutant("zombie-follower-not-fenced", P,
           "        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:",
           "        if True:",
           "g-replicas-agree", "a leader serves a follower of an older epoch (the controller could "
                               "not reach it): it appends new records after a tail its leader "
                               "replaced meanwhile, and its epoch cache hides that from the next "
                               "truncation (the bug the pressure suite found in CI on 2026-11-26)"),
    Mutant("truncate-too-little", FETCHER,
           "                self._truncated(tp, s, p, min(leader_end, f_end),",
           "                self._truncated(tp, s, p, max(leader_end, f_end),",
           "g-replicas-agree", "the follower truncates to the larger of the two epoch ends"),
    Mutant("epoch-end-off-by-one", EPOCHS,
           "            return self._epochs[higher - 1], self._starts[higher]",
           "            return self._epochs[higher - 1], self._starts[higher] + 1",
           "g-replicas-agree", "OffsetForLeaderEpoch answers one past the epoch's end"),
    Mutant("epoch-cache-not-truncated", LOG,
           "            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)\n"
           "            log.info(\"%s: truncated to %d (LEO %d)\"",
           "            log.info(\"%s: truncated to %d (LEO %d)\"",
           "g-leader-epoch", "a truncation leaves epochs of the removed records in the cache"),
    Mutant("follower-append-any-offset", LOG,
           "                if h.base_offset != expect:",
           "                if h.base_offset != expect and False:",
           "g-replicas-agree", "a follower appends fetched batches that do not continue its log"),
    # -- idempotent producers -------------------------------------------------------------------------
    Mutant("dedup-window-of-one", PRODUCERS,
           "MAX_BATCHES = 5",
           "MAX_BATCHES = 1",
           "g-idempotence", "only the last batch is remembered: a retry of an older one is written again"),
    Mutant("out-of-order-accepted", PRODUCERS,
           "            if first_seq != expected:",
           "            if first_seq != expected and False:",
           "g-idempotence", "a batch past a gap in the sequence is appended"),
    Mutant("duplicate-not-recognised", PRODUCERS,
           "            if fs == first_seq and ls == last_seq:",
           "            if fs == first_seq and ls == last_seq and False:",
           "g-idempotence", "a retried batch is not recognised as written"),
    Mutant("producer-state-kept-on-truncation", P,
           "        self.rebuild_producer_state()\n        return True",
           "        return True",
           "g-idempotence", "after a truncation the sequences of the removed batches still count"),
    Mutant("producer-state-lost-on-restart", RM,
           "            p.rebuild_producer_state()",
           "            pass",
           "g-idempotence", "a restarted broker forgets the producers' sequences"),
    # -- the controller's elections ---------------------------------------------------------------------
    Mutant("unclean-election-always", SELECT,
           "    if live_ar and unclean_enabled:",
           "    if live_ar:",
           "g-durability", "an out-of-sync replica is elected although unclean election is off"),
    Mutant("offline-leader-any-replica", SELECT,
           "        return LeaderChoice(ordered[0], tuple(live_isr), _live(assigned, live))",
           "        return LeaderChoice(_live(assigned, live)[0], tuple(live_isr), _live(assigned, live))",
           "g-durability", "the first live assigned replica leads, in sync or not"),
    Mutant("leader-epoch-not-bumped", PSM,
           "            return LeaderAndIsr(choice.leader, cur.leader_epoch + 1, choice.isr, ctx.epoch), choice",
           "            return LeaderAndIsr(choice.leader, cur.leader_epoch, choice.isr, ctx.epoch), choice",
           "g-epochs", "a new leader keeps the old leader epoch"),
    Mutant("shutdown-leader-out-of-isr", SELECT,
           "    candidates = [r for r in assigned if r in new_isr and r in live]",
           "    candidates = [r for r in assigned if r in live and r not in shutting_down]",
           "g-durability", "a controlled shutdown hands leadership to a replica not in the ISR"),
    Mutant("preferred-out-of-isr", SELECT,
           "    if preferred not in live or preferred not in current.isr:",
           "    if preferred not in live:",
           "g-durability", "a preferred replica election elects a replica not in the ISR"),
    Mutant("reassignment-no-catch-up", REASSIGN,
           "        if not set(r.new_replicas) <= set(lai.isr):",
           "        if False:",
           "g-durability", "a reassignment stops the old replicas before the new ones caught up"),
    Mutant("dead-replicas-stay-in-isr", RSM,
           "            new_isr = tuple(r for r in cur.isr if r not in gone)",
           "            new_isr = tuple(cur.isr)",
           "g-isr", "a dead broker stays in the ISRs the controller writes"),
    Mutant("bounce-not-a-failure", CTRL,
           "        dead |= bounced\n",
           "",
           "g-broker-failure", "a broker that restarted with a new session is not handled as failed"),
    Mutant("controller-epoch-not-incremented", CTRL,
           "                new = int(data.decode() or 0) + 1",
           "                new = int(data.decode() or 0)",
           "g-controller-epoch", "a new controller does not raise the controller epoch"),
    # -- metadata and the protocol ----------------------------------------------------------------------
    Mutant("update-metadata-ignored", RM,
           "        self.metadata.update(req)",
           "        pass",
           "g-metadata", "brokers never learn the controller's metadata updates"),
    Mutant("produce-offset-off-by-one", APIS,
           "                r[1], r[2] = err, base",
           "                r[1], r[2] = err, base + 1 if base >= 0 else base",
           "g-offsets", "the acknowledged offset is one past where the record is"),
    Mutant("corrupt-batch-accepted", BATCH,
           "    if crc != h.crc:",
           "    if crc != h.crc and False:",
           "g-log", "batches that fail their CRC are appended and survive recovery"),
    Mutant("added-partitions-never-elected", CTRL,
           "            log.info(\"controller %d: added partitions %s to topic %s\", self.broker_id, sorted(adds), t)\n"
           "            self._on_new_partitions(tps)",
           "            log.info(\"controller %d: added partitions %s to topic %s\", self.broker_id, sorted(adds), t)",
           "g-recovery", "partitions added to a topic are assigned but never get a leader"),
    Mutant("reregistration-keeps-deleted-replicas", "cluster/controller/coordination.py",
           "        self.rm.delete_unassigned(await self.assigned_replicas())\n",
           "",
           "g-topics", "a broker that registers again after its session expired keeps the "
                       "replicas of topics deleted meanwhile (and leads them)"),
    Mutant("topic-id-ignored", "cluster/server/replica_manager.py",
           "    return bool(local_id and topic_id and local_id != topic_id)",
           "    return False",
           "g-topics", "a replica of a deleted topic is kept as the replica of the topic created "
                       "again under its name: the old log comes back"),
    # -- consumer groups (docs/design.md#groups; suites/test_suite_groups.py) -------------------
    Mutant("commit-stale-generation-accepted", "cluster/server/group_coordinator.py",
           "        if generation_id != group.generation_id:\n            return all_(E.ILLEGAL_GENERATION)",
           "        if False:\n            return all_(E.ILLEGAL_GENERATION)",
           "groups", "a member of a former generation commits over its successor's offsets"),
    Mutant("commit-acked-before-replicated", "cluster/server/group_metadata_manager.py",
           "        if err == E.NONE and p.hw < required:",
           "        if False and p.hw < required:",
           "groups", "a commit is acknowledged once the coordinator appended it, before the "
                     "offsets partition's ISR holds it: a coordinator failure loses it"),
    Mutant("offsets-load-first-record-wins", "cluster/server/group_metadata_manager.py",
           "            group[(key.topic, key.partition)] = value",
           "            group.setdefault((key.topic, key.partition), value)",
           "groups", "a new coordinator loads a partition's first commit, not its last: "
                     "committed offsets go back after a failover"),
    Mutant("member-never-expires", "cluster/server/group_coordinator.py",
           "                or member.latest_heartbeat_ms + member.session_timeout_ms > deadline):",
           "                or member.latest_heartbeat_ms + member.session_timeout_ms >= deadline):",
           "groups", "a member that stopped heartbeating keeps its partitions for good"),
    Mutant("waiting-member-expires", "cluster/server/group_coordinator.py",
           "        if (member.awaiting_join is not None or member.awaiting_sync is not None",
           "        if (member.awaiting_sync is not None",
           "groups", "a member waiting in a JoinGroup is removed for missing heartbeats meanwhile"),
    Mutant("sync-delivers-leader-assignment", "cluster/server/group_coordinator.py",
           '                m.assignment = assignments.get(m.member_id, b"")',
           '                m.assignment = assignments.get(member_id, b"")',
           "groups", "every member gets the leader's assignment: partitions consumed twice, "
                     "others never"),
    Mutant("unloaded-join-never-answered", "cluster/server/group_coordinator.py",
           "            if previous is S.PREPARING_REBALANCE and m.awaiting_join is not None:",
           "            if False and m.awaiting_join is not None:",
           "groups", "a JoinGroup waiting when its coordinator lost the offsets partition is "
                     "never answered, so its member never finds the new coordinator"),
    Mutant("any-broker-coordinates", "cluster/server/group_metadata_manager.py",
           "        if owned is None:\n            return E.NOT_COORDINATOR",
           "        if owned is None:\n            return E.NONE",
           "groups", "a broker that does not lead the group's offsets partition serves the "
                     "group: two coordinators, two memberships"),
    Mutant("offset-fetch-another-group", "cluster/server/group_metadata_manager.py",
           "        group = self.groups.get(group_id)\n        known = {}",
           "        group = self.groups.get(group_id) or next(iter(self.groups.values()), None)\n"
           "        known = {}",
           "groups", "OffsetFetch for a group without commits answers another group's offsets"),
    Mutant("group-partition-plain-abs", "cluster/server/offsets_topic.py",
           "    return (0 if h == -(1 << 31) else abs(h)) % partitions",
           "    return abs(h) % partitions",
           "groups", "a group whose hash is Integer.MIN_VALUE maps to another partition than "
                     "Kafka's Utils.abs gives it"),
]
