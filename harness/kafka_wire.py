"""Kafka requests the harness makes itself, on a plain socket.

The clients of a workload (confluent-kafka, kafka-python) hide what one fetch
response said; some oracles need exactly that (the high watermark and log
start offset that came with these records), and some observations need a
broker's own Metadata answer rather than a client's merged view. This module
speaks the protocol directly, with kafka-python's request and response
classes (generated from Kafka's schemas), so it works against any
Kafka-protocol broker and shares no code with the broker under test; on a
secure cluster it speaks TLS and SASL (harness/security.py's settings) with
kafka-python's mechanisms too.
"""
from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.security import ClientSecurity

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")

API_VERSIONS_KEY = 18


class WireError(ConnectionError):
    """The connection failed or the broker answered something undecodable."""


class KafkaConnection:
    """One connection to one broker, one request at a time."""

    def __init__(self, host: str, port: int, *, client_id: str = "chaoslog",
                 timeout: float = 10.0, security: ClientSecurity | None = None):
        self.address = (host, port)
        self.client_id = client_id.encode()
        self._corr = 0
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            self.sock = socket.create_connection(self.address, timeout=timeout)
            if security is not None and security.tls:
                self.sock = security.ssl_context().wrap_socket(self.sock, server_hostname=host)
        except (OSError, ValueError) as e:
            raise WireError(f"cannot connect to {host}:{port}: {e}") from None
        self.sock.settimeout(timeout)
        if security is not None and security.sasl:
            try:
                self._authenticate(security, host)
            except BaseException:
                self.close()
                raise

    def _authenticate(self, security: ClientSecurity, host: str) -> None:
        """SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate
        v1 requests, with kafka-python's mechanisms (not the broker's code)."""
        from kafka.net.sasl import get_sasl_mechanism
        from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse,
                                         SaslHandshakeRequest, SaslHandshakeResponse)
        mechanism_name = security.sasl_mechanism
        hs = self.call(SaslHandshakeRequest, SaslHandshakeResponse, 1, mechanism=mechanism_name)
        if hs.error_code:
            raise WireError(f"{host}: SASL mechanism {mechanism_name} refused (error "
                            f"{hs.error_code}; enabled: {', '.join(hs.mechanisms or [])})")
        mechanism = get_sasl_mechanism(mechanism_name)(
            host=host, sasl_mechanism=mechanism_name, sasl_plain_username=security.username,
            sasl_plain_password=security.password(), security_protocol=security.security_protocol)
        while not mechanism.is_done():
            resp = self.call(SaslAuthenticateRequest, SaslAuthenticateResponse, 1,
                             auth_bytes=mechanism.auth_bytes())
            if resp.error_code:
                raise WireError(f"{host}: SASL authentication failed: {resp.error_message}")
            try:
                mechanism.receive(resp.auth_bytes)
            except ValueError as e:
                raise WireError(f"{host}: SASL: {e}") from None
        if not mechanism.is_authenticated():
            raise WireError(f"{host}: SASL authentication as {security.username} failed")

    def call(self, req_cls: Any, resp_cls: Any, version: int, **fields: Any) -> Any:
        """Send `req_cls(version, **fields)`, return the decoded response. A
        flexible version (KIP-482) has header v2 and its answer header v1
        (ApiVersions' answer excepted, as Kafka's)."""
        body = bytes(req_cls(version=version, **fields).encode(version=version))
        flexible = bool(req_cls.flexible_version_q(version))
        frame = self.request(req_cls.API_KEY, version, body, req_cls.__name__, flexible)
        if flexible and req_cls.API_KEY != API_VERSIONS_KEY:
            frame = after_tagged_fields(frame)
        try:
            return resp_cls.decode(frame, version=version)
        except Exception as e:  # noqa: BLE001 - any decoding failure is the broker's
            raise WireError(f"undecodable {resp_cls.__name__} v{version}: {e}") from None

    def request(self, api_key: int, version: int, body: bytes, name: str = "request",
                flexible: bool = False) -> bytes:
        """Send one request; the response after its correlation id."""
        self._corr = (self._corr + 1) & 0x7FFFFFFF
        header = _HEADER.pack(api_key, version, self._corr, len(self.client_id)) + self.client_id
        if flexible:
            header += b"\x00"   # no tagged fields
        try:
            self.sock.sendall(_SIZE.pack(len(header) + len(body)) + header + body)
            (n,) = _SIZE.unpack(self._read(4))
            frame = self._read(n)
        except OSError as e:
            raise WireError(f"{name} to {self.address[0]}:{self.address[1]}: {e}") from None
        (corr,) = _SIZE.unpack_from(frame)
        if corr != self._corr:
            raise WireError(f"correlation id {corr}, expected {self._corr}")
        return frame[4:]

    def _read(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            b = self.sock.recv(left)
            if not b:
                raise OSError("connection closed by the broker")
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)

    def negotiate(self) -> dict[int, tuple[int, int]]:
        """The broker's ApiVersions: api key -> (min, max) version."""
        from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
        resp = self.call(ApiVersionsRequest, ApiVersionsResponse, 0)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        return self.versions

    def version(self, api_key: int, highest: int) -> int:
        """The highest version of an API that both we and the broker speak."""
        if not self.versions:
            self.negotiate()
        lo, hi = self.versions.get(api_key, (0, -1))
        if hi < lo or lo > highest:
            raise WireError(f"the broker does not serve api {api_key} at a version we speak")
        return min(hi, highest)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# -- Metadata ---------------------------------------------------------------------------------

@dataclass
class PartitionMetadata:
    topic: str
    partition: int
    leader: int
    isr: list[int]
    replicas: list[int]
    error: int


@dataclass
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]]
    partitions: dict[tuple[str, int], PartitionMetadata]
    controller: int | None = None


def metadata(conn: KafkaConnection, topics: list[str] | None = None) -> ClusterMetadata:
    """What this broker serves: live brokers and each partition's leader and ISR."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    v = conn.version(MetadataRequest.API_KEY, 4)
    fields: dict[str, Any] = {"topics": None if topics is None else [(t,) for t in topics]}
    if v >= 4:
        fields["allow_auto_topic_creation"] = False
    resp = conn.call(MetadataRequest, MetadataResponse, v, **fields)
    brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
    parts = {}
    for t in resp.topics:
        for p in t.partitions:
            parts[(t.name, p.partition_index)] = PartitionMetadata(
                t.name, p.partition_index, p.leader_id, sorted(p.isr_nodes),
                list(p.replica_nodes), p.error_code)
    return ClusterMetadata(brokers, parts, getattr(resp, "controller_id", None))


# -- Produce ----------------------------------------------------------------------------------

def after_tagged_fields(frame: bytes) -> bytes:
    """A response body after header v1's tagged fields (unsigned varints)."""
    pos = 0

    def uvarint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            if pos >= len(frame):
                raise WireError("a response header cut short")
            b = frame[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
    for _ in range(uvarint()):
        uvarint()
        pos += uvarint()
    return frame[pos:]


def record_batch(values: list[bytes | None], producer: tuple[int, int, int] | None = None,
                 transactional: bool = False) -> bytes:
    """One RecordBatch v2 (uncompressed) holding `values`; `producer` is
    (producer id, producer epoch, base sequence) for an idempotent or
    (`transactional`) a transactional batch."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    pid, epoch, seq = producer or (-1, -1, -1)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 30)
    now_ms = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, timestamp=now_ms, key=None, value=v, headers=[])
    return bytes(b.build())


def produce(conn: KafkaConnection, topic: str, partition: int, values: list[bytes | None], *,
            acks: int = -1, timeout_ms: int = 10000,
            producer: tuple[int, int, int] | None = None) -> tuple[int, int]:
    """(error, base offset) of one Produce (v3) of `values` as one batch;
    `acks` 1 or -1 (acks=0 gets no answer); `producer` as for record_batch.
    The connection's socket timeout must outlast `timeout_ms` for acks=all."""
    return produce_batch(conn, topic, partition, record_batch(values, producer), acks=acks,
                         timeout_ms=timeout_ms)


def produce_batch(conn: KafkaConnection, topic: str, partition: int, batch: bytes, *,
                  acks: int = -1, timeout_ms: int = 10000,
                  transactional_id: str | None = None) -> tuple[int, int]:
    """(error, base offset) of one Produce (v3) carrying `batch` as it is
    (a damaged one, say; a transactional one names its `transactional_id`)."""
    from kafka.protocol.producer import ProduceRequest, ProduceResponse
    resp = conn.call(ProduceRequest, ProduceResponse, 3, transactional_id=transactional_id,
                     acks=acks,
                     timeout_ms=timeout_ms, topic_data=[(topic, [(partition, batch)])])
    pr = resp.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def init_producer_id(conn: KafkaConnection) -> tuple[int, int, int]:
    """(error, producer id, producer epoch) of InitProducerId v0 without a
    transactional id: an idempotent producer's identity."""
    from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
    resp = conn.call(InitProducerIdRequest, InitProducerIdResponse, 0, transactional_id=None,
                     transaction_timeout_ms=60000)
    return resp.error_code, resp.producer_id, resp.producer_epoch


# -- Fetch ------------------------------------------------------------------------------------

@dataclass
class FetchResult:
    error: int
    high_watermark: int
    log_start_offset: int | None
    records: list[tuple[int, bytes | None]]       # (offset, value), offsets >= the fetch offset


def fetch(conn: KafkaConnection, topic: str, partition: int, offset: int, *,
          max_wait_ms: int = 100, max_bytes: int = 1 << 20) -> FetchResult:
    """One consumer fetch (replica id -1) of one partition from `offset`."""
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.record import MemoryRecords

    v = conn.version(FetchRequest.API_KEY, 5)
    part: dict[str, Any] = {"partition": partition, "fetch_offset": offset,
                            "partition_max_bytes": max_bytes}
    if v >= 5:
        part["log_start_offset"] = -1
    fields: dict[str, Any] = {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
        "topics": [FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchTopic.FetchPartition(**part)])]}
    if v >= 3:
        fields["max_bytes"] = max_bytes
    if v >= 4:
        fields["isolation_level"] = 0
    resp = conn.call(FetchRequest, FetchResponse, v, **fields)
    pd = resp.responses[0].partitions[0]
    records: list[tuple[int, bytes | None]] = []
    if pd.records:
        batches = MemoryRecords(bytes(pd.records))
        while batches.has_next():
            batch = batches.next_batch()
            if batch is None:  # a partial batch at the end of the response
                break
            for r in batch:
                if r.offset >= offset:
                    records.append((r.offset, r.value))
    lso = getattr(pd, "log_start_offset", None) if v >= 5 else None
    return FetchResult(pd.error_code, pd.high_watermark, lso, records)


def list_offset(conn: KafkaConnection, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
    """(error, offset) of ListOffsets: timestamp -2 = the log start, -1 = the end."""
    from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
    resp = conn.call(ListOffsetsRequest, ListOffsetsResponse, 1, replica_id=-1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=partition, timestamp=timestamp)])])
    p = resp.topics[0].partitions[0]
    return p.error_code, p.offset


def offset_for_leader_epoch(conn: KafkaConnection, topic: str, partition: int,
                            leader_epoch: int) -> tuple[int, int, int]:
    """(error, leader epoch, end offset) of OffsetForLeaderEpoch v1 (KIP-279):
    where the leader's log of `leader_epoch` (or the largest epoch below it)
    ends, as a truncating follower asks."""
    from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
    topic_cls = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    resp = conn.call(OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 1, topics=[
        topic_cls(topic=topic, partitions=[topic_cls.OffsetForLeaderPartition(
            partition=partition, leader_epoch=leader_epoch)])])
    p = resp.topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


# -- Consumer groups ----------------------------------------------------------------------------
# One request each, as a group member's client sends it; every answer's error
# code is returned, so a scenario sees exactly what the coordinator said.

def find_coordinator(conn: KafkaConnection, key: str,
                     key_type: int = 0) -> tuple[int, int, str, int]:
    """(error, node id, host, port) of FindCoordinator v1 for consumer group
    `key` (key type 0) or transactional id `key` (1)."""
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
    resp = conn.call(FindCoordinatorRequest, FindCoordinatorResponse, 1, key=key,
                     key_type=key_type)
    return resp.error_code, resp.node_id, resp.host, resp.port


# -- transactions (KIP-98): a transactional producer's requests, one each -------------------

def init_transactional_id(conn: KafkaConnection, transactional_id: str,
                          timeout_ms: int = 60000) -> tuple[int, int, int]:
    """(error, producer id, producer epoch) of InitProducerId v1 for a transactional id."""
    from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
    resp = conn.call(InitProducerIdRequest, InitProducerIdResponse, 1,
                     transactional_id=transactional_id, transaction_timeout_ms=timeout_ms)
    return resp.error_code, resp.producer_id, resp.producer_epoch


def add_partitions_to_txn(conn: KafkaConnection, transactional_id: str, producer_id: int,
                          epoch: int, partitions: list[tuple[str, int]]
                          ) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v1: the error of each partition."""
    from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    resp = conn.call(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 1,
                     v3_and_below_transactional_id=transactional_id,
                     v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
                     v3_and_below_topics=list(topics.items()))
    return {(t.name, r.partition_index): r.partition_error_code
            for t in resp.results_by_topic_v3_and_below for r in t.results_by_partition}


def end_txn(conn: KafkaConnection, transactional_id: str, producer_id: int, epoch: int,
            commit: bool, version: int = 1) -> tuple[int, int, int]:
    """(error, producer id, epoch) of EndTxn: v5 (KIP-890) answers the id
    and epoch of the producer's next transaction; older versions the ones
    it was sent with."""
    from kafka.protocol.producer import EndTxnRequest, EndTxnResponse
    resp = conn.call(EndTxnRequest, EndTxnResponse, version, transactional_id=transactional_id,
                     producer_id=producer_id, producer_epoch=epoch, committed=commit)
    if version >= 5:
        return resp.error_code, resp.producer_id, resp.producer_epoch
    return resp.error_code, producer_id, epoch


@dataclass
class JoinResult:
    error: int
    generation: int
    protocol: str
    leader: str                     # the leader's member id
    member_id: str
    members: dict[str, bytes]       # member id -> its metadata: in the leader's answer only


def join_group(conn: KafkaConnection, group: str, member_id: str = "", *,
               protocols: list[tuple[str, bytes]] | None = None,
               protocol_type: str = "consumer", session_timeout_ms: int = 10000,
               rebalance_timeout_ms: int = 30000) -> JoinResult:
    """JoinGroup v2: join `group` (without a member id: as a new member),
    offering `protocols` (name, metadata) in order of preference (default
    one protocol, "range"). The answer comes when the rebalance completes:
    the connection's socket timeout must outlast it."""
    from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse
    proto = JoinGroupRequest.JoinGroupRequestProtocol
    offered = [("range", b"")] if protocols is None else protocols
    resp = conn.call(JoinGroupRequest, JoinGroupResponse, 2, group_id=group,
                     session_timeout_ms=session_timeout_ms,
                     rebalance_timeout_ms=rebalance_timeout_ms, member_id=member_id,
                     protocol_type=protocol_type,
                     protocols=[proto(name=n, metadata=m) for n, m in offered])
    return JoinResult(resp.error_code, resp.generation_id, resp.protocol_name or "",
                      resp.leader or "", resp.member_id or "",
                      {m.member_id: bytes(m.metadata or b"") for m in resp.members or []})


def sync_group(conn: KafkaConnection, group: str, generation: int, member_id: str,
               assignments: dict[str, bytes] | None = None) -> tuple[int, bytes]:
    """(error, this member's assignment) of SyncGroup v1; the leader brings
    `assignments` (member id -> assignment), the others none. Waits for the
    leader's SyncGroup while the group completes its rebalance."""
    from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse
    assignment = SyncGroupRequest.SyncGroupRequestAssignment
    resp = conn.call(SyncGroupRequest, SyncGroupResponse, 1, group_id=group,
                     generation_id=generation, member_id=member_id,
                     assignments=[assignment(member_id=m, assignment=a)
                                  for m, a in (assignments or {}).items()])
    return resp.error_code, bytes(resp.assignment or b"")


def heartbeat(conn: KafkaConnection, group: str, generation: int, member_id: str) -> int:
    """The error of Heartbeat v1 (REBALANCE_IN_PROGRESS: join again)."""
    from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse
    resp = conn.call(HeartbeatRequest, HeartbeatResponse, 1, group_id=group,
                     generation_id=generation, member_id=member_id)
    return resp.error_code


def leave_group(conn: KafkaConnection, group: str, member_id: str) -> int:
    """The error of LeaveGroup v1."""
    from kafka.protocol.consumer import LeaveGroupRequest, LeaveGroupResponse
    resp = conn.call(LeaveGroupRequest, LeaveGroupResponse, 1, group_id=group,
                     member_id=member_id)
    return resp.error_code


def offset_commit(conn: KafkaConnection, group: str, offsets: dict[tuple[str, int], int], *,
                  generation: int = -1, member_id: str = "", metadata: str = ""
                  ) -> dict[tuple[str, int], int]:
    """OffsetCommit v2 of `offsets` ((topic, partition) -> offset) with
    `metadata` on each: (topic, partition) -> error. Generation -1 and no
    member id: a group that uses the broker for its offsets only. Waits
    for the commit's replication (offsets.commit.timeout.ms)."""
    from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    part_cls = topic_cls.OffsetCommitRequestPartition
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(part_cls(
            partition_index=partition, committed_offset=offset, committed_metadata=metadata))
    resp = conn.call(OffsetCommitRequest, OffsetCommitResponse, 2, group_id=group,
                     generation_id_or_member_epoch=generation, member_id=member_id,
                     retention_time_ms=-1,
                     topics=[topic_cls(name=t, partitions=ps) for t, ps in by_topic.items()])
    return {(t.name, p.partition_index): p.error_code
            for t in resp.topics for p in t.partitions}


def offset_fetch(conn: KafkaConnection, group: str,
                 partitions: list[tuple[str, int]] | None = None
                 ) -> tuple[int, dict[tuple[str, int], tuple[int, str]]]:
    """(error, (topic, partition) -> (committed offset, metadata)) of
    OffsetFetch v3 for `partitions`, or every partition the group has
    committed when None. Offset -1: nothing committed. The error is the
    answer's own, else the first partition's error."""
    from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
    topic_cls = OffsetFetchRequest.OffsetFetchRequestTopic
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        topics = [topic_cls(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
    resp = conn.call(OffsetFetchRequest, OffsetFetchResponse, 3, group_id=group, topics=topics)
    error = resp.error_code
    found: dict[tuple[str, int], tuple[int, str]] = {}
    for t in resp.topics or []:
        for p in t.partitions:
            found[(t.name, p.partition_index)] = (p.committed_offset, p.metadata or "")
            if not error and p.error_code:
                error = p.error_code
    return error, found


def describe_group(conn: KafkaConnection, group: str) -> tuple[int, str, str, list[str]]:
    """(error, state, protocol, member ids) of DescribeGroups v1 for `group`."""
    from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
    resp = conn.call(DescribeGroupsRequest, DescribeGroupsResponse, 1, groups=[group])
    g = resp.groups[0]
    return (g.error_code, g.group_state or "", g.protocol_data or "",
            [m.member_id for m in g.members or []])


# -- the built-in broker's test-only state window ----------------------------------------------

STATE_WINDOW_KEY = 32001   # docs/architecture.md, "State window" (not a Kafka API)


def state_window(conn: KafkaConnection, max_partitions: int = 0) -> dict[str, Any]:
    """One broker's own state at one moment: its replicas (leader, epoch,
    ISR, HW, LEO, each follower's LEO as a leader knows it, the last
    committed batch) and, on the active controller, the controller's view.
    Only chaoslog's broker with `chaoslog.state.window.enable` answers."""
    import json
    frame = conn.request(STATE_WINDOW_KEY, 0, _SIZE.pack(max_partitions), "StateWindow")
    try:
        (err,) = struct.unpack_from(">h", frame)
        (n,) = _SIZE.unpack_from(frame, 2)
        data = json.loads(frame[6:6 + n])
    except (struct.error, ValueError) as e:
        raise WireError(f"undecodable state window answer: {e}") from None
    if err != 0 or not isinstance(data, dict):
        raise WireError(f"state window answered error {err}")
    return data
