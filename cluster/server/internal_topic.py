"""An internal topic whose partition leaders are coordinators: the offsets
topic for groups, the transaction log for transactional ids
(docs/design.md#groups, #transactions).

A key (a group id, a transactional id) lives in partition
abs(javaHashCode(key)) % N; the leader of that partition is its
coordinator. FindCoordinator asks `coordinator_of`; the first one that
finds no topic creates it (through cluster.admin, in ZooKeeper, as a
topic's auto-creation does), provided `replication_factor` brokers are
live: until the controller has elected its leaders the answer is
COORDINATOR_NOT_AVAILABLE and clients ask again, as with Kafka.
"""
from __future__ import annotations

import logging
from typing import Any

from cluster import admin, zkpaths
from cluster.protocol import errors as E
from cluster.server.metadata_cache import MetadataCache
from cluster.server.offsets_topic import GROUP_METADATA_TOPIC, partition_for
from cluster.server.transaction_log import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

NO_NODE = (-1, "", -1)
# Written by their coordinators only: clients may not produce to them.
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC})


class InternalTopic:
    def __init__(self, name: str, num_partitions: int, replication_factor: int,
                 metadata: MetadataCache, zk: Any):
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.metadata = metadata
        self.zk = zk
        self._refused_at = -1   # the live broker count the last refusal to create was logged at

    def partition_count(self) -> int:
        """The topic's partitions as the metadata says (every broker then
        maps a key to the same one), the configured count before it exists."""
        return len(self.metadata.partitions_of(self.name)) or self.num_partitions

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.partition_count())

    async def coordinator_of(self, key: str) -> tuple[int, tuple[int, str, int]]:
        """(error, (node id, host, port)) of the key's coordinator."""
        parts = self.metadata.partitions_of(self.name)
        if not parts:
            await self._create()
            return E.COORDINATOR_NOT_AVAILABLE, NO_NODE
        cp = parts.get(partition_for(key, len(parts)))
        endpoint = self.metadata.endpoint(cp.leader) if cp is not None and cp.leader >= 0 else None
        if endpoint is None:
            return E.COORDINATOR_NOT_AVAILABLE, NO_NODE
        return E.NONE, (cp.leader, endpoint[0], endpoint[1])

    async def _create(self) -> None:
        live = len(self.metadata.live_brokers())
        if live < self.replication_factor:
            # As Kafka: no internal topic with fewer replicas than configured.
            if live != self._refused_at:   # once per live count, not per request
                log.warning("not creating %s: %d live brokers, its replication factor is %d",
                            self.name, live, self.replication_factor)
            self._refused_at = live
            return
        if self.zk is None:
            return
        try:
            await self.zk.call(self._create_in_zookeeper)
        except Exception as e:   # ZooKeeper unreachable: the client asks again
            log.warning("creating %s failed: %r", self.name, e)

    def _create_in_zookeeper(self) -> None:
        kz = self.zk.kazoo
        if kz.exists(zkpaths.topic_path(self.name)):
            return   # created, not yet in this broker's metadata (or being deleted)
        try:
            admin.create_topic(kz, self.name, self.num_partitions, self.replication_factor)
        except admin.AdminError:
            return   # another broker created it meanwhile
        log.info("created %s: %d partitions, replication factor %d", self.name,
                 self.num_partitions, self.replication_factor)
