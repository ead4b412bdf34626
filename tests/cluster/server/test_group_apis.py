"""The group APIs through KafkaApis.handle, in process (docs/design.md#groups):
a ReplicaManager leading every offsets partition on a real log directory,
no ZooKeeper. Each API at each version it is served at is answered in a
body its response class decodes; a group joins, syncs, commits and fetches
at the oldest and newest versions; unknown groups and bad input get
Kafka's codes."""
from __future__ import annotations

import asyncio
import struct

import pytest
from kafka.protocol.admin import (DescribeGroupsRequest, DescribeGroupsResponse,
                                  ListGroupsRequest, ListGroupsResponse)
from kafka.protocol.consumer import (HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
                                     JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
                                     OffsetCommitRequest, OffsetCommitResponse,
                                     OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
                                     SyncGroupResponse)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from cluster.config import BrokerConfig
from cluster.log import LogConfig, LogManager
from cluster.protocol import api, control
from cluster.protocol import errors as E
from cluster.server.kafka_apis import CLOSE, KafkaApis
from cluster.server.metadata_cache import MetadataCache
from cluster.server.offsets_topic import GROUP_METADATA_TOPIC
from cluster.server.replica_manager import ReplicaManager

PARTITIONS = 3


def _frame(req, version: int, corr: int = 1) -> bytes:
    client = b"apis-test"
    header = struct.pack(">hhih", req.API_KEY, version, corr, len(client)) + client
    return header + bytes(req.encode(version=version))


async def _call(apis: KafkaApis, resp_cls, req, version: int):
    out = apis.handle(_frame(req, version))
    assert out is not CLOSE and out is not None
    if not isinstance(out, (bytes, bytearray)):
        out = await asyncio.wait_for(out, 10)
    return resp_cls.decode(out[8:], version=version)


async def _broker(tmp_path) -> KafkaApis:
    """Broker 1 leading every partition of the offsets topic and of topic t;
    the metadata knows t (commits to unknown topics are refused)."""
    cfg = BrokerConfig.from_dict({"broker.id": 1, "log.dirs": str(tmp_path),
                                  "offsets.topic.num.partitions": PARTITIONS,
                                  "group.initial.rebalance.delay.ms": 0})
    rm = ReplicaManager(cfg, LogManager(tmp_path, LogConfig.from_broker_config(cfg)), None,
                        MetadataCache(1, cfg.advertised))
    apis = KafkaApis(cfg, rm, rm.metadata)
    states = tuple(control.PartitionState(t, p, 1, 0, (1,), 0, (1,))
                   for t, n in ((GROUP_METADATA_TOPIC, PARTITIONS), ("t", 2)) for p in range(n))
    rm.handle_leader_and_isr(control.LeaderAndIsrRequest(99, 1, False, states))
    rm.handle_update_metadata(control.UpdateMetadataRequest(
        99, 1, tuple(s for s in states if s.topic == "t"),
        (control.BrokerEndpoint(1, "127.0.0.1", 9092),)))
    for _ in range(3):
        await asyncio.sleep(0)   # the offsets partitions load
    return apis


def test_served_versions_are_kafka_2_0s_without_zookeeper_offsets():
    ranges = {k: api.SUPPORTED_VERSIONS[k] for k in (8, 9, 10, 11, 12, 13, 14, 15, 16)}
    assert ranges == {8: (1, 4), 9: (1, 4), 10: (0, 2), 11: (0, 3), 12: (0, 2), 13: (0, 2),
                      14: (0, 2), 15: (0, 2), 16: (0, 2)}


@pytest.mark.parametrize("v", [(0, 0, 1), (3, 2, 4)], ids=["oldest", "newest"])
def test_a_group_joins_syncs_commits_and_fetches(tmp_path, v):
    join_v, sync_v, offsets_v = v

    async def main():
        apis = await _broker(tmp_path)
        join = dict(group_id="g", session_timeout_ms=10000, member_id="",
                    protocol_type="consumer", protocols=[("range", b"meta")])
        if join_v >= 1:
            join["rebalance_timeout_ms"] = 10000
        j = await _call(apis, JoinGroupResponse, JoinGroupRequest(**join), join_v)
        assert (j.error_code, j.generation_id, j.protocol_name) == (0, 1, "range")
        assert j.leader == j.member_id and j.member_id.startswith("apis-test-")
        assert [(m.member_id, m.metadata) for m in j.members] == [(j.member_id, b"meta")]
        s = await _call(apis, SyncGroupResponse, SyncGroupRequest(
            group_id="g", generation_id=1, member_id=j.member_id,
            assignments=[(j.member_id, b"mine")]), sync_v)
        assert (s.error_code, s.assignment) == (0, b"mine")
        h = await _call(apis, HeartbeatResponse, HeartbeatRequest(
            group_id="g", generation_id=1, member_id=j.member_id), sync_v)
        assert h.error_code == 0

        commit = dict(group_id="g", generation_id_or_member_epoch=1, member_id=j.member_id,
                      topics=[("t", [(0, 42, None) if offsets_v >= 2 else (0, 42, -1, None),
                                     (1, 7, "md") if offsets_v >= 2 else (1, 7, -1, "md")]),
                              ("unknown", [(0, 1, None) if offsets_v >= 2 else (0, 1, -1, None)])])
        if 2 <= offsets_v <= 4:
            commit["retention_time_ms"] = -1
        c = await _call(apis, OffsetCommitResponse, OffsetCommitRequest(**commit), offsets_v)
        assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in c.topics] == [("t", [(0, 0), (1, 0)]),
                                       ("unknown", [(0, E.UNKNOWN_TOPIC_OR_PARTITION)])]
        f = await _call(apis, OffsetFetchResponse, OffsetFetchRequest(
            group_id="g", topics=[("t", [0, 1, 2])]), offsets_v)
        assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for p in f.topics[0].partitions] == [(0, 42, "", 0), (1, 7, "md", 0),
                                                     (2, -1, "", 0)]

        d = await _call(apis, DescribeGroupsResponse, DescribeGroupsRequest(groups=["g", "x"]),
                        sync_v)
        assert [(g.error_code, g.group_id, g.group_state, g.protocol_data) for g in d.groups] == [
            (0, "g", "Stable", "range"), (0, "x", "Dead", "")]
        assert d.groups[0].members[0].member_assignment == b"mine"
        lg = await _call(apis, ListGroupsResponse, ListGroupsRequest(), sync_v)
        assert (lg.error_code, [(g.group_id, g.protocol_type) for g in lg.groups]) == (
            0, [("g", "consumer")])
        leave = await _call(apis, LeaveGroupResponse, LeaveGroupRequest(
            group_id="g", member_id=j.member_id), sync_v)
        assert leave.error_code == 0
    asyncio.run(main())


def test_offset_fetch_of_an_unknown_group_answers_no_offsets(tmp_path):
    async def main():
        apis = await _broker(tmp_path)
        f1 = await _call(apis, OffsetFetchResponse, OffsetFetchRequest(
            group_id="nobody", topics=[("t", [0])]), 1)
        assert [(p.committed_offset, p.error_code) for p in f1.topics[0].partitions] == [(-1, 0)]
        f4 = await _call(apis, OffsetFetchResponse, OffsetFetchRequest(
            group_id="nobody", topics=None), 4)
        assert (f4.error_code, f4.topics) == (0, [])
    asyncio.run(main())


def test_find_coordinator_without_its_internal_topic(tmp_path):
    async def main():
        apis = await _broker(tmp_path)   # one broker: too few to create either topic
        r0 = await _call(apis, FindCoordinatorResponse, FindCoordinatorRequest(key="g"), 0)
        assert (r0.error_code, r0.node_id) == (E.COORDINATOR_NOT_AVAILABLE, -1)
        r2 = await _call(apis, FindCoordinatorResponse,
                         FindCoordinatorRequest(key="tx", key_type=1), 2)
        assert (r2.error_code, r2.node_id) == (E.COORDINATOR_NOT_AVAILABLE, -1)
        r1 = await _call(apis, FindCoordinatorResponse,
                         FindCoordinatorRequest(key="g", key_type=7), 1)
        assert r1.error_code == E.INVALID_REQUEST
    asyncio.run(main())


def test_bad_group_requests_get_error_codes_or_a_closed_connection(tmp_path):
    async def main():
        apis = await _broker(tmp_path)
        j = await _call(apis, JoinGroupResponse, JoinGroupRequest(
            group_id="", session_timeout_ms=10000, rebalance_timeout_ms=1, member_id="",
            protocol_type="consumer", protocols=[]), 1)
        assert j.error_code == E.INVALID_GROUP_ID
        c = await _call(apis, OffsetCommitResponse, OffsetCommitRequest(
            group_id="g", generation_id_or_member_epoch=3, member_id="m", retention_time_ms=-1,
            topics=[("t", [(0, 1, None)])]), 2)
        assert c.topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION
        # OffsetCommit v0 (ZooKeeper storage in Kafka) is not served.
        assert apis.handle(_frame(OffsetCommitRequest(group_id="g", topics=[]), 0)) is CLOSE
        # A body cut short.
        frame = _frame(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 0)
        assert apis.handle(frame[:-3]) is CLOSE
    asyncio.run(main())


def test_clients_cannot_produce_to_the_offsets_topic(tmp_path):
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from kafka_wire import v2_batch

    async def main():
        apis = await _broker(tmp_path)
        r = await _call(apis, ProduceResponse, ProduceRequest(
            transactional_id=None, acks=1, timeout_ms=1000,
            topic_data=[(GROUP_METADATA_TOPIC, [(0, v2_batch([b"x"]))])]), 3)
        assert r.responses[0].partition_responses[0].error_code == E.INVALID_TOPIC_EXCEPTION
    asyncio.run(main())


def test_the_offsets_topic_is_created_only_with_enough_live_brokers(tmp_path):
    """As Kafka 2.0: fewer live brokers than offsets.topic.replication.factor
    (3) is COORDINATOR_NOT_AVAILABLE and no topic, not a smaller factor."""
    class Zk:
        kazoo = None

        def __init__(self):
            self.calls = []

        async def call(self, fn, *args):
            self.calls.append(fn.__name__)

    async def main():
        apis = await _broker(tmp_path)
        apis.groups.topic.zk = zk = Zk()
        live = [control.BrokerEndpoint(b, "127.0.0.1", 9090 + b) for b in (1, 2, 3)]
        for n, created in ((2, []), (3, ["_create_in_zookeeper"])):
            apis.rm.handle_update_metadata(
                control.UpdateMetadataRequest(99, 1, (), tuple(live[:n])))
            r = await _call(apis, FindCoordinatorResponse, FindCoordinatorRequest(key="g"), 0)
            assert r.error_code == E.COORDINATOR_NOT_AVAILABLE
            assert zk.calls == created
    asyncio.run(main())
