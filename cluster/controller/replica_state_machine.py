"""Replica state machine (KAFKA-42 §6, Kafka 0.8's ReplicaStateMachine).

  NonExistent -> New              a replica is created (reassignment, new partition):
                                  it gets a LeaderAndIsr to become a follower
  New/Online/Offline -> Online    started or restarted: it gets the current
                                  LeaderAndIsr of its partition
  New/Online/Offline -> Offline   its broker died or shuts down: StopReplica
                                  (no delete) if the broker is reachable, and it
                                  leaves the ISR (conditional leaderAndISR write)
  Offline -> NonExistent          deleted: StopReplica(delete=true)

Offline -> Offline is allowed (a broker that shut down cleanly then dies), as
in Kafka 0.8.1+. Illegal transitions are logged as errors and change nothing.
We need no other states: a topic's data on a broker that is down during the
delete is removed by that broker at startup (docs/design.md#broker-startup),
not tracked here (Kafka's ReplicaDeletionStarted/... states)."""
from __future__ import annotations

import enum
import logging
from collections import defaultdict
from typing import Any, Iterable

from cluster.zkpaths import NO_LEADER, LeaderAndIsr

from .context import TP, ControllerContext
from .partition_state_machine import update_leader_and_isr
from .request_batch import RequestBatch
from .state_change_log import StateChangeLog
from .zk_store import ZkStore

log = logging.getLogger("chaoslog.controller")


class ReplicaState(str, enum.Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    NON_EXISTENT = "NonExistentReplica"


R = ReplicaState
VALID_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    R.NEW: frozenset({R.NON_EXISTENT}),
    R.ONLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE}),
    R.OFFLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE}),
    R.NON_EXISTENT: frozenset({R.OFFLINE}),
}

Replica = tuple[TP, int]


class ReplicaStateMachine:
    """Replica states (docs/design.md#replica-states) and the requests they
    send. Handed the controller's context, store, request batch and
    state-change log."""

    def __init__(self, broker_id: int, ctx: ControllerContext, store: ZkStore,
                 batch: RequestBatch, sclog: StateChangeLog) -> None:
        self.broker_id = broker_id
        self.ctx = ctx
        self.store = store
        self.batch = batch
        self.sclog = sclog
        self.states: dict[Replica, ReplicaState] = {}

    def state(self, r: Replica) -> ReplicaState:
        return self.states.get(r, R.NON_EXISTENT)

    def clear(self) -> None:
        self.states.clear()

    def initialize(self) -> None:
        live = self.ctx.live_or_shutting_down()
        self.states = {(tp, b): (R.ONLINE if b in live else R.OFFLINE)
                       for tp, ar in self.ctx.assignments.items() for b in ar}

    def _set(self, r: Replica, to: ReplicaState, note: str | None = None) -> None:
        frm = self.state(r)
        if to is R.NON_EXISTENT:
            self.states.pop(r, None)
        else:
            self.states[r] = to
        tp, b = r
        lai = self.ctx.leaders.get(tp)
        self.sclog.record("replica", tp[0], tp[1], from_state=frm.value, to_state=to.value,
                               leader=lai.leader if lai else None,
                               leader_epoch=lai.leader_epoch if lai else None,
                               isr=lai.isr if lai else None, target_broker=b, note=note)

    def handle(self, replicas: Iterable[Replica], target: ReplicaState, *,
               remove_from_isr: bool = True, stop: bool = True) -> set[Replica]:
        """Move replicas to target; returns those moved. For Offline,
        remove_from_isr=False skips the ISR write (the partition is being
        deleted anyway) and stop=False skips the StopReplica(delete=false)."""
        ctx = self.ctx
        legal: list[Replica] = []
        for r in replicas:
            cur = self.state(r)
            if cur not in VALID_PREVIOUS[target]:
                log.error("controller %d: illegal replica state change %s -> %s for %s-%d on broker %d",
                          self.broker_id, cur.value, target.value, r[0][0], r[0][1], r[1])
                continue
            legal.append(r)
        if target in (R.NEW, R.ONLINE):
            # New -> Online sends the LeaderAndIsr again (Kafka 0.8 did not):
            # a replica made New while its broker was down (a reassignment
            # resumed by a new controller) never got the first one, and a
            # broker that did ignores a repeated epoch.
            for tp, b in legal:
                lai = ctx.leaders.get(tp)
                if lai is not None:
                    self.batch.add_leader_and_isr([b], tp, lai, ctx.replicas_for_request(tp))
                self._set((tp, b), target)
        elif target is R.OFFLINE:
            by_tp: dict[TP, set[int]] = defaultdict(set)
            for tp, b in legal:
                if stop:
                    self.batch.add_stop_replica([b], tp, delete=False)
                by_tp[tp].add(b)
            if remove_from_isr:
                self._remove_from_isr(by_tp)
            for r in legal:
                self._set(r, R.OFFLINE)
        elif target is R.NON_EXISTENT:
            for tp, b in legal:
                self.batch.add_stop_replica([b], tp, delete=True)
                self._set((tp, b), R.NON_EXISTENT)
        return set(legal)

    def _remove_from_isr(self, by_tp: dict[TP, set[int]]) -> None:
        """Take offline replicas out of their ISRs (leader epoch + 1, as Kafka's
        removeReplicaFromIsr), and tell the remaining live replicas. The leader
        itself is never removed (its partition was re-elected before) and an
        ISR is never emptied: the last in-sync replica stays, so that when it
        comes back it can be elected cleanly."""
        ctx = self.ctx
        candidates = [tp for tp, bs in by_tp.items()
                      if (lai := ctx.leaders.get(tp)) is not None and bs.intersection(lai.isr)]
        if not candidates:
            return

        def compute(tp: TP, cur: LeaderAndIsr):
            gone = by_tp[tp] - {cur.leader}
            if cur.leader == NO_LEADER:
                return None
            new_isr = tuple(r for r in cur.isr if r not in gone)
            if new_isr == tuple(cur.isr) or not new_isr:
                return None
            return LeaderAndIsr(cur.leader, cur.leader_epoch + 1, new_isr, ctx.epoch), None

        written, failed = update_leader_and_isr(self.store, ctx, candidates, compute)
        for tp, (lai, _) in written.items():
            self.sclog.record("partition", tp[0], tp[1], from_state="isr", to_state="isr",
                              leader=lai.leader, leader_epoch=lai.leader_epoch, isr=lai.isr,
                              note=f"removed offline replicas {sorted(by_tp[tp])} from the ISR")
            recipients = [b for b in ctx.replicas_for_request(tp) if b not in by_tp[tp]]
            self.batch.add_leader_and_isr(recipients, tp, lai, ctx.replicas_for_request(tp))
        for tp, why in failed.items():
            log.warning("controller %d: could not remove %s from the ISR of %s-%d: %s",
                        self.broker_id, sorted(by_tp[tp]), tp[0], tp[1], why)
