"""The client APIs this broker serves, at which versions, with which codec.

Bodies are decoded and encoded by kafka-python's classes, which are generated
from Kafka's own JSON schemas (kafka-python is pinned: its internal API changed
in 3.0). Version ranges are what a Kafka 0.8-era broker plus the KIP-98/101/279/320
additions need (docs/design.md#protocol): enough for unmodified confluent-kafka
2.x, kafka-python 3.x and aiokafka (tests/cluster/server/test_clients_e2e.py).

The admin APIs (CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs) are served at the last versions before Kafka's flexible
encoding, which the AdminClients of those clients negotiate.

The group APIs (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups) reach the
versions of a Kafka 2.0 broker, except OffsetCommit v0 and OffsetFetch v0,
which Kafka 2.0 served from ZooKeeper, a second offset store this broker
does not have (docs/design.md#groups). kafka-python's classes have every
version of them.
"""
from __future__ import annotations

import struct

from kafka.protocol.admin import (CreatePartitionsRequest, CreatePartitionsResponse,
                                  DescribeTransactionsRequest, DescribeTransactionsResponse,
                                  ListTransactionsRequest, ListTransactionsResponse,
                                  CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
                                  DeleteTopicsResponse, DescribeConfigsRequest,
                                  DescribeConfigsResponse, DescribeGroupsRequest,
                                  DescribeGroupsResponse, ListGroupsRequest, ListGroupsResponse)
from kafka.protocol.consumer import (FetchRequest, FetchResponse, HeartbeatRequest,
                                     HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
                                     LeaveGroupRequest, LeaveGroupResponse, ListOffsetsRequest,
                                     ListOffsetsResponse, OffsetCommitRequest,
                                     OffsetCommitResponse, OffsetFetchRequest,
                                     OffsetFetchResponse, OffsetForLeaderEpochRequest,
                                     OffsetForLeaderEpochResponse, SyncGroupRequest,
                                     SyncGroupResponse)
from kafka.protocol.metadata import (ApiVersionsRequest, ApiVersionsResponse,
                                     FindCoordinatorRequest, FindCoordinatorResponse,
                                     MetadataRequest, MetadataResponse)
from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse,
                                 SaslHandshakeRequest, SaslHandshakeResponse)
from kafka.protocol.producer import (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse,
                                     AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
                                     EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
                                     InitProducerIdResponse, ProduceRequest, ProduceResponse,
                                     TxnOffsetCommitRequest, TxnOffsetCommitResponse)

from cluster.protocol import control, sasl
from cluster.protocol.frame import ProtocolError

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
LEADER_AND_ISR = control.LEADER_AND_ISR
STOP_REPLICA = control.STOP_REPLICA
UPDATE_METADATA = control.UPDATE_METADATA
CONTROLLED_SHUTDOWN = control.CONTROLLED_SHUTDOWN
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = control.WRITE_TXN_MARKERS
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
DESCRIBE_CONFIGS = 32
CREATE_PARTITIONS = 37
SASL_HANDSHAKE = sasl.SASL_HANDSHAKE
SASL_AUTHENTICATE = sasl.SASL_AUTHENTICATE

# api key -> (min version, max version, request class, response class)
# The client APIs reach the versions a Kafka 2.0 broker accepts, so that a
# client pinned to that broker version is served (docs/design.md#protocol);
# Fetch and OffsetForLeaderEpoch one further, for fencing.
CLIENT_APIS: dict[int, tuple[int, int, type, type]] = {
    # v5 answers the log start offset of each partition written.
    PRODUCE: (0, 6, ProduceRequest, ProduceResponse),
    # v5 reports the log start offset with every partition's records; v7
    # brings fetch sessions (KIP-227), which this broker declines; v9 the
    # sender's leader epoch (KIP-320: docs/design.md#fencing).
    FETCH: (0, 9, FetchRequest, FetchResponse),
    LIST_OFFSETS: (0, 3, ListOffsetsRequest, ListOffsetsResponse),
    # v5 lists each partition's offline replicas.
    METADATA: (0, 6, MetadataRequest, MetadataResponse),
    API_VERSIONS: (0, 2, ApiVersionsRequest, ApiVersionsResponse),
    INIT_PRODUCER_ID: (0, 1, InitProducerIdRequest, InitProducerIdResponse),
    # v1 (KIP-279) returns the leader epoch of the end offset, which a
    # follower needs to find the point where its log diverged; v2 the
    # sender's leader epoch (KIP-320: docs/design.md#fencing).
    OFFSET_FOR_LEADER_EPOCH: (0, 2, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    # docs/design.md#admin-api. CreateTopics v4: -1 partitions or replication
    # factor means the broker default (KIP-464).
    CREATE_TOPICS: (2, 4, CreateTopicsRequest, CreateTopicsResponse),
    DELETE_TOPICS: (1, 3, DeleteTopicsRequest, DeleteTopicsResponse),
    CREATE_PARTITIONS: (0, 1, CreatePartitionsRequest, CreatePartitionsResponse),
    DESCRIBE_CONFIGS: (1, 2, DescribeConfigsRequest, DescribeConfigsResponse),
}

# The group APIs (docs/design.md#groups), served like the client APIs at
# Kafka 2.0's versions; OffsetCommit and OffsetFetch v0 kept their offsets in
# ZooKeeper in Kafka: not served. A table of their own so that tools can
# tell them apart (the protocol fuzzer aims them at groups of its own).
GROUP_APIS: dict[int, tuple[int, int, type, type]] = {
    FIND_COORDINATOR: (0, 2, FindCoordinatorRequest, FindCoordinatorResponse),
    JOIN_GROUP: (0, 3, JoinGroupRequest, JoinGroupResponse),
    SYNC_GROUP: (0, 2, SyncGroupRequest, SyncGroupResponse),
    HEARTBEAT: (0, 2, HeartbeatRequest, HeartbeatResponse),
    LEAVE_GROUP: (0, 2, LeaveGroupRequest, LeaveGroupResponse),
    OFFSET_COMMIT: (1, 4, OffsetCommitRequest, OffsetCommitResponse),
    OFFSET_FETCH: (1, 4, OffsetFetchRequest, OffsetFetchResponse),
    LIST_GROUPS: (0, 2, ListGroupsRequest, ListGroupsResponse),
    DESCRIBE_GROUPS: (0, 2, DescribeGroupsRequest, DescribeGroupsResponse),
}

# The transactional APIs (docs/design.md#transactions), at Kafka 2.0's
# versions; InitProducerId with a transactional id is among the client APIs.
TRANSACTION_APIS: dict[int, tuple[int, int, type, type]] = {
    ADD_PARTITIONS_TO_TXN: (0, 1, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    ADD_OFFSETS_TO_TXN: (0, 1, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    # v3+ are flexible; v5 (KIP-890) answers the producer's epoch after the
    # transaction, bumped under transaction.protocol=kip-890.
    END_TXN: (0, 5, EndTxnRequest, EndTxnResponse),
    TXN_OFFSET_COMMIT: (0, 1, TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    # The admin view (KIP-664), flexible from their first version.
    DESCRIBE_TRANSACTIONS: (0, 0, DescribeTransactionsRequest, DescribeTransactionsResponse),
    LIST_TRANSACTIONS: (0, 1, ListTransactionsRequest, ListTransactionsResponse),
}

# Authentication (docs/design.md#security): served before any other request
# on a SASL listener (cluster/server/authenticator.py), refused with
# ILLEGAL_SASL_STATE on a listener without SASL, as Kafka does. Handshake v0
# sends the tokens as raw frames; SaslAuthenticate v1 answers a session
# lifetime (KIP-368).
SASL_APIS: dict[int, tuple[int, int, type, type]] = {
    SASL_HANDSHAKE: (0, 1, SaslHandshakeRequest, SaslHandshakeResponse),
    SASL_AUTHENTICATE: (0, 1, SaslAuthenticateRequest, SaslAuthenticateResponse),
}

# Every request a client may send, with its codec.
SERVED_APIS: dict[int, tuple[int, int, type, type]] = {**CLIENT_APIS, **GROUP_APIS,
                                                       **TRANSACTION_APIS, **SASL_APIS}

# Everything advertised in ApiVersions: the client APIs and the controller's.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    **{k: (lo, hi) for k, (lo, hi, _, _) in SERVED_APIS.items()},
    **{k: (control.API_VERSION, control.API_VERSION) for k in control.CONTROL_API_KEYS},
}

NAMES = {PRODUCE: "Produce", FETCH: "Fetch", LIST_OFFSETS: "ListOffsets", METADATA: "Metadata",
         LEADER_AND_ISR: "LeaderAndIsr", STOP_REPLICA: "StopReplica",
         UPDATE_METADATA: "UpdateMetadata", CONTROLLED_SHUTDOWN: "ControlledShutdown",
         API_VERSIONS: "ApiVersions", INIT_PRODUCER_ID: "InitProducerId",
         OFFSET_FOR_LEADER_EPOCH: "OffsetForLeaderEpoch", CREATE_TOPICS: "CreateTopics",
         DELETE_TOPICS: "DeleteTopics", CREATE_PARTITIONS: "CreatePartitions",
         DESCRIBE_CONFIGS: "DescribeConfigs", OFFSET_COMMIT: "OffsetCommit",
         OFFSET_FETCH: "OffsetFetch", FIND_COORDINATOR: "FindCoordinator",
         JOIN_GROUP: "JoinGroup", HEARTBEAT: "Heartbeat", LEAVE_GROUP: "LeaveGroup",
         SYNC_GROUP: "SyncGroup", DESCRIBE_GROUPS: "DescribeGroups", LIST_GROUPS: "ListGroups",
         ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn", ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn",
         END_TXN: "EndTxn", WRITE_TXN_MARKERS: "WriteTxnMarkers",
         TXN_OFFSET_COMMIT: "TxnOffsetCommit", DESCRIBE_TRANSACTIONS: "DescribeTransactions",
         LIST_TRANSACTIONS: "ListTransactions", SASL_HANDSHAKE: "SaslHandshake",
         SASL_AUTHENTICATE: "SaslAuthenticate"}


# The first flexible version (KIP-482: compact encodings, tagged fields) of
# the APIs served at one; every other API is served at older versions only.
FLEXIBLE_FROM: dict[int, int] = {END_TXN: 3, DESCRIBE_TRANSACTIONS: 0, LIST_TRANSACTIONS: 0}


def is_flexible(api_key: int, version: int) -> bool:
    return version >= FLEXIBLE_FROM.get(api_key, 1 << 15)


def is_supported(api_key: int, version: int) -> bool:
    r = SUPPORTED_VERSIONS.get(api_key)
    return r is not None and r[0] <= version <= r[1]


def decode_request(api_key: int, version: int, frame, offset: int):
    """Decode a client request body; ProtocolError for anything undecodable."""
    try:
        lo, hi, req_cls, _ = SERVED_APIS[api_key]
    except KeyError:
        raise ProtocolError(f"api key {api_key} is not a client api") from None
    if not lo <= version <= hi:
        raise ProtocolError(f"{req_cls.__name__} v{version} is not supported")
    try:
        return req_cls.decode(memoryview(frame)[offset:], version=version)
    except ProtocolError:
        raise
    except Exception as e:  # the generated decoders raise struct.error, ValueError, ...
        raise ProtocolError(f"malformed {req_cls.__name__} v{version}: {e!r}") from None


def encode_response(api_key: int, version: int, response) -> bytes:
    """The body (no header) of a client response object."""
    return bytes(response.encode(version=version))


def response_class(api_key: int) -> type:
    return SERVED_APIS[api_key][3]


_AV_ENTRY = struct.Struct(">hhh")


def api_versions_body(version: int, error: int = 0) -> bytes:
    """ApiVersions response body. With an error (UNSUPPORTED_VERSION for a
    probe at a newer version) Kafka answers with the v0 body, which every
    client can parse whatever version it asked for."""
    entries = sorted(SUPPORTED_VERSIONS.items())
    parts = [struct.pack(">hi", error, len(entries))]
    parts += [_AV_ENTRY.pack(k, lo, hi) for k, (lo, hi) in entries]
    if version >= 1 and error == 0:
        parts.append(struct.pack(">i", 0))  # throttle_time_ms
    return b"".join(parts)
