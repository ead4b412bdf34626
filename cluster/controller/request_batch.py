"""ControllerBrokerRequestBatch (Kafka's name): the requests one event causes,
collected while the event runs and sent when it ends, so that each broker gets
at most one LeaderAndIsr, one UpdateMetadata and one StopReplica per delete
flag per event, however many partitions changed (docs/design.md#request-batch).

Per broker the order is LeaderAndIsr, UpdateMetadata, StopReplica (Kafka's
order): a broker learns its new role before it forgets a replica. Different
brokers get theirs in parallel (one sender thread each)."""
from __future__ import annotations

import concurrent.futures
import threading
from collections import defaultdict
from typing import Any, Callable, Iterable

from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.protocol.control import BrokerEndpoint, PartitionState, TopicPartition
from cluster.zkpaths import LeaderAndIsr

from .context import TP, ControllerContext

# UpdateMetadata partition state whose leader is this marks a deleted
# partition: the broker drops it from its metadata cache (Kafka's
# LeaderAndIsr.LeaderDuringDelete).
LEADER_DURING_DELETE = -2


class AckTracker:
    """Counts the responses to one event's requests. `done` resolves when every
    broker answered or was dropped (dead per ZooKeeper); nothing waits on it
    in the event thread."""

    def __init__(self) -> None:
        self.outstanding = 0
        self.errors: list[tuple[int, str, int]] = []  # (broker, request, error)
        self.done: concurrent.futures.Future = concurrent.futures.Future()
        self._lock = threading.Lock()
        self._sealed = False

    def add(self) -> None:
        with self._lock:
            self.outstanding += 1

    def ack(self, broker_id: int, request: Any, response: Any) -> None:
        with self._lock:
            self.outstanding -= 1
            err = getattr(response, "error", E.NONE) if response is not None else None
            if err:
                self.errors.append((broker_id, type(request).__name__, err))
            finished = self._sealed and self.outstanding == 0
        if finished and not self.done.done():
            self.done.set_result(self.errors)

    def seal(self) -> None:
        with self._lock:
            self._sealed = True
            finished = self.outstanding == 0
        if finished and not self.done.done():
            self.done.set_result(self.errors)


class RequestBatch:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.leader_and_isr: dict[int, dict[TP, PartitionState]] = defaultdict(dict)
        self.stop_replica: dict[tuple[int, bool], set[TP]] = defaultdict(set)
        self.metadata_brokers: set[int] = set()
        self.metadata_partitions: set[TP] = set()
        self.metadata_all_partitions: set[int] = set()  # brokers that need everything
        self.deleted: set[TP] = set()
        self.init = False

    def empty(self) -> bool:
        return not (self.leader_and_isr or self.stop_replica or self.metadata_brokers)

    def clear(self) -> None:
        self.__init__(self.ctx)  # type: ignore[misc]

    # -- collecting --------------------------------------------------------
    def add_leader_and_isr(self, brokers: Iterable[int], tp: TP, lai: LeaderAndIsr,
                           replicas: Iterable[int]) -> None:
        """Tell `brokers` (the live ones) the new state of tp; everyone gets the
        metadata change."""
        state = PartitionState(tp[0], tp[1], lai.leader, lai.leader_epoch, tuple(lai.isr),
                               lai.zk_version, tuple(replicas), self.ctx.topic_ids.get(tp[0], ""))
        reachable = self.ctx.live_or_shutting_down()
        for b in brokers:
            if b in reachable:
                self.leader_and_isr[b][tp] = state
        self.add_update_metadata(None, [tp])

    def add_stop_replica(self, brokers: Iterable[int], tp: TP, delete: bool) -> None:
        reachable = self.ctx.live_or_shutting_down()
        for b in brokers:
            if b in reachable:
                self.stop_replica[(b, delete)].add(tp)

    def add_update_metadata(self, brokers: Iterable[int] | None, partitions: Iterable[TP] | None,
                            deleted: bool = False) -> None:
        """brokers None: all live brokers; partitions None: every partition."""
        targets = set(self.ctx.live_or_shutting_down()) if brokers is None else set(brokers)
        self.metadata_brokers |= targets
        if partitions is None:
            self.metadata_all_partitions |= targets
        else:
            parts = set(partitions)
            self.metadata_partitions |= parts
            if deleted:
                self.deleted |= parts

    # -- sending -----------------------------------------------------------
    def _state(self, tp: TP) -> PartitionState | None:
        if tp in self.deleted:
            return PartitionState(tp[0], tp[1], LEADER_DURING_DELETE, 0, (), 0, ())
        lai = self.ctx.leaders.get(tp)
        ar = self.ctx.assignments.get(tp)
        if lai is None or ar is None:
            return None
        return PartitionState(tp[0], tp[1], lai.leader, lai.leader_epoch, tuple(lai.isr),
                              lai.zk_version, tuple(ar), self.ctx.topic_ids.get(tp[0], ""))

    def _endpoint(self, b: int) -> BrokerEndpoint | None:
        reg = self.ctx.live_brokers.get(b)
        return BrokerEndpoint(b, reg.host, reg.port) if reg else None

    def _address(self, b: int) -> dict[str, int]:
        """Whom a request is for: the broker and the start epoch it
        registered with, so that another broker now at that address (or a
        later incarnation of it) refuses it."""
        reg = self.ctx.live_brokers.get(b)
        return {"broker_id": b, "broker_epoch": reg.start_epoch if reg else -1}

    def build(self, controller_id: int, epoch: int) -> list[tuple[int, Any]]:
        """(broker, request) in send order."""
        out: list[tuple[int, Any]] = []
        live_eps = [e for e in (self._endpoint(b) for b in sorted(self.ctx.live_brokers)) if e]
        changed = [s for s in (self._state(tp) for tp in sorted(self.metadata_partitions)) if s]
        everything = None
        brokers = set(self.leader_and_isr) | self.metadata_brokers | {b for b, _ in self.stop_replica}
        for b in sorted(brokers):
            states = self.leader_and_isr.get(b)
            if states or (self.init and b in self.leader_and_isr):
                leaders = {s.leader for s in states.values() if s.leader >= 0}
                eps = tuple(e for e in (self._endpoint(x) for x in sorted(leaders)) if e)
                out.append((b, control.LeaderAndIsrRequest(
                    controller_id, epoch, self.init,
                    tuple(states[tp] for tp in sorted(states)), eps, **self._address(b))))
            if b in self.metadata_brokers:
                if b in self.metadata_all_partitions:
                    if everything is None:
                        everything = [s for s in (self._state(tp) for tp in sorted(self.ctx.assignments)) if s]
                        everything += [self._state(tp) for tp in sorted(self.deleted)]
                    parts = everything
                else:
                    parts = changed
                out.append((b, control.UpdateMetadataRequest(controller_id, epoch, tuple(parts),
                                                             tuple(live_eps), **self._address(b))))
            for delete in (False, True):
                tps = self.stop_replica.get((b, delete))
                if tps:
                    out.append((b, control.StopReplicaRequest(
                        controller_id, epoch, delete,
                        tuple(TopicPartition(t, p) for t, p in sorted(tps)), **self._address(b))))
        return out

    def send(self, controller_id: int, epoch: int,
             send_fn: Callable[[int, Any, Callable], bool],
             on_response: Callable[[int, Any, Any], None],
             record: Callable[[int, Any], None] | None = None) -> AckTracker:
        tracker = AckTracker()
        for b, req in self.build(controller_id, epoch):  # noqa: B023
            if record:
                record(b, req)
            tracker.add()

            def cb(broker, request, response, _t=tracker):
                try:
                    on_response(broker, request, response)
                finally:
                    _t.ack(broker, request, response)
            send_fn(b, req, cb)
        tracker.seal()
        self.clear()
        return tracker
