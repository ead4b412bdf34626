"""Partition reassignment as KAFKA-42 / Kafka 0.8.0 did it
(docs/design.md#reassignment).

The admin writes /admin/reassign_partitions (all partitions in one znode).
For each partition, with AR its assigned replicas and RAR the requested ones:

  1. watch the partition's leaderAndISR znode (its changes become
     ReassignedPartitionIsrChange events)
  2. start the new replicas RAR - AR: bump the leader epoch and send a
     LeaderAndIsr to AR + RAR whose replica list includes RAR, so the leader
     accepts the new followers (Kafka 0.8.1 added the epoch bump for this)
  3. wait until RAR is a subset of the ISR (on each ISR change, and on the
     reassignment agent's periodic wake-up)
  4. if the leader is not in RAR (or not alive), elect one from RAR
     (reassigned-partition selector)
  5. stop the old replicas AR - RAR: they leave the ISR (leader epoch + 1,
     replica list RAR sent to RAR) and get StopReplica(delete=true)
  6. write AR = RAR to /brokers/topics/[topic]
  7. remove the partition from /admin/reassign_partitions

Every step is idempotent and is its own ZooKeeper write, so a controller that
fails over between any two steps is replaced by one that resumes from the
admin path: it restarts at step 1 and skips what is already true (KAFKA-42
"Partition Reassignment failure cases" 1-5). step_done() (the controller's) is called
after each step; it is where the test hook halts a controller.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

from cluster import zkpaths
from cluster.zkpaths import LeaderAndIsr

from .context import TP, ControllerContext, ReassignmentContext
from .partition_state_machine import (PartitionState, PartitionStateMachine, Selector,
                                      update_leader_and_isr)
from .replica_state_machine import ReplicaState, ReplicaStateMachine
from .request_batch import RequestBatch
from .state_change_log import StateChangeLog
from .zk_store import Op, ZkStore

log = logging.getLogger("chaoslog.controller")


class Reassigner:
    """The reassignment agent. Handed the controller's context, ZooKeeper
    client and store, request batch, state-change log and state machines,
    plus three things of the controller itself: how it registers watches
    (`watch(key, make_event)`), writes a topic's assignment
    (`write_assignment(topic, partitions, extra_ops) -> bool`) and marks a
    step done (`step_done(tp, step)`, where the test hook may halt it)."""

    def __init__(self, broker_id: int, zk: Any, ctx: ControllerContext, store: ZkStore,
                 batch: RequestBatch, sclog: StateChangeLog, psm: PartitionStateMachine,
                 rsm: ReplicaStateMachine, *, selector: Selector,
                 watch: Callable[[str, Callable[[Any], Any]], Callable],
                 write_assignment: Callable[[str, dict[int, tuple[int, ...]], list], bool],
                 step_done: Callable[[TP, int], None]) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.ctx = ctx
        self.store = store
        self.batch = batch
        self.sclog = sclog
        self.psm = psm
        self.rsm = rsm
        self.selector = selector
        self.watch = watch
        self.write_assignment = write_assignment
        self.step_done = step_done

    # -- the admin znode -------------------------------------------------------
    def _read_plan(self) -> tuple[dict[TP, tuple[int, ...]], int]:
        from . import events as ev
        zk = self.zk
        watch = self.watch("reassign", lambda _: ev.PartitionReassigned())
        if zk.exists(zkpaths.REASSIGN_PARTITIONS, watch=watch) is None:
            return {}, -1
        try:
            data, stat = zk.get(zkpaths.REASSIGN_PARTITIONS)
        except NoNodeError:
            return {}, -1
        try:
            return zkpaths.decode_reassignment(data), stat.version
        except (ValueError, KeyError, TypeError, AttributeError):
            log.error("controller %d: unreadable %s: %r; removing it", self.broker_id,
                      zkpaths.REASSIGN_PARTITIONS, data)
            self.store.delete_one(zkpaths.REASSIGN_PARTITIONS, stat.version)
            return {}, -1

    def _remove_from_plan(self, tps: set[TP]) -> None:
        """Conditional rewrite of the admin znode without tps (deleted when empty)."""
        for _ in range(20):
            plan, version = self._read_plan()
            if version < 0 or not tps.intersection(plan):
                return
            rest = {tp: r for tp, r in plan.items() if tp not in tps}
            if rest:
                op = Op("set", zkpaths.REASSIGN_PARTITIONS,
                        zkpaths.encode_reassignment({tp: list(r) for tp, r in rest.items()}), version)
            else:
                op = Op("delete", zkpaths.REASSIGN_PARTITIONS, version=version)
            r = self.store.run([op])[0]
            if not isinstance(r, (BadVersionError, NoNodeError)):
                if isinstance(r, Exception):
                    raise r
                return

    def _validate(self, tp: TP, rar: tuple[int, ...], check_live: bool) -> str | None:
        """KAFKA-42 §4: why this request cannot start, "done" if AR == RAR."""
        if tp not in self.ctx.assignments:
            return "partition does not exist"
        if tp[0] in self.ctx.topics_being_deleted:
            return "topic is being deleted"
        if not rar or len(set(rar)) != len(rar) or min(rar) < 0:
            return f"bad replica list {list(rar)}"
        if tuple(self.ctx.assignments[tp]) == tuple(rar):
            return "done"
        dead = [b for b in rar if b not in self.ctx.live_ids()]
        if check_live and dead:
            return f"new replicas {dead} are not alive"
        return None

    # -- entry points ----------------------------------------------------------
    def load_in_progress(self) -> None:
        """Failover, before the INIT LeaderAndIsr: know which partitions are
        moving so that their new replicas are included."""
        plan, _ = self._read_plan()
        for tp, rar in plan.items():
            if tp in self.ctx.assignments and rar and tuple(rar) != self.ctx.assignments[tp]:
                self.ctx.reassigning[tp] = ReassignmentContext(tuple(rar))

    def resume_all(self) -> None:
        self.on_admin_change(resume=True)

    def on_admin_change(self, resume: bool = False) -> None:
        plan, _ = self._read_plan()
        finished: set[TP] = set()
        for tp, rar in sorted(plan.items()):
            rar = tuple(rar)
            cur = self.ctx.reassigning.get(tp)
            if cur is not None and cur.last_step >= 1:
                if cur.new_replicas != rar:
                    log.error("controller %d: %s-%d is already being reassigned to %s; ignoring "
                              "the new target %s", self.broker_id, *tp, list(cur.new_replicas),
                              list(rar))
                continue
            why = self._validate(tp, rar, check_live=not resume)
            if why == "done":
                # KAFKA-42 case 5: a previous controller got to step 6
                log.info("controller %d: reassignment of %s-%d already complete", self.broker_id, *tp)
                self.ctx.reassigning.pop(tp, None)
                finished.add(tp)
                self.sclog.record("reassignment", tp[0], tp[1], to_state="complete",
                                       note=f"AR already {list(rar)}")
                continue
            if why:
                log.error("controller %d: cannot reassign %s-%d to %s: %s", self.broker_id,
                          tp[0], tp[1], list(rar), why)
                self.sclog.record("reassignment", tp[0], tp[1], to_state="rejected",
                                       note=f"RAR {list(rar)}: {why}", level=logging.ERROR)
                self.ctx.reassigning.pop(tp, None)
                finished.add(tp)
                continue
            self.ctx.reassigning[tp] = ReassignmentContext(rar)
            self.start(tp)
        for tp in [tp for tp in self.ctx.reassigning if tp not in plan]:
            log.warning("controller %d: reassignment of %s-%d was withdrawn from %s; no longer "
                        "tracking it", self.broker_id, *tp, zkpaths.REASSIGN_PARTITIONS)
            self.ctx.reassigning.pop(tp)
        if finished:
            self._remove_from_plan(finished)

    def cancel(self, tps: list[TP], why: str) -> None:
        for tp in tps:
            self.ctx.reassigning.pop(tp, None)
            log.warning("controller %d: reassignment of %s-%d cancelled: %s", self.broker_id,
                        tp[0], tp[1], why)
        self._remove_from_plan(set(tps))

    # -- the steps -------------------------------------------------------------
    def _isr_watch(self):
        from . import events as ev

        def make(event):
            parts = (event.path or "").split("/")
            try:
                return ev.ReassignedPartitionIsrChange((parts[-3], int(parts[-2])))
            except (IndexError, ValueError):
                return None
        return self.watch("reassign-isr", make)

    def start(self, tp: TP) -> None:
        self.step1_watch_isr(tp)
        self.step_done(tp, 1)
        self.step2_start_new_replicas(tp)
        self.step_done(tp, 2)
        self.check(tp)

    def step1_watch_isr(self, tp: TP) -> None:
        self.zk.exists(zkpaths.leader_and_isr_path(*tp), watch=self._isr_watch())

    def step2_start_new_replicas(self, tp: TP) -> None:
        ctx = self.ctx
        rar = ctx.reassigning[tp].new_replicas
        ar = ctx.assignments[tp]
        new = [b for b in rar if b not in ar]

        def bump(_tp: TP, cur: LeaderAndIsr):
            return LeaderAndIsr(cur.leader, cur.leader_epoch + 1, cur.isr, ctx.epoch), None
        written, _ = update_leader_and_isr(self.store, ctx, [tp], bump)
        replicas = ctx.replicas_for_request(tp)
        if tp in written:
            self.batch.add_leader_and_isr(replicas, tp, written[tp][0], replicas)
        fresh = [(tp, b) for b in new if self.rsm.state((tp, b)) is ReplicaState.NON_EXISTENT]
        self.rsm.handle(fresh, ReplicaState.NEW)
        log.info("controller %d: reassigning %s-%d from %s to %s: started replicas %s",
                 self.broker_id, tp[0], tp[1], list(ar), list(rar), new)

    def check(self, tp: TP) -> None:
        """Step 3: is RAR in sync? If so, steps 4-7."""
        ctx = self.ctx
        r = ctx.reassigning.get(tp)
        if r is None or r.last_step < 2:
            return
        try:
            data, stat = self.zk.get(zkpaths.leader_and_isr_path(*tp), watch=self._isr_watch())
        except NoNodeError:
            return
        lai = LeaderAndIsr.decode(data, stat.version)
        ctx.leaders[tp] = lai
        if not set(r.new_replicas) <= set(lai.isr):
            log.info("controller %d: reassignment of %s-%d waits for %s to join the ISR %s",
                     self.broker_id, tp[0], tp[1], sorted(set(r.new_replicas) - set(lai.isr)),
                     list(lai.isr))
            return
        self.step_done(tp, 3)
        if not self.step4_elect_leader(tp):
            return
        self.step_done(tp, 4)
        self.step5_stop_old_replicas(tp)
        self.step_done(tp, 5)
        if not self.step6_write_assignment(tp):
            return
        self.step_done(tp, 6)
        self.step7_remove_admin_entry(tp)

    def step4_elect_leader(self, tp: TP) -> bool:
        ctx = self.ctx
        rar = ctx.reassigning[tp].new_replicas
        lai = ctx.leaders[tp]
        if lai.leader in rar and lai.leader in ctx.live_ids():
            return True
        done, failed = self.psm.handle([tp], PartitionState.ONLINE, self.selector)
        if tp not in done:
            log.error("controller %d: reassignment of %s-%d: no leader from %s: %s",
                      self.broker_id, tp[0], tp[1], list(rar), failed.get(tp))
            return False
        return True

    def step5_stop_old_replicas(self, tp: TP) -> None:
        ctx = self.ctx
        rar = ctx.reassigning[tp].new_replicas
        ctx.reassigning[tp].last_step = max(ctx.reassigning[tp].last_step, 4)
        old = [b for b in ctx.assignments[tp] if b not in rar]

        def shrink(_tp: TP, cur: LeaderAndIsr):
            isr = tuple(b for b in cur.isr if b in rar) or tuple(cur.isr)
            return LeaderAndIsr(cur.leader, cur.leader_epoch + 1, isr, ctx.epoch), None
        written, failed = update_leader_and_isr(self.store, ctx, [tp], shrink)
        if tp in written:
            self.batch.add_leader_and_isr(rar, tp, written[tp][0], rar)
        replicas = [(tp, b) for b in old if self.rsm.state((tp, b)) is not ReplicaState.NON_EXISTENT]
        self.rsm.handle(replicas, ReplicaState.OFFLINE, remove_from_isr=False, stop=False)
        self.rsm.handle(replicas, ReplicaState.NON_EXISTENT)

    def step6_write_assignment(self, tp: TP) -> bool:
        ctx = self.ctx
        rar = ctx.reassigning[tp].new_replicas
        new_ar = dict(ctx.topic_assignment(tp[0]))
        new_ar[tp[1]] = rar
        if not self.write_assignment(tp[0], new_ar, []):
            log.error("controller %d: reassignment of %s-%d: could not write the new AR",
                      self.broker_id, *tp)
            return False
        ctx.set_assignment(tp, rar)
        new = [(tp, b) for b in rar if self.rsm.state((tp, b)) is ReplicaState.NEW]
        self.rsm.handle(new, ReplicaState.ONLINE)
        return True

    def step7_remove_admin_entry(self, tp: TP) -> None:
        self._remove_from_plan({tp})
        self.batch.add_update_metadata(None, [tp])
        self.step_done(tp, 7)
        self.ctx.reassigning.pop(tp, None)
        log.info("controller %d: reassignment of %s-%d complete", self.broker_id, *tp)
