"""Deleting topics and partitions (Kafka's TopicDeletionManager;
docs/design.md#topics, docs/design.md#partitions).

A topic marked under /admin/delete_topics is in `ctx.topics_being_deleted`
while its partitions go Offline and NonExistent: StopReplica(delete) to
the live replicas, UpdateMetadata to everyone, then its znodes go. Removed
partitions (/admin/partitions_remove) take the same way. Runs on the event
thread, inside the DeleteTopic, TopicChange and PartitionRemove events.
"""
from __future__ import annotations

import logging

from kazoo.client import KazooClient

from cluster import zkpaths

from .context import TP, ControllerContext
from .partition_state_machine import PartitionState, PartitionStateMachine
from .reassignment import Reassigner
from .replica_state_machine import ReplicaState, ReplicaStateMachine
from .request_batch import RequestBatch
from .zk_store import ZkStore

log = logging.getLogger("chaoslog.controller")


class TopicDeletionManager:
    """Handed the broker id (logs), the kazoo client (does a marked topic
    exist yet), the context, the ZooKeeper store, the request batch, both
    state machines and the reassigner (a partition being deleted stops
    being reassigned)."""

    def __init__(self, broker_id: int, zk: KazooClient, ctx: ControllerContext, store: ZkStore,
                 batch: RequestBatch, psm: PartitionStateMachine, rsm: ReplicaStateMachine,
                 reassigner: Reassigner) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.ctx = ctx
        self.store = store
        self.batch = batch
        self.psm = psm
        self.rsm = rsm
        self.reassigner = reassigner

    def delete_topics(self, marked: set[str]) -> None:
        """The topics marked under /admin/delete_topics, one after another."""
        for t in sorted(marked):
            if t not in self.ctx.topics:
                if self.zk.exists(zkpaths.topic_path(t)):
                    # created and marked before we saw it: load it first
                    for topic, (ta, version) in self.store.read_assignments([t]).items():
                        self.ctx.remember_topic(topic, ta, version)
                        for p, replicas in ta.partitions.items():
                            self.ctx.set_assignment((topic, p), replicas)
                            lai = self.store.read_leader_and_isr([(topic, p)]).get((topic, p))
                            if lai:
                                self.ctx.leaders[(topic, p)] = lai
                    self.psm.initialize()
                    self.rsm.initialize()
                else:
                    log.info("controller %d: delete marker for unknown topic %s removed",
                             self.broker_id, t)
                    self.store.delete_trees([zkpaths.delete_topic_path(t)])
                    continue
            self.ctx.topics_being_deleted.add(t)
            self.delete_topic_partitions(t)
            self.store.delete_trees([zkpaths.topic_path(t)])
            self.store.delete_trees([zkpaths.delete_topic_path(t), zkpaths.partitions_add_path(t),
                                     zkpaths.partitions_remove_path(t)])
            self.ctx.topics_being_deleted.discard(t)
            log.info("controller %d: deleted topic %s", self.broker_id, t)

    def delete_topic_partitions(self, topic: str) -> None:
        tps = self.ctx.partitions_of(topic)
        self.remove_partitions(tps)

    def remove_partitions(self, tps: list[TP]) -> None:
        """Partitions and their replicas to NonExistent: StopReplica(delete)
        to the live replicas, and everyone forgets them. (A broker that is
        down deletes its copy when it starts, docs/design.md#broker-startup.)"""
        if not tps:
            return
        cancelled = [tp for tp in tps if tp in self.ctx.reassigning]
        if cancelled:
            self.reassigner.cancel(cancelled, "partition is being deleted")
        replicas = [(tp, b) for tp in tps for b in self.ctx.assignments.get(tp, ())]
        self.psm.handle(tps, PartitionState.OFFLINE)
        self.rsm.handle(replicas, ReplicaState.OFFLINE, remove_from_isr=False, stop=False)
        self.rsm.handle(replicas, ReplicaState.NON_EXISTENT)
        self.psm.handle(tps, PartitionState.NON_EXISTENT)
        self.batch.add_update_metadata(None, tps, deleted=True)
        for tp in tps:
            self.ctx.remove_partition(tp)
