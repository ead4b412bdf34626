"""A replica of a deleted topic never passes for a replica of a new topic of the same name.

A regression test for a bug the guarantees suite found: topic T was deleted
while broker 3 was down and created again with the same partitions and
replicas; broker 3 came back with T's old log, was still assigned T-0, and
served the old records as the new topic's. Topic ids tell the two apart
(docs/design.md#topic-ids): a replica whose recorded topic id is not the
topic's is deleted, at startup and on LeaderAndIsr.
"""
from __future__ import annotations

import asyncio

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from cluster.config import BrokerConfig
from cluster.log import Log, LogConfig, LogManager
from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.server.metadata_cache import MetadataCache
from cluster.server.replica_manager import ReplicaManager

TP = ("t", 0)
OLD, NEW = "old-topic-id", "new-topic-id"


def _batch(n: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for i in range(n):
        b.append(i, 1_000 + i, None, b"v%d" % i, [])
    return bytes(b.build())


def _broker(tmp_path) -> ReplicaManager:
    cfg = BrokerConfig.from_dict({"broker.id": 3, "log.dirs": str(tmp_path)})
    return ReplicaManager(cfg, LogManager(tmp_path, LogConfig.from_broker_config(cfg)), None,
                          MetadataCache(3, cfg.advertised), 1)


def _lead(rm: ReplicaManager, leader_epoch: int, topic_id: str) -> None:
    state = control.PartitionState(TP[0], TP[1], 3, leader_epoch, (3,), 0, (3,), topic_id)
    resp = rm.handle_leader_and_isr(control.LeaderAndIsrRequest(2, 5, False, (state,)))
    assert resp.error == E.NONE and resp.partitions[0].error == E.NONE


def _with_broker(tmp_path, body) -> None:
    """Run body(rm) on a ReplicaManager over tmp_path, then close it like a broker stop."""
    async def run():
        rm = _broker(tmp_path)
        try:
            body(rm)
        finally:
            await rm.fetchers.shutdown()
            rm.log_manager.close()
    asyncio.run(run())


def test_leader_and_isr_records_the_topic_id_durably(tmp_path):
    def body(rm):
        _lead(rm, 0, NEW)
        assert rm.partition(TP).log.topic_id == NEW
    _with_broker(tmp_path, body)
    cfg = BrokerConfig.from_dict({"broker.id": 3, "log.dirs": str(tmp_path)})
    assert Log(tmp_path / "t-0", LogConfig.from_broker_config(cfg)).topic_id == NEW


def test_a_replica_of_an_earlier_topic_is_replaced_on_leader_and_isr(tmp_path):
    def body(rm):
        _lead(rm, 5, OLD)
        rm.partition(TP).log.append_as_leader(_batch(4), 5)
        assert rm.partition(TP).leo == 4
        # The new topic starts at leader epoch 0: below the old replica's 5.
        _lead(rm, 0, NEW)
        p = rm.partition(TP)
        assert (p.leo, p.leader_epoch, p.log.topic_id) == (0, 0, NEW)
    _with_broker(tmp_path, body)


def test_a_replica_without_a_topic_id_adopts_the_topic_s(tmp_path):
    def body(rm):
        _lead(rm, 1, "")
        rm.partition(TP).log.append_as_leader(_batch(2), 1)
        assert rm.partition(TP).log.topic_id is None
        _lead(rm, 2, NEW)
        p = rm.partition(TP)
        assert (p.leo, p.log.topic_id) == (2, NEW)
    _with_broker(tmp_path, body)


@pytest.mark.parametrize("assigned_id, kept", [(OLD, True), ("", True), (NEW, False)])
def test_startup_deletes_a_replica_of_another_topic_id(tmp_path, assigned_id, kept):
    def write(rm):
        _lead(rm, 0, OLD)
        rm.partition(TP).log.append_as_leader(_batch(3), 0)

    def restart(rm):
        rm.load({TP: assigned_id})
        assert (rm.partition(TP) is not None) is kept
        assert (tmp_path / "t-0").exists() is kept
    _with_broker(tmp_path, write)
    _with_broker(tmp_path, restart)
