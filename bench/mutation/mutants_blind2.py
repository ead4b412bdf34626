"""A third batch of hand-written one-spot bugs in cluster/ ("blind 2"), 2026-11-28.

Written blind: the author read only cluster/**, docs/design.md,
docs/architecture.md, bench/mutation/runner.py and the docstring header of
bench/mutation/mutants_blind.py; never the suites, the tests, the other
mutant lists, the results, docs/anomalies.md or the git history, and ran no
test. So this batch says how well the chaos suites catch the bugs an
outsider would plausibly write, in the areas the brief named: controlled
shutdown, reassignment (controller mode and V2), V2 election and
state-change queues, ISR expansion and shrink, truncation (`hw` and
`leader-epoch`), log recovery and indexes, the group coordinator and the
admin API.

Two lists: MUTANTS_BLIND_2 are bugs in code the controller mode runs
(measured with the default `suites` target); MUTANTS_BLIND_2_V2 are bugs in
cluster/v2/ (measured with the `v2` target: the suites in V2 mode).

Format: each Mutant replaces `find` (which occurs exactly once in `file`) by
`replace`; `breaks` names the docs/design.md guarantee anchor the bug breaks
and `note` says, in one line, how a user of the cluster would see it. Ids
start with "b2-" so that they never clash with the other batches.
"""
from __future__ import annotations
from mutants import Mutant   # the dataclass: id, file, find, replace, breaks, note, equivalent

MUTANTS_BLIND_2: list[Mutant] = [
    # -- controlled shutdown (controller and broker side) -----------------------------------
    Mutant(
        id="b2-cs-leader-out-of-sync",
        file="cluster/controller/leader_selectors.py",
        find="    candidates = [r for r in assigned if r in new_isr and r in live]\n",
        replace="    candidates = [r for r in assigned if r in live]\n",
        breaks="g-durability",
        note="a controlled shutdown can hand leadership to a live follower outside the ISR: "
             "acknowledged acks=all records disappear and the leader is not in its own ISR",
    ),
    Mutant(
        id="b2-cs-lai-to-isr-only",
        file="cluster/controller/leader_selectors.py",
        find="    recipients = tuple(r for r in assigned if r in live and r not in shutting_down)\n",
        replace="    recipients = tuple(r for r in assigned if r in new_isr and r in live)\n",
        breaks="g-isr-liveness",
        note="after a controlled shutdown a lagging follower is never told the new leader: it "
             "keeps fetching from the stopped broker and never rejoins the ISR",
    ),
    Mutant(
        id="b2-cs-broker-ignores-remaining",
        file="cluster/controller/coordination.py",
        find="                if resp.error == E.NONE and not resp.partitions_remaining:\n",
        replace="                if resp.error == E.NONE:\n",
        breaks="g-broker-failure",
        note="a SIGTERMed broker stops on the first answer although it still leads partitions "
             "(no retry): they go offline instead of moving once a follower catches up",
    ),

    # -- partition reassignment, controller mode ----------------------------------------------
    Mutant(
        id="b2-reassign-no-epoch-bump",
        file="cluster/controller/reassignment.py",
        find="            return LeaderAndIsr(cur.leader, cur.leader_epoch + 1, cur.isr, ctx.epoch), None\n",
        replace="            return LeaderAndIsr(cur.leader, cur.leader_epoch, cur.isr, ctx.epoch), None\n",
        breaks="g-recovery",
        note="starting the new replicas reuses the leader epoch, so the leader ignores the "
             "LeaderAndIsr naming them: they never join the ISR, the reassignment never "
             "completes, and the leader's stale zkVersion fences it at its next ISR change",
    ),
    Mutant(
        id="b2-reassign-old-replicas-stay-in-isr",
        file="cluster/controller/reassignment.py",
        find="            isr = tuple(b for b in cur.isr if b in rar) or tuple(cur.isr)\n",
        replace="            isr = tuple(cur.isr)\n",
        breaks="g-isr",
        note="after a reassignment the deleted old replicas are still listed in the ISR "
             "(ISR not within the assigned replicas); acks=all writes stall until they lag out",
    ),
    Mutant(
        id="b2-reassign-keeps-leader-outside-rar",
        file="cluster/controller/reassignment.py",
        find="        if lai.leader in rar and lai.leader in ctx.live_ids():\n            return True\n",
        replace="        if lai.leader in ctx.live_ids():\n            return True\n",
        breaks="g-isr",
        note="moving a partition off its leader keeps that leader: it is dropped from its own "
             "ISR and its replica deleted, leaving the partition without a working leader",
    ),

    # -- ISR expansion and shrink -------------------------------------------------------------
    Mutant(
        id="b2-isr-expand-lagging-follower",
        file="cluster/server/partition.py",
        find="               and r.leo >= self.hw and r.may_join_isr}\n",
        replace="               and r.may_join_isr}\n",
        breaks="g-isr",
        note="when one follower catches up, every other follower that fetched twice joins the "
             "ISR too, even far behind the HW; electing it loses committed records",
    ),
    Mutant(
        id="b2-hw-ignores-unfetched-followers",
        file="cluster/server/partition.py",
        find="                if leo < new:\n                    new = leo\n",
        replace="                if 0 <= leo < new:\n                    new = leo\n",
        breaks="g-hw",
        note="a new leader whose followers have not fetched yet moves the HW to its own LEO: "
             "acks=all writes are acknowledged by the leader alone and lost if it dies next",
    ),
    Mutant(
        id="b2-isr-shrink-by-last-fetch",
        file="cluster/server/partition.py",
        find="            elif now_ms - r.last_caught_up_ms > lag_ms:\n",
        replace="            elif now_ms - r.last_fetch_ms > lag_ms:\n",
        breaks="g-isr-liveness",
        note="a follower that keeps fetching but never catches up (slow link) stays in the ISR "
             "for good, holding every acks=all write back",
    ),
    Mutant(
        id="b2-isr-join-after-one-fetch",
        file="cluster/server/partition.py",
        find="        return self.fetches >= 2 and self.leo >= 0\n",
        replace="        return self.fetches >= 1 and self.leo >= 0\n",
        breaks="g-isr-liveness",
        note="a follower taken out by a controlled shutdown is put back into the ISR by its "
             "last in-flight fetch, and acks=all writes wait for a stopped broker",
    ),

    # -- truncation (hw and leader-epoch), fencing --------------------------------------------
    Mutant(
        id="b2-le-same-leader-no-truncation",
        file="cluster/server/replica_manager.py",
        find="        same_leader = (self.truncation == \"hw\" and not p.is_leader\n",
        replace="        same_leader = (not p.is_leader\n",
        breaks="g-replicas-agree",
        note="with leader-epoch truncation a follower that missed epochs of other leaders and "
             "is told to follow its old leader again keeps its stale tail: replicas diverge",
    ),
    Mutant(
        id="b2-kip279-truncate-to-own-leo",
        file="cluster/server/fetcher.py",
        find="                self._truncated(tp, s, p, min(leader_end, f_end),\n",
        replace="                self._truncated(tp, s, p, min(leader_end, leo),\n",
        breaks="g-replicas-agree",
        note="a follower holding epochs the leader never had keeps their records up to the "
             "leader's end of the common epoch: replicas disagree below the HW",
    ),
    Mutant(
        id="b2-fetch-without-leader-epoch",
        file="cluster/server/fetcher.py",
        find="                partition=p, current_leader_epoch=s.leader_epoch, fetch_offset=s.offset,\n",
        replace="                partition=p, current_leader_epoch=-1, fetch_offset=s.offset,\n",
        breaks="g-fencing",
        note="followers no longer name their epoch in Fetch: one the controller could not reach "
             "keeps appending from a leader that led again meanwhile (KAFKA-6880 divergence)",
    ),
    Mutant(
        id="b2-fenced-fetch-counts-leo",
        file="cluster/server/kafka_apis.py",
        find="                    if (p is not None and p.is_leader and fp.fetch_offset <= p.leo\n"
             "                            and p.leader_epoch_error(_current_leader_epoch(fp)) == E.NONE):\n",
        replace="                    if p is not None and p.is_leader and fp.fetch_offset <= p.leo:\n",
        breaks="g-fencing",
        note="a fenced follower's fetch offset still counts as its LEO: a follower with a stale, "
             "divergent log can advance the HW and rejoin the ISR",
    ),
    Mutant(
        id="b2-epoch-end-bisect-left",
        file="cluster/log/epoch_cache.py",
        find="            higher = bisect_right(self._epochs, requested_epoch)\n",
        replace="            higher = bisect_left(self._epochs, requested_epoch)\n",
        breaks="g-durability",
        note="OffsetForLeaderEpoch answers an older epoch's end for an epoch the leader has: "
             "followers truncate committed records while still in the ISR, lost if the leader "
             "dies before they refetch",
    ),
    Mutant(
        id="b2-hw-checkpoint-is-leo",
        file="cluster/server/replica_manager.py",
        find="        return {tp: p.hw for tp, p in self.partitions.items()}\n",
        replace="        return {tp: p.leo for tp, p in self.partitions.items()}\n",
        breaks="g-hw",
        note="the HW checkpoint holds LEOs: a restarted replica starts with HW = LEO, so `hw` "
             "truncation cuts nothing uncommitted and a restarted leader serves uncommitted reads",
    ),

    # -- log recovery and indexes --------------------------------------------------------------
    Mutant(
        id="b2-recovery-allows-offset-jump",
        file="cluster/log/batch.py",
        find="        if expect is not None and h.base_offset != expect:\n",
        replace="        if expect is not None and h.base_offset < expect:\n",
        breaks="g-log",
        note="recovery keeps a batch whose base offset was damaged upwards: the log gets an "
             "offset gap and the replica's offsets no longer match the leader's",
    ),
    Mutant(
        id="b2-recovery-trusts-rp-segment",
        file="cluster/log/log.py",
        find="        first_unflushed = max(0, bisect_right(bases, recovery_point) - 1)\n",
        replace="        first_unflushed = max(0, bisect_right(bases, recovery_point))\n",
        breaks="g-log",
        note="the segment holding the recovery point (usually the active one) is only loaded, "
             "not validated: a corrupt unflushed batch before its last index entry is served",
    ),
    Mutant(
        id="b2-index-lookup-one-past",
        file="cluster/log/index.py",
        find="        i = bisect_right(self._rel, offset - self.base_offset) - 1\n",
        replace="        i = bisect_right(self._rel, offset - self.base_offset + 1) - 1\n",
        breaks="g-offsets",
        note="a fetch of the offset just before an indexed one-record batch returns that later "
             "batch: consumers skip a record, followers stall, a truncation keeps a record",
    ),

    # -- the group coordinator -----------------------------------------------------------------
    Mutant(
        id="b2-commit-any-generation",
        file="cluster/server/group_coordinator.py",
        find="        if generation_id != group.generation_id:\n            return all_(E.ILLEGAL_GENERATION)\n",
        replace="",
        breaks="g-groups",
        note="a member still committing for its previous generation is accepted: committed "
             "offsets of partitions now owned by another member go backwards",
    ),
    Mutant(
        id="b2-member-never-expires",
        file="cluster/server/group_coordinator.py",
        find="                or member.latest_heartbeat_ms + member.session_timeout_ms > deadline):\n",
        replace="                or member.latest_heartbeat_ms + member.session_timeout_ms >= deadline):\n",
        breaks="g-groups",
        note="a consumer that stops heartbeating is never removed: its partitions stay "
             "assigned to it and nobody consumes them",
    ),
    Mutant(
        id="b2-generation-timeout-as-written",
        file="cluster/server/group_metadata_manager.py",
        find="    E.REQUEST_TIMED_OUT: E.REBALANCE_IN_PROGRESS,\n",
        replace="    E.REQUEST_TIMED_OUT: E.NONE,\n",
        breaks="g-groups",
        note="a coordinator that cannot replicate (a deposed one) hands out the assignment once "
             "its write times out: two members own the same partitions",
    ),
    Mutant(
        id="b2-failed-commit-cached",
        file="cluster/server/group_metadata_manager.py",
        find="            if err == E.NONE and not group.is_(GroupState.DEAD):\n",
        replace="            if not group.is_(GroupState.DEAD):\n",
        breaks="g-groups",
        note="a commit that failed (not enough replicas, timed out) is still answered by "
             "OffsetFetch, and after a coordinator failover the offset goes back",
    ),
    Mutant(
        id="b2-groups-served-while-loading",
        file="cluster/server/group_metadata_manager.py",
        find="        return E.NONE if owned.loaded else E.COORDINATOR_LOAD_IN_PROGRESS\n",
        replace="        return E.NONE\n",
        breaks="g-groups",
        note="a new coordinator answers before it loaded the partition: OffsetFetch says "
             "nothing is committed and a group joined meanwhile is replaced by the loaded one",
    ),

    # -- the admin API ------------------------------------------------------------------------
    Mutant(
        id="b2-topic-created-without-id",
        file="cluster/controller/coordination.py",
        find="        data = TopicAssignment({p: tuple(r) for p, r in assignment.items()},\n"
             "                               zkpaths.new_topic_id()).encode()\n",
        replace="        data = TopicAssignment({p: tuple(r) for p, r in assignment.items()}).encode()\n",
        breaks="g-topics",
        note="topics get no topic id: a topic deleted while a replica's broker was down and "
             "created again on the same brokers serves the old topic's records",
    ),
    Mutant(
        id="b2-admin-assignment-to-dead-broker",
        file="cluster/server/admin_apis.py",
        find="        unknown = sorted(set(replicas) - set(live))\n",
        replace="        unknown = sorted(b for b in set(replicas) if b < 0)\n",
        breaks="g-recovery",
        note="CreateTopics/CreatePartitions accept an explicit assignment naming brokers that "
             "are not live (or do not exist): those partitions never get their full ISR",
    ),

    # -- controller epoch, the unclean-election switch ------------------------------------------
    Mutant(
        id="b2-broker-forgets-controller-epoch",
        file="cluster/server/replica_manager.py",
        find="            return False\n        self.controller_epoch = epoch\n        return True\n",
        replace="            return False\n        return True\n",
        breaks="g-controller-epoch",
        note="brokers never remember the newest controller epoch: a deposed controller's late "
             "LeaderAndIsr/UpdateMetadata are applied over its successor's",
    ),
    Mutant(
        id="b2-no-leader-clears-isr",
        file="cluster/controller/leader_selectors.py",
        find="    return LeaderChoice(NO_LEADER, tuple(current.isr), live_ar)\n",
        replace="    return LeaderChoice(NO_LEADER, (), live_ar)\n",
        breaks="g-recovery",
        note="with unclean election off, a partition whose whole ISR died stays offline for "
             "good: its ISR was emptied, so the returning in-sync replica may not lead",
    ),
]


MUTANTS_BLIND_2_V2: list[Mutant] = [
    # -- reassignment in V2 (the leader's part, the admin command) ------------------------------
    Mutant(
        id="b2v2-reassign-isr-keeps-old",
        file="cluster/v2/coordinator.py",
        find="                                       tuple(b for b in sorted(p.isr) if b in rar))\n",
        replace="                                       tuple(sorted(p.isr)))\n",
        breaks="g-isr",
        note="the epoch that ends a V2 move keeps the old replicas in the ISR after they are "
             "closed: ISR outside the replicas, acks=all stalls until they lag out",
    ),
    Mutant(
        id="b2v2-reassign-skips-catch-up",
        file="cluster/v2/coordinator.py",
        find="        if not set(rar) <= p.isr:\n            return\n",
        replace="        if not set(rar) <= set(p.replicas):\n            return\n",
        breaks="g-durability",
        note="the leader finishes a move before the new replicas caught up: the old ones are "
             "closed while the new ones hold nothing, and the data is lost or the partition "
             "left without an eligible leader",
    ),
    Mutant(
        id="b2v2-admin-reassign-over-pending",
        file="cluster/v2/admin.py",
        find="        mark = reassigning_to(zk, t, p)\n"
             "        if mark is not None and mark != ar:\n"
             "            raise V2AdminError(f\"{t}-{p} is already being changed (to {list(mark)}); \"\n"
             "                               \"wait until that is done\")\n",
        replace="",
        breaks="g-isr",
        note="a second reassignment (or one during a create/delete) overwrites a pending mark: "
             "replicas started for the first move are orphaned, possibly still in the ISR",
    ),

    # -- V2 election and the state-change queue -------------------------------------------------
    Mutant(
        id="b2v2-unclean-switch-ignored",
        file="cluster/v2/election.py",
        find="    return unclean and not (set(state.isr) & live)\n",
        replace="    return not (set(state.isr) & live)\n",
        breaks="g-durability",
        note="with unclean.leader.election.enable=false an out-of-sync replica still takes the "
             "lock once no ISR member is registered: acknowledged records are lost",
    ),
    Mutant(
        id="b2v2-preferred-always-eligible",
        file="cluster/v2/election.py",
        find="    if state is None or not state.isr:\n        return True\n",
        replace="    if state is None or not state.isr or broker_id == replicas[0]:\n        return True\n",
        breaks="g-durability",
        note="the preferred replica may lead even when out of sync (it goes first): back from "
             "a restart it takes the lock with a short log and the others truncate to it",
    ),
    Mutant(
        id="b2v2-election-same-epoch",
        file="cluster/v2/election.py",
        find="    return LeaderAndIsr(broker_id, state.leader_epoch + 1, isr, V2_CONTROLLER_EPOCH,\n",
        replace="    return LeaderAndIsr(broker_id, state.leader_epoch, isr, V2_CONTROLLER_EPOCH,\n",
        breaks="g-epochs",
        note="a re-elected partition keeps the old leader epoch in leaderAndISR while the lock "
             "says one more: the new leader and its followers disagree on the epoch and "
             "followers are refused",
    ),
    Mutant(
        id="b2v2-queue-removed-before-acting",
        file="cluster/v2/coordinator.py",
        find="                await self._act(request)\n"
             "                await self.zk.call(self.queue.remove, request.name)\n",
        replace="                await self.zk.call(self.queue.remove, request.name)\n"
             "                await self._act(request)\n",
        breaks="g-topics",
        note="a broker that dies between taking a state-change request and acting on it loses "
             "it: a close-replica of a deleted or removed partition is never carried out",
    ),

    # -- the V2 admin commands ------------------------------------------------------------------
    Mutant(
        id="b2v2-delete-marks-replicas",
        file="cluster/v2/admin.py",
        find="        _mark(zk, topic, p, [])\n",
        replace="        _mark(zk, topic, p, parts[p])\n",
        breaks="g-topics",
        note="a deletion marks partitions with their replicas instead of []: a broker reading "
             "the cluster restarts the replica it just closed, and it outlives the deletion "
             "(a re-added partition then comes back with its old records)",
    ),
]
