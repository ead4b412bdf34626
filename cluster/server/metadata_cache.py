"""What the broker tells clients in Metadata responses.

Fed only by the controller's UpdateMetadata requests, as in Kafka: live brokers
with their advertised endpoints and, per partition, leader / leader epoch /
replicas / ISR. A broker never reads ZooKeeper to answer a client, so what
clients see is what the controller last decided and told every broker.
"""
from __future__ import annotations

from dataclasses import dataclass

from cluster.protocol.control import PartitionState, UpdateMetadataRequest

# Kafka's marker in UpdateMetadata for a partition of a topic being deleted.
LEADER_DURING_DELETE = -2


@dataclass
class CachedPartition:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class MetadataCache:
    def __init__(self, broker_id: int, self_endpoint: tuple[str, int]):
        self.broker_id = broker_id
        self.self_endpoint = self_endpoint
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, dict[int, CachedPartition]] = {}
        self.controller_id = -1
        self.updated = False

    def update(self, req: UpdateMetadataRequest) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata: the broker list is replaced, partition
        states are upserted (leader -2 deletes). Returns deleted partitions."""
        self.updated = True
        self.controller_id = req.controller_id
        self.brokers = {b.id: (b.host, b.port) for b in req.live_brokers}
        deleted = []
        for s in req.partition_states:
            if s.leader == LEADER_DURING_DELETE:
                parts = self.topics.get(s.topic)
                if parts is not None and parts.pop(s.partition, None) is not None:
                    deleted.append((s.topic, s.partition))
                    if not parts:
                        del self.topics[s.topic]
                continue
            self.put(s)
        return deleted

    def put(self, s: PartitionState) -> None:
        self.topics.setdefault(s.topic, {})[s.partition] = CachedPartition(
            s.leader, s.leader_epoch, tuple(s.replicas), tuple(s.isr))

    def remove_topic_partition(self, topic: str, partition: int) -> None:
        parts = self.topics.get(topic)
        if parts is not None:
            parts.pop(partition, None)
            if not parts:
                del self.topics[topic]

    def has_topic(self, topic: str) -> bool:
        return topic in self.topics

    def partitions_of(self, topic: str) -> dict[int, CachedPartition]:
        return dict(self.topics.get(topic, {}))

    def partition(self, topic: str, partition: int) -> CachedPartition | None:
        return self.topics.get(topic, {}).get(partition)

    def live_brokers(self) -> dict[int, tuple[str, int]]:
        """Live brokers, as the controller last said. Before the first
        UpdateMetadata (`updated` is False) nothing is known, and KafkaApis
        refuses client Metadata requests rather than invent a cluster of
        just this broker (clients drop brokers a Metadata response leaves out)."""
        return self.brokers

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return self.brokers.get(broker_id)
