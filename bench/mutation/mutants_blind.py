"""A second, independent batch of hand-written one-spot bugs in cluster/.

Written blind: the author read only cluster/**, docs/design.md and
docs/architecture.md, never the suites, the tests, the first mutant batch or
any results, so that this batch says how well the chaos suites catch bugs
that an outsider would write rather than the ones their authors had in mind.

Format: each Mutant replaces `find` (which occurs exactly once in `file`) by
`replace`; `breaks` names the docs/design.md guarantee anchor the bug breaks
and `note` says, in one line, how a user of the cluster would see it.
"""
from __future__ import annotations
from mutants import Mutant   # the dataclass: id, file, find, replace, breaks, note, equivalent

MUTANTS_BLIND: list[Mutant] = [
    # -- cluster/server/partition.py ------------------------------------------------------
    Mutant("hw-skips-unfetched-follower", "cluster/server/partition.py",
           "                if leo < new:\n"
           "                    new = leo",
           "                if 0 <= leo < new:\n"
           "                    new = leo",
           "g-hw", "right after a leader change (followers' LEOs still unknown) the HW jumps to the "
                   "leader's LEO and acks=all writes are acknowledged by the leader alone"),
    Mutant("produce-required-offset-inclusive", "cluster/server/partition.py",
           "        return E.NONE, first, last + 1",
           "        return E.NONE, first, last",
           "g-durability", "a non-idempotent acks=all batch is acknowledged once the HW reaches its "
                           "last offset, not passes it: a one-record batch is acked before any "
                           "follower has it and is lost when the leader dies"),
    Mutant("truncate-keeps-producer-state", "cluster/server/partition.py",
           "        if self.hw > self.leo:\n"
           "            self.hw = self.leo\n"
           "        self.rebuild_producer_state()\n"
           "        return True",
           "        if self.hw > self.leo:\n"
           "            self.hw = self.leo\n"
           "        return True",
           "g-idempotence", "after a follower truncates, it still remembers the removed idempotent "
                            "batches; once it leads, a retry of one is answered as a duplicate at "
                            "an offset holding another record, and the write is lost"),
    Mutant("make-follower-keeps-waiters", "cluster/server/partition.py",
           "        self.remotes = {}\n"
           "        if was_leader:\n"
           "            self.hw_waiters.fail_all(E.NOT_LEADER_FOR_PARTITION)\n",
           "        self.remotes = {}\n",
           "g-durability", "acks=all requests waiting on a leader that became follower stay parked; "
                           "if it leads again within the timeout they are acknowledged for offsets "
                           "whose records were truncated meanwhile"),

    # -- cluster/server/replica_manager.py -------------------------------------------------
    Mutant("partition-min-isr-not-set", "cluster/server/replica_manager.py",
           "        p.min_isr = self.min_isr\n",
           "",
           "g-min-isr", "an acks=all write that waited while the ISR shrank below min.insync.replicas "
                        "is acknowledged instead of NOT_ENOUGH_REPLICAS_AFTER_APPEND"),
    Mutant("controller-epoch-not-remembered", "cluster/server/replica_manager.py",
           "            return False\n"
           "        self.controller_epoch = epoch\n"
           "        return True",
           "            return False\n"
           "        return True",
           "g-controller-epoch", "brokers never learn the newest controller epoch, so a deposed "
                                 "controller's late LeaderAndIsr/UpdateMetadata are applied over its "
                                 "successor's"),
    Mutant("leader-epoch-truncation-typo", "cluster/server/replica_manager.py",
           'epochs = self.truncation == "leader-epoch"',
           'epochs = self.truncation == "leader_epoch"',
           "g-replicas-agree", "with replication.truncation=leader-epoch a new follower never "
                               "truncates: a former leader keeps its unreplicated tail and the "
                               "replicas diverge"),
    Mutant("isr-changed-before-zk-write", "cluster/server/replica_manager.py",
           "        p.isr_update_in_flight = True\n"
           "        asyncio.get_running_loop().create_task(self._write_isr(p, new_isr, why))",
           "        p.isr_update_in_flight = True\n"
           "        p.isr = new_isr\n"
           "        asyncio.get_running_loop().create_task(self._write_isr(p, new_isr, why))",
           "g-fencing", "a leader cut off from ZooKeeper and the new leader shrinks its ISR to itself "
                        "in memory before the (failing) write and acknowledges acks=all writes "
                        "that are lost"),

    # -- cluster/server/fetcher.py -------------------------------------------------------------
    Mutant("kip101-truncate-to-max", "cluster/server/fetcher.py",
           "                self._truncated(tp, s, p, min(leader_end, f_end),",
           "                self._truncated(tp, s, p, max(leader_end, f_end),",
           "g-replicas-agree", "a former leader keeps the records it wrote after the new leader's "
                               "epoch began; its log and the leader's differ below the HW"),

    # -- cluster/server/kafka_apis.py ----------------------------------------------------------
    Mutant("follower-fetch-hw-is-leo", "cluster/server/kafka_apis.py",
           "                        hw, log_start = p.hw, p.log.log_start_offset",
           "                        hw = p.leo if replica_id >= 0 else p.hw\n"
           "                        log_start = p.log.log_start_offset",
           "g-hw", "followers are told the leader's LEO as the HW and checkpoint it; one elected "
                   "next serves uncommitted records to consumers that a later leader does not have"),

    # -- cluster/server/metadata_cache.py --------------------------------------------------------
    Mutant("update-metadata-replaces-partitions", "cluster/server/metadata_cache.py",
           "        self.brokers = {b.id: (b.host, b.port) for b in req.live_brokers}\n"
           "        deleted = []",
           "        self.brokers = {b.id: (b.host, b.port) for b in req.live_brokers}\n"
           "        self.topics = {}\n"
           "        deleted = []",
           "g-metadata", "an UpdateMetadata for a few partitions wipes every other partition from "
                         "the broker's metadata: clients see UNKNOWN_TOPIC_OR_PARTITION"),

    # -- cluster/server/producer_state.py --------------------------------------------------------
    Mutant("producer-sequence-gap-accepted", "cluster/server/producer_state.py",
           "            if first_seq != expected:",
           "            if first_seq < expected:",
           "g-idempotence", "a batch that skips sequence numbers is appended, so after a leader "
                            "change a later batch lands before an earlier one that is then refused"),

    # -- cluster/server/zk_client.py -------------------------------------------------------------
    Mutant("isr-write-unconditional", "cluster/server/zk_client.py",
           "stat = self.kazoo.set(path, new.encode(), version=new.zk_version)",
           "stat = self.kazoo.set(path, new.encode())",
           "g-fencing", "a deposed leader's ISR shrink overwrites the controller's leaderAndISR "
                        "(old leader and epoch come back) and it commits alone"),
    Mutant("producer-id-block-reused", "cluster/server/zk_client.py",
           'start = int(prev["block_end"]) + 1 if prev else 0',
           'start = int(prev["block_start"]) if prev else 0',
           "g-idempotence", "every broker hands out producer ids from the same block: two producers "
                            "share an id and one's batch is dropped as the other's duplicate or "
                            "refused as out of order"),

    # -- cluster/broker.py ----------------------------------------------------------------------
    Mutant("reregister-keeps-old-start-epoch", "cluster/broker.py",
           "            self.rm.start_epoch = self.start_epoch\n",
           "",
           "g-controller-epoch", "after a session expiry the broker still accepts requests the "
                                 "controller addressed to its previous registration, applying stale "
                                 "metadata over newer"),
    Mutant("startup-ignores-pending-reassignment", "cluster/controller/coordination.py",
           "            if self.broker_id in rar:\n",
           "            if False:\n",
           "g-durability", "a reassignment target that restarts deletes its copy (not yet in the "
                           "assignment) and may then be elected with an empty log"),

    # -- cluster/log/log.py ----------------------------------------------------------------------
    Mutant("follower-append-skips-epoch-cache", "cluster/log/log.py",
           "            for h in headers:\n"
           "                if h.partition_leader_epoch >= 0:\n"
           "                    self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)\n",
           "",
           "g-leader-epoch", "followers never record the epochs of fetched batches: their epoch "
                             "caches disagree with their logs and leader-epoch truncation falls "
                             "back to the HW"),

    # -- cluster/log/segment.py ------------------------------------------------------------------
    Mutant("segment-read-includes-batch-at-hw", "cluster/log/segment.py",
           "                if last >= max_offset:\n"
           "                    break",
           "                if last > max_offset:\n"
           "                    break",
           "g-committed-reads", "a consumer fetch spanning several batches also returns the batch "
                                "ending at the HW, i.e. an uncommitted record"),
    Mutant("segment-truncate-keeps-index", "cluster/log/segment.py",
           "        self.index.truncate_to_position(h.position)\n",
           "",
           "g-log", "after truncating a long tail the index still points into the removed bytes: "
                    "later reads start mid-batch (garbage, CRC errors) or appends fail"),

    # -- cluster/log/epoch_cache.py --------------------------------------------------------------
    Mutant("epoch-end-offset-is-epoch-start", "cluster/log/epoch_cache.py",
           "            return self._epochs[higher - 1], self._starts[higher]",
           "            return self._epochs[higher - 1], self._starts[higher - 1]",
           "g-durability", "OffsetForLeaderEpoch answers where an old epoch starts, not ends: "
                           "in-sync followers truncate committed records and one elected before "
                           "refetching loses them"),
    Mutant("epoch-truncate-keeps-entry-at-end", "cluster/log/epoch_cache.py",
           "            keep = bisect_left(self._starts, end_offset)",
           "            keep = bisect_right(self._starts, end_offset)",
           "g-leader-epoch", "truncation keeps an epoch that starts exactly at the new log end, so "
                             "the cache gives later records the wrong epoch"),

    # -- cluster/log/batch.py --------------------------------------------------------------------
    Mutant("recovery-allows-offset-jump", "cluster/log/batch.py",
           "        if expect is not None and h.base_offset != expect:",
           "        if expect is not None and h.base_offset < expect:",
           "g-log", "recovery keeps a batch whose (CRC-less) baseOffset was damaged upwards: "
                    "offsets jump and records are served at the wrong offsets"),

    # -- cluster/controller/controller.py ---------------------------------------------------------
    Mutant("bounced-broker-not-dead", "cluster/controller/controller.py",
           "        dead |= bounced\n",
           "",
           "g-broker-failure", "a broker that re-registered unseen keeps its leaderships and its "
                               "old controller channel (old address): it may never get requests again"),
    Mutant("failover-forgets-pending-reassignment", "cluster/controller/controller.py",
           "        self.reassigner.load_in_progress()\n",
           "",
           "g-durability", "a controller failover during a reassignment sends INIT LeaderAndIsr "
                           "without the new replicas, and their brokers delete them, maybe the "
                           "only in-sync copies"),
    Mutant("broker-startup-no-election", "cluster/controller/controller.py",
           "        self.rsm.handle(replicas, ReplicaState.ONLINE)\n"
           "        self.psm.trigger_online_state_change()\n",
           "        self.rsm.handle(replicas, ReplicaState.ONLINE)\n",
           "g-broker-failure", "a partition whose whole ISR died stays leaderless when an ISR "
                               "member comes back"),
    Mutant("isr-notification-no-metadata", "cluster/controller/controller.py",
           "        if tps:\n"
           "            self.batch.add_update_metadata(None, tps)\n",
           "",
           "g-metadata", "ISR changes made by leaders never reach the brokers' metadata: clients "
                         "see old ISRs"),

    # -- cluster/controller/partition_state_machine.py -------------------------------------------
    Mutant("online-trigger-skips-new", "cluster/controller/partition_state_machine.py",
           "               if s in (P.NEW, P.OFFLINE) and tp[0] not in deleting]",
           "               if s is P.OFFLINE and tp[0] not in deleting]",
           "g-broker-failure", "a partition created or added while its replicas were down (or "
                               "left without leaderAndISR by a dying controller) never gets a leader"),
    Mutant("election-tells-only-leader", "cluster/controller/partition_state_machine.py",
           "            self.batch.add_leader_and_isr(choice.recipients, tp, lai, ctx.replicas_for_request(tp))",
           "            self.batch.add_leader_and_isr([lai.leader], tp, lai, ctx.replicas_for_request(tp))",
           "g-recovery", "after an election only the new leader is told; followers keep fetching "
                         "from the old one and the ISR stays shrunk"),

    # -- cluster/controller/replica_state_machine.py ---------------------------------------------
    Mutant("isr-removal-not-sent-to-leader", "cluster/controller/replica_state_machine.py",
           "            self.batch.add_leader_and_isr(recipients, tp, lai, ctx.replicas_for_request(tp))",
           "            self.batch.add_update_metadata(None, [tp])",
           "g-recovery", "when the controller takes a dead follower out of an ISR the leader is not "
                         "told the new zkVersion; its next ISR write fails and it stays fenced"),

    # -- cluster/controller/leader_selectors.py --------------------------------------------------
    Mutant("offline-election-isr-all-live", "cluster/controller/leader_selectors.py",
           "        return LeaderChoice(ordered[0], tuple(live_isr), _live(assigned, live))",
           "        return LeaderChoice(ordered[0], _live(assigned, live), _live(assigned, live))",
           "g-isr", "after a leader failure every live replica, in sync or not, is written into the "
                    "ISR and may be elected next with missing records"),
    Mutant("controlled-shutdown-ignores-isr", "cluster/controller/leader_selectors.py",
           "    candidates = [r for r in assigned if r in new_isr and r in live]",
           "    candidates = [r for r in assigned if r not in shutting_down and r in live]",
           "g-durability", "a controlled shutdown can hand leadership to an out-of-sync replica; "
                           "acknowledged writes disappear"),
    Mutant("preferred-election-ignores-isr", "cluster/controller/leader_selectors.py",
           "    if preferred not in live or preferred not in current.isr:",
           "    if preferred not in live:",
           "g-durability", "a preferred replica election elects the preferred replica even while "
                           "it is out of sync; acknowledged writes disappear"),

    # -- cluster/controller/reassignment.py ------------------------------------------------------
    Mutant("reassignment-proceeds-on-partial-isr", "cluster/controller/reassignment.py",
           "        if not set(r.new_replicas) <= set(lai.isr):",
           "        if not set(r.new_replicas) & set(lai.isr):",
           "g-durability", "a reassignment deletes the old replicas as soon as one new replica is "
                           "in sync, leaving committed records on fewer replicas than promised"),
    Mutant("reassignment-start-no-epoch-bump", "cluster/controller/reassignment.py",
           "            return LeaderAndIsr(cur.leader, cur.leader_epoch + 1, cur.isr, ctx.epoch), None",
           "            return LeaderAndIsr(cur.leader, cur.leader_epoch, cur.isr, ctx.epoch), None",
           "g-recovery", "the leader ignores the reassignment's LeaderAndIsr (same epoch): new "
                         "replicas never join the ISR and the leader gets fenced; the reassignment "
                         "never finishes"),
    Mutant("reassignment-ar-cache-stale", "cluster/controller/reassignment.py",
           "        ctx.set_assignment(tp, rar)\n",
           "",
           "g-isr", "after a reassignment the controller keeps the old replica list: metadata shows "
                    "the old replicas and later LeaderAndIsr bring removed replicas back into the ISR"),

    # -- cluster/controller/context.py -----------------------------------------------------------
    Mutant("lai-replicas-omit-reassignment-targets", "cluster/controller/context.py",
           "        if r is None:\n"
           "            return ar",
           "        if r is None or r.last_step < 4:\n"
           "            return ar",
           "g-recovery", "LeaderAndIsr requests list only the old replicas until step 4, so new "
                         "replicas are never created and the reassignment hangs"),

    # -- cluster/controller/request_batch.py -----------------------------------------------------
    Mutant("requests-without-broker-epoch", "cluster/controller/request_batch.py",
           '        return {"broker_id": b, "broker_epoch": reg.start_epoch if reg else -1}',
           '        return {"broker_id": b, "broker_epoch": -1}',
           "g-controller-epoch", "controller requests no longer name the broker incarnation: one "
                                 "queued before a broker was cut off is applied after newer ones"),

    # -- cluster/controller/channel_manager.py ---------------------------------------------------
    Mutant("channel-drops-failed-request", "cluster/controller/channel_manager.py",
           "                backoff = min(backoff * 2, self.manager.backoff_max)\n"
           "                continue",
           "                backoff = min(backoff * 2, self.manager.backoff_max)\n"
           "                with self.cond:\n"
           "                    if self.queue and self.queue[0][0] is request:\n"
           "                        self.queue.popleft()\n"
           "                continue",
           "g-recovery", "a control request that hits a network error is dropped instead of "
                         "retried: a broker never learns it leads, or keeps stale metadata"),

    # -- cluster/controller/zk_store.py ----------------------------------------------------------
    Mutant("controller-epoch-fence-inverted", "cluster/controller/zk_store.py",
           "        check = fenced and self.epoch_version is not None",
           "        check = fenced and self.epoch_version is None",
           "g-controller-epoch", "an active controller's writes no longer check /controller_epoch: a "
                                 "paused controller whose session was renewed overwrites its "
                                 "successor's leaderAndISR"),
    Mutant("written-lai-keeps-old-zk-version", "cluster/controller/zk_store.py",
           "                ok[tp] = LeaderAndIsr(v.leader, v.leader_epoch, v.isr, v.controller_epoch, r.version)",
           "                ok[tp] = LeaderAndIsr(v.leader, v.leader_epoch, v.isr, v.controller_epoch, v.zk_version)",
           "g-recovery", "leaders are sent the zkVersion before the controller's write; their first "
                         "ISR change fails and they stop taking writes until the next election"),
]
