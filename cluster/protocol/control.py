"""Controller <-> broker requests: dataclasses and their binary codec.

The controller tells brokers what to do with four direct requests, not through
ZooKeeper (docs/design.md#protocol). They use Kafka's wire framing so one
socket server can serve both clients and the controller:

  frame            = int32 size, then size bytes
  request header   = int16 api_key, int16 api_version, int32 correlation_id,
                     nullable string client_id          (Kafka request header v1)
  response header  = int32 correlation_id
  primitives       = big-endian; string = int16 length + UTF-8 (-1 = null, only
                     for client_id); array = int32 count + elements; bool = int8

Api keys are Kafka 0.8's (LeaderAndIsr 4, StopReplica 5, UpdateMetadata 6,
ControlledShutdown 7); the bodies are our own (version 2), not Kafka's, because they
carry what this design needs (zk_version, the full replica list and the topic
id in the partition state, the broker start epoch in ControlledShutdown).
WriteTxnMarkers (27), from a transaction coordinator to partition leaders
(docs/design.md#transactions), has Kafka's version 0 fields at version 2.

Every request carries the sender's controller epoch; a broker rejects one
older than the newest it has seen with STALE_CONTROLLER_EPOCH (Kafka 0.8's fix
for a zombie controller; docs/design.md#controller-epoch).

Decoding is strict: trailing bytes, negative or impossible counts, bad UTF-8,
unknown api keys or versions all raise ProtocolError, never anything else.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from cluster.protocol import errors as E

# --- api keys (Kafka 0.8) and the one version we speak ----------------------
LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7
WRITE_TXN_MARKERS = 27
# v1: every controller request names the broker it is for and that broker's
# start epoch (docs/design.md#controller-epoch).
# v2: a PartitionState carries its topic's id (docs/design.md#topic-ids).
API_VERSION = 2
CONTROL_API_KEYS = frozenset({LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN,
                              WRITE_TXN_MARKERS})

class ProtocolError(ValueError):
    """A frame that cannot be decoded (or a body that cannot be encoded)."""


# --- primitive writer / reader ------------------------------------------------
_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def _pack(self, s: struct.Struct, v: Any) -> None:
        try:
            self.parts.append(s.pack(v))
        except struct.error as e:
            raise ProtocolError(f"cannot encode {v!r}: {e}") from None

    def i8(self, v: int) -> None: self._pack(_I8, v)
    def i16(self, v: int) -> None: self._pack(_I16, v)
    def i32(self, v: int) -> None: self._pack(_I32, v)
    def i64(self, v: int) -> None: self._pack(_I64, v)
    def bool(self, v: bool) -> None: self._pack(_I8, 1 if v else 0)

    def string(self, v: str | None, nullable: bool = False) -> None:
        if v is None:
            if not nullable:
                raise ProtocolError("null string where a string is required")
            self.i16(-1)
            return
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise ProtocolError("string longer than 32767 bytes")
        self.i16(len(b))
        self.parts.append(b)

    def array(self, items: Any, each: Callable[[Any], None]) -> None:
        items = list(items)
        self.i32(len(items))
        for it in items:
            each(it)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(bytes(data))
        self.pos = 0

    def _unpack(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.data):
            raise ProtocolError("frame too short")
        (v,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return v

    def i8(self) -> int: return self._unpack(_I8)
    def i16(self) -> int: return self._unpack(_I16)
    def i32(self) -> int: return self._unpack(_I32)
    def i64(self) -> int: return self._unpack(_I64)

    def bool(self) -> bool:
        v = self.i8()
        if v not in (0, 1):
            raise ProtocolError(f"bad boolean {v}")
        return v == 1

    def string(self, nullable: bool = False) -> str | None:
        n = self.i16()
        if n == -1 and nullable:
            return None
        if n < 0:
            raise ProtocolError(f"bad string length {n}")
        if self.pos + n > len(self.data):
            raise ProtocolError("string past end of frame")
        raw = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not UTF-8") from None

    def array(self, each: Callable[[], Any], min_size: int) -> list[Any]:
        n = self.i32()
        # Every element takes at least min_size bytes: refuse counts the frame
        # cannot hold rather than looping over a garbage count.
        if n < 0 or n * min_size > len(self.data) - self.pos:
            raise ProtocolError(f"bad array count {n}")
        return [each() for _ in range(n)]

    def done(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(f"{len(self.data) - self.pos} trailing bytes")


# --- the shared structures ----------------------------------------------------
@dataclass(frozen=True)
class TopicPartition:
    topic: str
    partition: int

    def _write(self, w: _Writer) -> None:
        w.string(self.topic)
        w.i32(self.partition)

    @classmethod
    def _read(cls, r: _Reader) -> "TopicPartition":
        return cls(r.string(), r.i32())


@dataclass(frozen=True)
class PartitionError:
    topic: str
    partition: int
    error: int = E.NONE

    def _write(self, w: _Writer) -> None:
        w.string(self.topic)
        w.i32(self.partition)
        w.i16(self.error)

    @classmethod
    def _read(cls, r: _Reader) -> "PartitionError":
        return cls(r.string(), r.i32(), r.i16())


@dataclass(frozen=True)
class PartitionState:
    """What the controller decided for one partition (its leaderAndISR),
    plus the assigned replicas so a broker can create a missing replica
    (docs/design.md#leader-and-isr)."""
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    topic_id: str = ""   # "" for a topic created without one

    def _write(self, w: _Writer) -> None:
        w.string(self.topic)
        w.i32(self.partition)
        w.i32(self.leader)
        w.i32(self.leader_epoch)
        w.array(self.isr, w.i32)
        w.i32(self.zk_version)
        w.array(self.replicas, w.i32)
        w.string(self.topic_id)

    @classmethod
    def _read(cls, r: _Reader) -> "PartitionState":
        return cls(r.string(), r.i32(), r.i32(), r.i32(), tuple(r.array(r.i32, 4)),
                   r.i32(), tuple(r.array(r.i32, 4)), r.string())


@dataclass(frozen=True)
class BrokerEndpoint:
    id: int
    host: str
    port: int

    def _write(self, w: _Writer) -> None:
        w.i32(self.id)
        w.string(self.host)
        w.i32(self.port)

    @classmethod
    def _read(cls, r: _Reader) -> "BrokerEndpoint":
        return cls(r.i32(), r.string(), r.i32())


# Minimal encoded sizes, for _Reader.array's sanity check.
_TP_MIN, _PE_MIN, _PS_MIN, _BE_MIN = 6, 8, 26, 10


# --- request and response bodies ----------------------------------------------
@dataclass(frozen=True)
class _PartitionErrorsResponse:
    """The body LeaderAndIsr and StopReplica responses share: an error for the
    whole request and one per partition."""
    error: int = E.NONE
    partitions: tuple[PartitionError, ...] = ()

    def _write(self, w: _Writer) -> None:
        w.i16(self.error)
        w.array(self.partitions, lambda p: p._write(w))

    @classmethod
    def _read(cls, r: _Reader) -> "_PartitionErrorsResponse":
        return cls(r.i16(), tuple(r.array(lambda: PartitionError._read(r), _PE_MIN)))


@dataclass(frozen=True)
class LeaderAndIsrRequest:
    """`broker_id`/`broker_epoch`: the broker this request is for and the
    start epoch it registered with (-1: not checked). A broker refuses a
    request meant for another broker or an earlier incarnation of itself: a
    restarted container can take the address a dead broker had (KIP-380)."""
    API_KEY: ClassVar[int] = LEADER_AND_ISR
    controller_id: int
    controller_epoch: int
    init: bool
    partition_states: tuple[PartitionState, ...] = ()
    live_leaders: tuple[BrokerEndpoint, ...] = ()
    broker_id: int = -1
    broker_epoch: int = -1

    def _write(self, w: _Writer) -> None:
        w.i32(self.controller_id)
        w.i32(self.controller_epoch)
        w.bool(self.init)
        w.array(self.partition_states, lambda s: s._write(w))
        w.array(self.live_leaders, lambda b: b._write(w))
        w.i32(self.broker_id)
        w.i64(self.broker_epoch)

    @classmethod
    def _read(cls, r: _Reader) -> "LeaderAndIsrRequest":
        return cls(r.i32(), r.i32(), r.bool(),
                   tuple(r.array(lambda: PartitionState._read(r), _PS_MIN)),
                   tuple(r.array(lambda: BrokerEndpoint._read(r), _BE_MIN)),
                   r.i32(), r.i64())


@dataclass(frozen=True)
class LeaderAndIsrResponse(_PartitionErrorsResponse):
    API_KEY: ClassVar[int] = LEADER_AND_ISR


@dataclass(frozen=True)
class StopReplicaRequest:
    API_KEY: ClassVar[int] = STOP_REPLICA
    controller_id: int
    controller_epoch: int
    delete_partitions: bool
    partitions: tuple[TopicPartition, ...] = ()
    broker_id: int = -1             # as in LeaderAndIsrRequest
    broker_epoch: int = -1

    def _write(self, w: _Writer) -> None:
        w.i32(self.controller_id)
        w.i32(self.controller_epoch)
        w.bool(self.delete_partitions)
        w.array(self.partitions, lambda p: p._write(w))
        w.i32(self.broker_id)
        w.i64(self.broker_epoch)

    @classmethod
    def _read(cls, r: _Reader) -> "StopReplicaRequest":
        return cls(r.i32(), r.i32(), r.bool(),
                   tuple(r.array(lambda: TopicPartition._read(r), _TP_MIN)), r.i32(), r.i64())


@dataclass(frozen=True)
class StopReplicaResponse(_PartitionErrorsResponse):
    API_KEY: ClassVar[int] = STOP_REPLICA


@dataclass(frozen=True)
class UpdateMetadataRequest:
    API_KEY: ClassVar[int] = UPDATE_METADATA
    controller_id: int
    controller_epoch: int
    partition_states: tuple[PartitionState, ...] = ()
    live_brokers: tuple[BrokerEndpoint, ...] = ()
    broker_id: int = -1             # as in LeaderAndIsrRequest
    broker_epoch: int = -1

    def _write(self, w: _Writer) -> None:
        w.i32(self.controller_id)
        w.i32(self.controller_epoch)
        w.array(self.partition_states, lambda s: s._write(w))
        w.array(self.live_brokers, lambda b: b._write(w))
        w.i32(self.broker_id)
        w.i64(self.broker_epoch)

    @classmethod
    def _read(cls, r: _Reader) -> "UpdateMetadataRequest":
        return cls(r.i32(), r.i32(),
                   tuple(r.array(lambda: PartitionState._read(r), _PS_MIN)),
                   tuple(r.array(lambda: BrokerEndpoint._read(r), _BE_MIN)), r.i32(), r.i64())


@dataclass(frozen=True)
class UpdateMetadataResponse:
    API_KEY: ClassVar[int] = UPDATE_METADATA
    error: int = E.NONE

    def _write(self, w: _Writer) -> None:
        w.i16(self.error)

    @classmethod
    def _read(cls, r: _Reader) -> "UpdateMetadataResponse":
        return cls(r.i16())


@dataclass(frozen=True)
class ControlledShutdownRequest:
    """Sent by a broker to the controller before it stops; broker_epoch is the
    start epoch it registered with (zkpaths.BrokerRegistration.start_epoch), so
    a late retry from a previous incarnation is recognisable."""
    API_KEY: ClassVar[int] = CONTROLLED_SHUTDOWN
    broker_id: int
    broker_epoch: int

    def _write(self, w: _Writer) -> None:
        w.i32(self.broker_id)
        w.i64(self.broker_epoch)

    @classmethod
    def _read(cls, r: _Reader) -> "ControlledShutdownRequest":
        return cls(r.i32(), r.i64())


@dataclass(frozen=True)
class ControlledShutdownResponse:
    API_KEY: ClassVar[int] = CONTROLLED_SHUTDOWN
    error: int = E.NONE
    partitions_remaining: tuple[TopicPartition, ...] = ()

    def _write(self, w: _Writer) -> None:
        w.i16(self.error)
        w.array(self.partitions_remaining, lambda p: p._write(w))

    @classmethod
    def _read(cls, r: _Reader) -> "ControlledShutdownResponse":
        return cls(r.i16(), tuple(r.array(lambda: TopicPartition._read(r), _TP_MIN)))


@dataclass(frozen=True)
class TxnMarker:
    """One transaction's markers: its producer, the epoch they carry, commit
    or abort, its partitions, and the coordinator's epoch (the leader epoch
    of its `__transaction_state` partition)."""
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    coordinator_epoch: int

    def _write(self, w: _Writer) -> None:
        w.i64(self.producer_id)
        w.i16(self.producer_epoch)
        w.bool(self.commit)
        w.array(self.partitions, lambda p: p._write(w))
        w.i32(self.coordinator_epoch)

    @classmethod
    def _read(cls, r: _Reader) -> "TxnMarker":
        return cls(r.i64(), r.i16(), r.bool(),
                   tuple(r.array(lambda: TopicPartition._read(r), _TP_MIN)), r.i32())


@dataclass(frozen=True)
class WriteTxnMarkersRequest:
    API_KEY: ClassVar[int] = WRITE_TXN_MARKERS
    markers: tuple[TxnMarker, ...] = ()

    def _write(self, w: _Writer) -> None:
        w.array(self.markers, lambda m: m._write(w))

    @classmethod
    def _read(cls, r: _Reader) -> "WriteTxnMarkersRequest":
        return cls(tuple(r.array(lambda: TxnMarker._read(r), _TM_MIN)))


@dataclass(frozen=True)
class TxnMarkerResult:
    producer_id: int
    partitions: tuple[PartitionError, ...] = ()

    def _write(self, w: _Writer) -> None:
        w.i64(self.producer_id)
        w.array(self.partitions, lambda p: p._write(w))

    @classmethod
    def _read(cls, r: _Reader) -> "TxnMarkerResult":
        return cls(r.i64(), tuple(r.array(lambda: PartitionError._read(r), _PE_MIN)))


@dataclass(frozen=True)
class WriteTxnMarkersResponse:
    API_KEY: ClassVar[int] = WRITE_TXN_MARKERS
    markers: tuple[TxnMarkerResult, ...] = ()

    def _write(self, w: _Writer) -> None:
        w.array(self.markers, lambda m: m._write(w))

    @classmethod
    def _read(cls, r: _Reader) -> "WriteTxnMarkersResponse":
        return cls(tuple(r.array(lambda: TxnMarkerResult._read(r), 12)))


_TM_MIN = 19   # producer id, epoch, commit, an empty array, coordinator epoch

REQUEST_TYPES: dict[int, type] = {
    LEADER_AND_ISR: LeaderAndIsrRequest, STOP_REPLICA: StopReplicaRequest,
    UPDATE_METADATA: UpdateMetadataRequest, CONTROLLED_SHUTDOWN: ControlledShutdownRequest,
    WRITE_TXN_MARKERS: WriteTxnMarkersRequest,
}
RESPONSE_TYPES: dict[int, type] = {
    LEADER_AND_ISR: LeaderAndIsrResponse, STOP_REPLICA: StopReplicaResponse,
    UPDATE_METADATA: UpdateMetadataResponse, CONTROLLED_SHUTDOWN: ControlledShutdownResponse,
    WRITE_TXN_MARKERS: WriteTxnMarkersResponse,
}


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


# --- framing ------------------------------------------------------------------
def _framed(payload: bytes) -> bytes:
    return _I32.pack(len(payload)) + payload


def encode_request(body: Any, correlation_id: int, client_id: str | None = None) -> bytes:
    """The whole frame (size prefix included) for one request body."""
    if type(body) not in REQUEST_TYPES.values():
        raise ProtocolError(f"not a control request: {type(body).__name__}")
    w = _Writer()
    w.i16(body.API_KEY)
    w.i16(API_VERSION)
    w.i32(correlation_id)
    w.string(client_id, nullable=True)
    body._write(w)
    return _framed(w.getvalue())


def decode_request_header(frame: bytes) -> tuple[RequestHeader, int]:
    """The header of a request frame (size prefix removed) and where its body
    starts; works for any api key, so a server can dispatch on it."""
    r = _Reader(frame)
    header = RequestHeader(r.i16(), r.i16(), r.i32(), r.string(nullable=True))
    return header, r.pos


def decode_request(frame: bytes) -> tuple[RequestHeader, Any]:
    """Decode a control request frame whose size prefix was already removed."""
    header, pos = decode_request_header(frame)
    cls = REQUEST_TYPES.get(header.api_key)
    if cls is None:
        raise ProtocolError(f"api key {header.api_key} is not a control request")
    if header.api_version != API_VERSION:
        raise ProtocolError(f"api key {header.api_key}: unsupported version {header.api_version}")
    r = _Reader(frame)
    r.pos = pos
    body = cls._read(r)
    r.done()
    return header, body


def encode_response(body: Any, correlation_id: int) -> bytes:
    """The whole frame (size prefix included) for one response body."""
    if type(body) not in RESPONSE_TYPES.values():
        raise ProtocolError(f"not a control response: {type(body).__name__}")
    w = _Writer()
    w.i32(correlation_id)
    body._write(w)
    return _framed(w.getvalue())


def decode_response_with_header(api_key: int, frame: bytes) -> tuple[int, Any]:
    """(correlation_id, body) of a response frame whose size prefix was removed."""
    cls = RESPONSE_TYPES.get(api_key)
    if cls is None:
        raise ProtocolError(f"api key {api_key} is not a control request")
    r = _Reader(frame)
    correlation_id = r.i32()
    body = cls._read(r)
    r.done()
    return correlation_id, body


def decode_response(api_key: int, frame: bytes) -> Any:
    """The body of a response frame (size prefix removed) to a request of api_key."""
    return decode_response_with_header(api_key, frame)[1]


def response_for(request: Any, error: int) -> Any:
    """A response to `request` that reports `error` for the whole request and
    every partition in it; handy for brokers rejecting a stale controller."""
    if isinstance(request, LeaderAndIsrRequest):
        return LeaderAndIsrResponse(error, tuple(PartitionError(s.topic, s.partition, error)
                                                 for s in request.partition_states))
    if isinstance(request, StopReplicaRequest):
        return StopReplicaResponse(error, tuple(PartitionError(p.topic, p.partition, error)
                                                for p in request.partitions))
    if isinstance(request, UpdateMetadataRequest):
        return UpdateMetadataResponse(error)
    if isinstance(request, ControlledShutdownRequest):
        return ControlledShutdownResponse(error, ())
    if isinstance(request, WriteTxnMarkersRequest):
        return WriteTxnMarkersResponse(tuple(
            TxnMarkerResult(m.producer_id, tuple(PartitionError(p.topic, p.partition, error)
                                                 for p in m.partitions))
            for m in request.markers))
    raise ProtocolError(f"not a control request: {type(request).__name__}")

