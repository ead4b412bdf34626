"""Partition state machine (Kafka 0.8's PartitionStateMachine; KAFKA-42 §5).

  NonExistent -> New          the partition appears in an assignment
  New -> Online               init leaders: first live AR replica leads, live AR = ISR
  Online/Offline -> Online    elect with a leader selector (self transition: KAFKA-42 §5,
                              for preferred election, reassignment, controlled shutdown)
  New/Online/Offline -> Offline   the leader died (or the partition is being removed)
  Offline -> NonExistent      deleted

An illegal transition is logged as an error and changes nothing. Every
transition to Online writes leaderAndISR conditionally on its zkVersion, in
batches (zk_store), re-reading and retrying a partition whose znode changed
meanwhile (docs/design.md#partition-states), then adds a LeaderAndIsr for the
partition's live replicas to the event's request batch."""
from __future__ import annotations

import enum
import logging
from typing import Any, Callable, Iterable

from cluster.zkpaths import NO_LEADER, LeaderAndIsr

from .context import TP, ControllerContext
from .leader_selectors import LeaderChoice, NoLeaderError, init_leader
from .request_batch import RequestBatch
from .state_change_log import StateChangeLog
from .zk_store import ZkStore

log = logging.getLogger("chaoslog.controller")

Selector = Callable[[TP, LeaderAndIsr], LeaderChoice]


class PartitionState(str, enum.Enum):
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"


P = PartitionState
VALID_PREVIOUS: dict[PartitionState, frozenset[PartitionState]] = {
    P.NEW: frozenset({P.NON_EXISTENT}),
    P.ONLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.OFFLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.NON_EXISTENT: frozenset({P.OFFLINE}),
}

MAX_ROUNDS = 10


def update_leader_and_isr(store: ZkStore, ctx: ControllerContext, tps: Iterable[TP],
                          compute: Callable[[TP, LeaderAndIsr], tuple[LeaderAndIsr, Any] | None]
                          ) -> tuple[dict[TP, tuple[LeaderAndIsr, Any]], dict[TP, str]]:
    """Read-modify-write leaderAndISR of many partitions: read them fresh
    (pipelined), compute each new value (compute returns (value, info), None
    for "no change", or raises NoLeaderError), write all conditionally in
    multi batches; re-read and recompute those whose version moved.
    Returns ({tp: (written value with new zk_version, info)}, {tp: why failed}).
    Partitions computed as "no change" are in neither but their fresh value is
    put in ctx.leaders."""
    ok: dict[TP, tuple[LeaderAndIsr, Any]] = {}
    failed: dict[TP, str] = {}
    remaining = list(dict.fromkeys(tps))
    for _ in range(MAX_ROUNDS):
        if not remaining:
            break
        current = store.read_leader_and_isr(remaining)
        updates: dict[TP, LeaderAndIsr] = {}
        infos: dict[TP, Any] = {}
        for tp in remaining:
            cur = current.get(tp)
            if cur is None:
                failed[tp] = "no leaderAndISR znode"
                continue
            ctx.leaders[tp] = cur
            try:
                res = compute(tp, cur)
            except NoLeaderError as e:
                failed[tp] = str(e)
                continue
            if res is None:
                continue
            new, info = res
            updates[tp] = LeaderAndIsr(new.leader, new.leader_epoch, tuple(new.isr),
                                       new.controller_epoch, cur.zk_version)
            infos[tp] = info
        written, conflicts = store.update_leader_and_isr(updates)
        for tp, v in written.items():
            ctx.leaders[tp] = v
            ok[tp] = (v, infos[tp])
        remaining = sorted(conflicts)
        if remaining:
            log.info("leaderAndISR of %d partitions changed meanwhile; re-reading", len(remaining))
    for tp in remaining:
        failed[tp] = f"leaderAndISR kept changing ({MAX_ROUNDS} tries)"
    return ok, failed


class PartitionStateMachine:
    """Partition states (docs/design.md#partition-states) and the leader
    elections that move partitions Online. Handed the controller's context,
    its ZooKeeper store, the request batch being collected, the state-change
    log and the selector used when none is named (offline partitions)."""

    def __init__(self, broker_id: int, ctx: ControllerContext, store: ZkStore,
                 batch: RequestBatch, sclog: StateChangeLog, default_selector: Selector) -> None:
        self.broker_id = broker_id
        self.ctx = ctx
        self.store = store
        self.batch = batch
        self.sclog = sclog
        self.default_selector = default_selector
        self.states: dict[TP, PartitionState] = {}

    def state(self, tp: TP) -> PartitionState:
        return self.states.get(tp, P.NON_EXISTENT)

    def clear(self) -> None:
        self.states.clear()

    def initialize(self) -> None:
        """From the context just loaded: leader live -> Online; a leaderAndISR
        with a dead (or no) leader -> Offline; none -> New."""
        ctx = self.ctx
        live = ctx.live_ids()
        self.states.clear()
        for tp in ctx.assignments:
            lai = ctx.leaders.get(tp)
            if lai is None:
                self.states[tp] = P.NEW
            elif lai.leader in live:
                self.states[tp] = P.ONLINE
            else:
                self.states[tp] = P.OFFLINE

    def _set(self, tp: TP, to: PartitionState, lai: LeaderAndIsr | None = None,
             note: str | None = None, level: int = logging.INFO) -> None:
        frm = self.state(tp)
        if to is P.NON_EXISTENT:
            self.states.pop(tp, None)
        else:
            self.states[tp] = to
        lai = lai or self.ctx.leaders.get(tp)
        self.sclog.record("partition", tp[0], tp[1], from_state=frm.value, to_state=to.value,
                               leader=lai.leader if lai else None,
                               leader_epoch=lai.leader_epoch if lai else None,
                               isr=lai.isr if lai else None, note=note, level=level)

    def handle(self, tps: Iterable[TP], target: PartitionState,
               selector: Selector | None = None) -> tuple[set[TP], dict[TP, str]]:
        """Move partitions to `target`; returns (moved, {tp: why not})."""
        legal: list[TP] = []
        failed: dict[TP, str] = {}
        for tp in tps:
            cur = self.state(tp)
            if cur not in VALID_PREVIOUS[target]:
                msg = f"illegal partition state change {cur.value} -> {target.value}"
                log.error("controller %d: %s for %s", self.broker_id, msg, tp)
                failed[tp] = msg
                continue
            legal.append(tp)
        done: set[TP] = set()
        if target is P.ONLINE:
            new = [tp for tp in legal if self.state(tp) is P.NEW]
            old = [tp for tp in legal if self.state(tp) is not P.NEW]
            d, f = self._init_leaders(new)
            done |= d
            failed.update(f)
            d, f = self.elect(old, selector or self.default_selector)
            done |= d
            failed.update(f)
        else:
            for tp in legal:
                self._set(tp, target)
                done.add(tp)
        return done, failed

    def _init_leaders(self, tps: list[TP]) -> tuple[set[TP], dict[TP, str]]:
        ctx = self.ctx
        live = ctx.live_ids()
        creates: dict[TP, LeaderAndIsr] = {}
        failed: dict[TP, str] = {}
        for tp in tps:
            try:
                choice = init_leader(ctx.assignments[tp], live)
            except NoLeaderError as e:
                failed[tp] = str(e)
                continue
            creates[tp] = LeaderAndIsr(choice.leader, 0, choice.isr, ctx.epoch)
        if failed:
            log.warning("controller %d: %d new partitions have no live replica yet, e.g. %s: %s",
                        self.broker_id, len(failed), *next(iter(failed.items())))
        created, existing = self.store.create_leader_and_isr(creates) if creates else ({}, set())
        done: set[TP] = set()
        for tp, lai in created.items():
            ctx.leaders[tp] = lai
            self._set(tp, P.ONLINE, lai)
            self.batch.add_leader_and_isr(ctx.replicas_for_request(tp), tp, lai,
                                          ctx.replicas_for_request(tp))
            done.add(tp)
        if existing:
            # Someone (a previous controller) initialized them already: adopt
            # the znode; elect only if its leader is gone.
            current = self.store.read_leader_and_isr(existing)
            to_elect = []
            for tp, lai in current.items():
                if lai is None:
                    failed[tp] = "leaderAndISR vanished"
                    continue
                ctx.leaders[tp] = lai
                if lai.leader in live:
                    self._set(tp, P.ONLINE, lai, note="adopted existing leaderAndISR")
                    self.batch.add_leader_and_isr(ctx.replicas_for_request(tp), tp, lai,
                                                  ctx.replicas_for_request(tp))
                    done.add(tp)
                else:
                    self.states[tp] = P.OFFLINE
                    to_elect.append(tp)
            d, f = self.elect(to_elect, self.default_selector)
            done |= d
            failed.update(f)
        return done, failed

    def elect(self, tps: list[TP], selector: Selector) -> tuple[set[TP], dict[TP, str]]:
        """Online/Offline -> Online with `selector`. A choice of leader -1 (no
        candidate) is written too (docs/design.md#partition-states) and
        leaves the partition Offline."""
        ctx = self.ctx
        if not tps:
            return set(), {}

        def compute(tp: TP, cur: LeaderAndIsr):
            choice = selector(tp, cur)
            if choice.leader == NO_LEADER and cur.leader == NO_LEADER and tuple(choice.isr) == tuple(cur.isr):
                raise NoLeaderError("no live replica to lead (leader already -1)")
            return LeaderAndIsr(choice.leader, cur.leader_epoch + 1, choice.isr, ctx.epoch), choice

        written, failed = update_leader_and_isr(self.store, ctx, tps, compute)
        done: set[TP] = set()
        for tp, (lai, choice) in written.items():
            if lai.leader == NO_LEADER:
                self._set(tp, P.OFFLINE, lai, note="no live replica can lead: leader -1",
                          level=logging.WARNING)
                self.batch.add_update_metadata(None, [tp])
                failed[tp] = "no live replica can lead"
                continue
            note = None
            if choice.unclean:
                note = ("UNCLEAN leader election: no live in-sync replica, chose out-of-sync "
                        f"replica {lai.leader}; committed messages may be lost")
                log.warning("controller %d: partition %s-%d: %s", self.broker_id, tp[0], tp[1], note)
            self._set(tp, P.ONLINE, lai, note=note,
                      level=logging.WARNING if choice.unclean else logging.INFO)
            self.batch.add_leader_and_isr(choice.recipients, tp, lai, ctx.replicas_for_request(tp))
            done.add(tp)
        for tp, why in failed.items():
            if tp not in written:
                log.info("controller %d: no new leader for %s-%d: %s", self.broker_id, tp[0], tp[1], why)
        return done, failed

    def trigger_online_state_change(self) -> None:
        """Elect leaders for every New or Offline partition (not being deleted)."""
        deleting = self.ctx.topics_being_deleted
        tps = [tp for tp, s in self.states.items()
               if s in (P.NEW, P.OFFLINE) and tp[0] not in deleting]
        if tps:
            self.handle(sorted(tps), P.ONLINE, self.default_selector)
