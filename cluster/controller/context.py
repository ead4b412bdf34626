"""ControllerContext: the controller's in-memory copy of the cluster state
(Kafka's ControllerContext). It is loaded from ZooKeeper at failover
(docs/design.md#controller-failover) and then changed only by the event
thread, so it needs no lock; another thread reads it only through
Controller.snapshot, which waits for the running event to end
(docs/design.md#event-queue)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from cluster.zkpaths import BrokerRegistration, LeaderAndIsr, TopicAssignment

TP = tuple[str, int]


@dataclass
class ReassignmentContext:
    """One partition being reassigned (KAFKA-42): its target replicas (RAR)."""
    new_replicas: tuple[int, ...]
    last_step: int = 0  # the last KAFKA-42 step this controller completed


@dataclass
class ControllerContext:
    controller_id: int
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    # partition -> assigned replicas (AR); the first is the preferred replica
    assignments: dict[TP, tuple[int, ...]] = field(default_factory=dict)
    # topic -> znode version of /brokers/topics/[topic], for conditional AR writes
    topic_versions: dict[str, int] = field(default_factory=dict)
    # topic -> its topic id, sent in every PartitionState (docs/design.md#topic-ids)
    topic_ids: dict[str, str] = field(default_factory=dict)
    leaders: dict[TP, LeaderAndIsr] = field(default_factory=dict)
    reassigning: dict[TP, ReassignmentContext] = field(default_factory=dict)
    topics_being_deleted: set[str] = field(default_factory=set)
    _by_topic: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))

    # -- brokers -------------------------------------------------------------
    def live_ids(self) -> set[int]:
        """Brokers that may lead or join an ISR: registered and not shutting down."""
        return set(self.live_brokers) - self.shutting_down

    def live_or_shutting_down(self) -> set[int]:
        """Brokers that can still be sent requests."""
        return set(self.live_brokers)

    # -- partitions ----------------------------------------------------------
    @property
    def topics(self) -> set[str]:
        return {t for t, ps in self._by_topic.items() if ps}

    def remember_topic(self, topic: str, ta: TopicAssignment, version: int) -> None:
        """The znode version (for conditional AR writes) and the topic id."""
        self.topic_versions[topic] = version
        self.topic_ids[topic] = ta.topic_id

    def set_assignment(self, tp: TP, replicas: tuple[int, ...]) -> None:
        self.assignments[tp] = tuple(replicas)
        self._by_topic[tp[0]].add(tp[1])

    def remove_partition(self, tp: TP) -> None:
        self.assignments.pop(tp, None)
        self.leaders.pop(tp, None)
        self.reassigning.pop(tp, None)
        parts = self._by_topic.get(tp[0])
        if parts is not None:
            parts.discard(tp[1])
            if not parts:
                del self._by_topic[tp[0]]
                self.topic_versions.pop(tp[0], None)
                self.topic_ids.pop(tp[0], None)

    def replicas_for_request(self, tp: TP) -> tuple[int, ...]:
        """The replica list to send in a LeaderAndIsr: AR, but during a
        reassignment RAR + (AR - RAR) until the new leader is in RAR (step 4),
        then RAR, so that the leader accepts the new replicas as followers."""
        ar = self.assignments.get(tp, ())
        r = self.reassigning.get(tp)
        if r is None:
            return ar
        if r.last_step >= 4:
            return r.new_replicas
        return r.new_replicas + tuple(b for b in ar if b not in r.new_replicas)

    def partitions_of(self, topic: str) -> list[TP]:
        return [(topic, p) for p in sorted(self._by_topic.get(topic, ()))]

    def topic_assignment(self, topic: str) -> dict[int, tuple[int, ...]]:
        return {p: self.assignments[(topic, p)] for _, p in self.partitions_of(topic)}

    def partitions_on(self, broker_ids: set[int]) -> list[TP]:
        """Partitions with a replica on any of broker_ids."""
        return [tp for tp, ar in self.assignments.items() if broker_ids.intersection(ar)]

    def partitions_led_by(self, broker_ids: set[int]) -> list[TP]:
        return [tp for tp, lai in self.leaders.items() if lai.leader in broker_ids]

    def replicas_on(self, broker_ids: set[int]) -> list[tuple[TP, int]]:
        return [(tp, b) for tp, ar in self.assignments.items() for b in ar if b in broker_ids]

    def snapshot(self) -> dict[str, Any]:
        """The controller's view as plain JSON-able data, for tests and the
        harness: from memory only, one pass over the partitions."""
        partitions = []
        for tp in sorted(set(self.assignments) | set(self.leaders)):
            lai = self.leaders.get(tp)
            ar = self.assignments.get(tp)
            partitions.append({
                "topic": tp[0], "partition": tp[1], "topic_id": self.topic_ids.get(tp[0], ""),
                "replicas": None if ar is None else list(ar),
                "leader_and_isr": None if lai is None else {
                    "leader": lai.leader, "leader_epoch": lai.leader_epoch, "isr": list(lai.isr),
                    "controller_epoch": lai.controller_epoch, "zk_version": lai.zk_version}})
        return {
            "controller_id": self.controller_id, "epoch": self.epoch,
            "live_brokers": [{"id": b, "start_epoch": reg.start_epoch}
                             for b, reg in sorted(self.live_brokers.items())],
            "shutting_down": sorted(self.shutting_down),
            "partitions": partitions,
            "reassigning": [{"topic": tp[0], "partition": tp[1],
                             "old_replicas": list(self.assignments.get(tp, ())),
                             "new_replicas": list(r.new_replicas), "last_step": r.last_step}
                            for tp, r in sorted(self.reassigning.items())],
            "topics_being_deleted": sorted(self.topics_being_deleted),
        }

    def clear(self) -> None:
        self.live_brokers.clear()
        self.shutting_down.clear()
        self.assignments.clear()
        self.topic_versions.clear()
        self.topic_ids.clear()
        self.leaders.clear()
        self.reassigning.clear()
        self.topics_being_deleted.clear()
        self._by_topic.clear()
