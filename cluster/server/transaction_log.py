"""The transaction log `__transaction_state`: which of its partitions holds a
transactional id, and its records (docs/design.md#transactions).

The layout is Kafka's, so that a record written here reads the same as one a
Kafka broker wrote (its TransactionLogKey and TransactionLogValue, version 0):
an id lives in partition abs(javaHashCode(id)) % N, as a group does in the
offsets topic; a record's key is (int16 version 0, string transactional id),
its value (int16 version 0, int64 producer id, int16 producer epoch, int32
timeout ms, int8 state, nullable array of (string topic, array of int32
partition), int64 last update ms, int64 transaction start ms). An EMPTY
state is written without partitions (null), and a DEAD one as a tombstone (a
record with no value), as Kafka does. Strings are int16-length-prefixed
UTF-8, integers big-endian.
"""
from __future__ import annotations

import struct

from cluster.server.offsets_topic import partition_for
from cluster.server.transaction_metadata import TransactionMetadata, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hqhib")     # version, producer id, epoch, timeout, state
_TIMES = struct.Struct(">qq")       # last update, transaction start


class TransactionLogError(ValueError):
    """A record of the transaction log that cannot be read: its bytes and why."""


def partition_of(transactional_id: str, partitions: int) -> int:
    """The partition of `__transaction_state` that holds `transactional_id` (Kafka's rule)."""
    return partition_for(transactional_id, partitions)


def _string(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(md: TransactionMetadata) -> bytes | None:
    """The record's value; None (a tombstone) for a DEAD id."""
    if md.state is TxnState.DEAD:
        return None
    out = [_HEAD.pack(VALUE_VERSION, md.producer_id, md.producer_epoch, md.timeout_ms,
                      int(md.state))]
    if md.state is TxnState.EMPTY:
        if md.partitions:
            raise ValueError(f"transactional id {md.transactional_id!r}: EMPTY with partitions")
        out.append(_I32.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(md.partitions):
            by_topic.setdefault(topic, []).append(p)
        out.append(_I32.pack(len(by_topic)))
        for topic, ps in by_topic.items():
            out += [_string(topic), _I32.pack(len(ps)), struct.pack(f">{len(ps)}i", *ps)]
    out.append(_TIMES.pack(md.last_update_ms, md.txn_start_ms))
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes, what: str):
        self.data, self.pos, self.what = data, 0, what

    def take(self, s: struct.Struct) -> tuple:
        if self.pos + s.size > len(self.data):
            raise TransactionLogError(f"{self.what}: truncated at byte {self.pos} of {len(self.data)}")
        v = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return v

    def count(self, nullable: bool = False) -> int:
        (n,) = self.take(_I32)
        if n < -1 or (n == -1 and not nullable) or n > len(self.data):
            raise TransactionLogError(f"{self.what}: impossible count {n} at byte {self.pos - 4}")
        return n

    def string(self) -> str:
        (n,) = self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise TransactionLogError(f"{self.what}: bad string length {n} at byte {self.pos - 2}")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode()
        except UnicodeDecodeError as e:
            raise TransactionLogError(f"{self.what}: a string that is not UTF-8: {e}") from None

    def end(self) -> None:
        if self.pos != len(self.data):
            raise TransactionLogError(f"{self.what}: {len(self.data) - self.pos} bytes past its end")


def decode_key(data: bytes) -> str:
    r = _Reader(data, "transaction log key")
    (version,) = r.take(_I16)
    if version != KEY_VERSION:
        raise TransactionLogError(f"transaction log key: version {version}, not {KEY_VERSION}")
    tid = r.string()
    r.end()
    return tid


def decode_value(transactional_id: str, data: bytes | None) -> TransactionMetadata | None:
    """The metadata a record holds; None for a tombstone (the id is gone)."""
    if data is None:
        return None
    r = _Reader(data, f"transaction log value of {transactional_id!r}")
    version, pid, epoch, timeout, state = r.take(_HEAD)
    if version != VALUE_VERSION:
        raise TransactionLogError(f"{r.what}: version {version}, not {VALUE_VERSION}")
    try:
        state = TxnState(state)
    except ValueError:
        raise TransactionLogError(f"{r.what}: unknown state {state}") from None
    partitions = set()
    for _ in range(max(0, r.count(nullable=True))):
        topic = r.string()
        for _ in range(r.count()):
            partitions.add((topic, r.take(_I32)[0]))
    last_update, start = r.take(_TIMES)
    r.end()
    return TransactionMetadata(transactional_id, pid, epoch, timeout, state, frozenset(partitions),
                               txn_start_ms=start, last_update_ms=last_update)
