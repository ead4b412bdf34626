"""Parked (long-poll) fetches and LeaderAndIsr entry errors, in process: a
ReplicaManager and KafkaApis on a real log directory, no ZooKeeper, requests
handed to KafkaApis.handle as the socket server does, so that the order of
events inside one event-loop iteration is under the test's control."""
from __future__ import annotations

import asyncio
import struct
import time

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from cluster.config import BrokerConfig
from cluster.log import LogConfig, LogManager
from cluster.protocol import control
from cluster.server.kafka_apis import KafkaApis
from cluster.server.metadata_cache import MetadataCache
from cluster.server.replica_manager import ReplicaManager
from kafka_wire import v2_batch

TOPIC = "parked"


def _frame(req, corr: int) -> bytes:
    """A request as the socket server hands it to KafkaApis (no size prefix)."""
    client = b"test"
    header = struct.pack(">hhih", req.API_KEY, req.API_VERSION, corr, len(client)) + client
    return header + bytes(req.encode(version=req.API_VERSION))


def _fetch_frame(offset: int, replica_id: int, max_wait_ms: int, corr: int) -> bytes:
    return _frame(FetchRequest(version=4, replica_id=replica_id, max_wait_ms=max_wait_ms,
                               min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                               topics=[(TOPIC, [(0, offset, 1 << 20)])]), corr)


def _produce_frame(value: bytes, acks: int, corr: int) -> bytes:
    return _frame(ProduceRequest(version=3, transactional_id=None, acks=acks, timeout_ms=5000,
                                 topic_data=[(TOPIC, [(0, v2_batch([value]))])]), corr)


def _fetched(frame: bytes):
    # frame: size, correlation id, body
    pd = FetchResponse.decode(frame[8:], version=4).responses[0].partitions[0]
    return pd.error_code, pd.high_watermark, pd.records


def _leader(tmp_path, isr=(1, 2), replicas=(1, 2)):
    """Broker 1 leading TOPIC-0 at leader epoch 0 (call inside the loop)."""
    cfg = BrokerConfig.from_dict({"broker.id": 1, "log.dirs": str(tmp_path)})
    rm = ReplicaManager(cfg, LogManager(tmp_path, LogConfig.from_broker_config(cfg)), None,
                        MetadataCache(1, cfg.advertised))
    resp = rm.handle_leader_and_isr(control.LeaderAndIsrRequest(99, 1, False, (
        control.PartitionState(TOPIC, 0, 1, 0, isr, 0, replicas),)))
    assert resp.error == 0 and resp.partitions[0].error == 0
    return rm, KafkaApis(cfg, rm, rm.metadata)


def test_follower_fetch_parked_in_the_same_iteration_as_an_append_is_woken(tmp_path):
    """A follower's fetch finds nothing and parks; before its coroutine first
    runs (the socket server only schedules it), a produce on another
    connection appends. The fetch must return that data at once, not at
    max_wait (it used to register its waiter too late and miss the append)."""
    async def main():
        rm, apis = _leader(tmp_path)
        parked = apis.handle(_fetch_frame(0, replica_id=2, max_wait_ms=3000, corr=1))
        assert asyncio.iscoroutine(parked)
        ack = apis.handle(_produce_frame(b"x", acks=1, corr=2))
        assert isinstance(ack, bytes)
        t0 = time.monotonic()
        err, _, records = _fetched(await asyncio.wait_for(parked, 10))
        return err, records, time.monotonic() - t0
    err, records, took = asyncio.run(main())
    assert err == 0 and records
    assert took < 1.0, f"the parked fetch waited {took:.2f}s for data already appended"


def test_consumer_fetch_wakes_on_hw_advance_not_on_append(tmp_path):
    """A consumer reads below the HW: an append alone leaves its parked fetch
    parked; the follower fetch that moves the HW releases it (and completes
    the acks=all produce waiting for the same HW)."""
    async def main():
        rm, apis = _leader(tmp_path)
        consumer = asyncio.ensure_future(
            apis.handle(_fetch_frame(0, replica_id=-1, max_wait_ms=5000, corr=1)))
        produce = asyncio.ensure_future(apis.handle(_produce_frame(b"y", acks=-1, corr=2)))
        await asyncio.sleep(0.2)
        assert not consumer.done() and not produce.done()  # HW still 0: follower 2 lags
        # Follower 2 fetches the record, then fetches again from 1: its LEO is 1.
        err, _, records = _fetched(apis.handle(_fetch_frame(0, 2, 500, corr=3)))
        assert err == 0 and records
        follower = apis.handle(_fetch_frame(1, 2, 500, corr=4))
        t0 = time.monotonic()
        err, hw, records = _fetched(await asyncio.wait_for(consumer, 10))
        took = time.monotonic() - t0
        pr = ProduceResponse.decode((await asyncio.wait_for(produce, 10))[8:], version=3)
        await follower  # parked at the LEO: returns empty at its max_wait
        return err, hw, records, took, pr.responses[0].partition_responses[0]
    err, hw, records, took, pr = asyncio.run(main())
    assert (err, hw) == (0, 1) and records and took < 1.0
    assert (pr.error_code, pr.base_offset) == (0, 0)


def test_not_newer_leader_epoch_is_ignored_with_error_none(tmp_path):
    """Kafka answers STALE_CONTROLLER_EPOCH (11) for such an entry; this broker
    answers 0 because the controller (cluster/controller/controller.py
    _on_response) takes a per-partition 11 for a rejection of its controller
    epoch, i.e. for being a zombie, and a live controller resends unchanged
    leader epochs on every failover (the INIT LeaderAndIsr)."""
    async def main():
        rm, apis = _leader(tmp_path)
        same = control.PartitionState(TOPIC, 0, 2, 0, (1, 2), 0, (1, 2))
        resp = rm.handle_leader_and_isr(control.LeaderAndIsrRequest(99, 1, True, (same,)))
        return resp, rm.partitions[(TOPIC, 0)]
    resp, p = asyncio.run(main())
    assert resp.error == 0 and [e.error for e in resp.partitions] == [0]
    assert p.is_leader and p.leader_epoch == 0  # ignored: still the leader
