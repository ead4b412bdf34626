"""Protocol fuzzing of a live cluster (`chaoslog fuzz`).

A broker that crashes, hangs or writes a bad batch on malformed input is a
broker a chaos run cannot trust, so its wire protocol is attacked directly.
Case i of seed S is the same request every time (one random stream per
case), so a finding replays with `--seed S --first i --cases 1`. Each case
is one of:

  client    a well-formed request of a client API, at any version the broker
            advertises, with random fields (known and unknown topics and
            partitions, negative and huge offsets, sizes and timeouts)
  control   a controller request the broker must refuse: a stale controller
            epoch, or one meant for another broker or an earlier incarnation
            (also with a future controller epoch); ControlledShutdown of
            brokers that do not exist
  records   a Produce whose record batch is damaged: a bad CRC, a wrong
            length, compressed garbage under a valid CRC
  mangled   one of the above with body bytes flipped, cut off, padded, or its
            length prefix wrong (negative, short, long, huge)
  unknown   an API key or version the broker does not serve
  churn     connections opened and dropped, some half-way through a frame
  sasl      on a SASL cluster (`--security`), instead of the others: an attack
            on authentication, then a Metadata request that must go
            unanswered (harness/fuzz_sasl.py)

and is sent whole or split across many small TCP writes. What must hold:

- every request is answered (with a response that decodes) or the
  connection is closed; a frame whose length prefix promises more than is
  sent may also stay unanswered;
- every broker stays up and keeps serving a fresh client (checked every
  `check_every` cases: ApiVersions and Metadata within CHECK_TIMEOUT_S);
- every control request is refused with STALE_CONTROLLER_EPOCH or
  STALE_BROKER_EPOCH, every damaged batch with an error;
- afterwards every replica's files hold whole batches with valid CRCs and
  contiguous offsets.

Control requests are never sent with byte flips: a flip could turn one into
a valid request of a newer controller, which a broker rightly obeys. The
same goes for requests naming no broker (broker id -1 is not checked).
"""
from __future__ import annotations

import json
import random
import socket
import ssl
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cluster.protocol import api, control
from cluster.protocol import errors as E
from harness import fuzz_sasl, kafka_wire
from harness.resources import rss_kb

# Generous for a loaded 2-core machine: every request asks for at most 1 s of
# waiting, so an answer later than ANSWER_TIMEOUT_S is a hang, not a delay.
CHECK_TIMEOUT_S = 10.0  # a fresh client's ApiVersions and Metadata, per broker
ANSWER_TIMEOUT_S = 10.0
# How long a case that expects no answer (acks=0, a mangled frame) listens.
LISTEN_S = 1.0
KINDS = {"client": 40, "control": 10, "records": 12, "mangled": 28, "unknown": 6, "churn": 4}
# Before authentication every other kind is only closed: on a SASL cluster
# the cases attack the authentication itself.
SASL_KINDS = {"sasl": 90, "churn": 10}
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")
REFUSED = {E.STALE_CONTROLLER_EPOCH, E.STALE_BROKER_EPOCH}


@dataclass
class Broker:
    id: int
    host: str
    port: int
    start_epoch: int


@dataclass
class Target:
    """What a case is aimed at: the brokers, the controller and its epoch,
    and the topics (partition counts) that exist when the run starts."""
    brokers: list[Broker]
    controller: int
    controller_epoch: int
    topics: dict[str, int]
    security: Any = None           # the harness's settings on a secure cluster (harness/security.py)
    credentials: tuple[str, str] | None = field(default=None, repr=False)   # SASL user, password

    @property
    def sasl(self) -> bool:
        return self.security is not None and self.security.sasl


@dataclass
class Case:
    index: int
    kind: str
    what: str
    broker: Broker
    chunks: list[bytes]                 # the bytes, in the TCP writes they go in
    api_key: int = -1
    version: int = -1
    correlation_id: int = -1
    expect_answer: bool = True          # False: acks=0, a half-sent or over-long frame
    allowed_errors: set[int] | None = None  # control/records: the answer's error must be one of these
    connections: int = 1                # churn: how many to open and drop


@dataclass
class Report:
    seed: int
    first: int
    cases: int = 0
    kinds: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    health_checks: int = 0
    peak_rss_kb: dict[str, int] = field(default_factory=dict)
    log_check: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "first": self.first, "cases": self.cases,
                "kinds": dict(self.kinds), "outcomes": dict(self.outcomes),
                "errors": {E.name(k): v for k, v in sorted(self.errors.items())},
                "findings": self.findings, "crashes": sum(f["what"] == "crash" for f in self.findings),
                "accepted": sum(f["what"] == "accepted" for f in self.findings),
                "health_checks": self.health_checks, "peak_rss_kb": self.peak_rss_kb,
                "log_check": self.log_check, "seconds": round(self.seconds, 1)}


# -- case generation (pure: a seeded random stream in, bytes out) ---------------------------

def case_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}:{index}")


def make_case(seed: int, index: int, target: Target) -> Case:
    rng = case_rng(seed, index)
    kinds = SASL_KINDS if target.sasl else KINDS
    kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
    broker = rng.choice(target.brokers)
    return {"client": _client_case, "control": _control_case, "records": _records_case,
            "mangled": _mangled_case, "unknown": _unknown_case,
            "churn": _churn_case, "sasl": _sasl_case}[kind](rng, index, broker, target)


def _frame(api_key: int, version: int, corr: int, body: bytes, client_id: bytes = b"fuzz") -> bytes:
    """A request frame; a flexible version's header v2 ends with no tagged fields."""
    head = _HEADER.pack(api_key, version, corr, len(client_id)) + client_id
    if api.is_flexible(api_key, version):
        head += b"\x00"
    return _SIZE.pack(len(head) + len(body)) + head + body


def _split(rng: random.Random, data: bytes) -> list[bytes]:
    """Whole, or in many small writes (a third of the cases)."""
    if rng.random() < 2 / 3 or len(data) < 2:
        return [data]
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, 16)
        out.append(data[i:i + n])
        i += n
    return out


def _topic(rng: random.Random, target: Target) -> str:
    r = rng.random()
    if r < 0.7 and target.topics:
        return rng.choice(sorted(target.topics))
    if r < 0.85:
        return f"fz-{rng.randint(0, 20)}"
    return "".join(rng.choice("ab.-_/ \x00é") for _ in range(rng.randint(0, 12)))


def _int(rng: random.Random, small: int = 5) -> int:
    return rng.choice([rng.randint(-1, small), rng.randint(-1, small), -(2 ** 31), 2 ** 31 - 1,
                       rng.randint(-1000, 10 ** 6)])


def _offset(rng: random.Random) -> int:
    return rng.choice([0, rng.randint(0, 200), -1, -2, 2 ** 63 - 1, -(2 ** 63), rng.randint(0, 10 ** 9)])


def _epoch(rng: random.Random) -> int:
    """A leader epoch a request may name: none (-1), a small one, or absurd."""
    return rng.choice([-1, -1, rng.randint(0, 10), 2 ** 31 - 1, -(2 ** 31)])


def _batch(rng: random.Random) -> bytes:
    """A record batch (v2), sometimes idempotent, sometimes compressed; its
    timestamps too come from `rng`, so a case's bytes are the same each time."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    pid, epoch, seq = (-1, -1, -1)
    if rng.random() < 0.2:
        pid, epoch, seq = rng.randint(-1, 5), rng.randint(-1, 2), rng.randint(-1, 10)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=rng.choice([0, 0, 0, 1]),
                                  is_transactional=False, producer_id=pid, producer_epoch=epoch,
                                  base_sequence=seq, batch_size=1 << 20)
    ts = 1_700_000_000_000 + rng.randint(0, 10 ** 9)
    for i in range(rng.randint(1, 5)):
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 64)) * rng.choice([1, 8])
        b.append(i, timestamp=ts + i, key=None, value=value, headers=[])
    return bytes(b.build())


def client_request(rng: random.Random, target: Target) -> tuple[int, int, Any, bool]:
    """(api key, version, request object, whether an answer comes) of a
    well-formed client request with random fields."""
    key = rng.choice(sorted(api.SERVED_APIS))
    lo, hi, req_cls, _ = api.SERVED_APIS[key]
    v = rng.randint(lo, hi)
    t = _topic(rng, target)
    p = rng.choice([0, 0, 1, 2, -1, rng.randint(0, 100)])
    tms = rng.randint(0, 1000)
    answer = True
    if key == api.PRODUCE:
        acks = rng.choice([1, -1, -1, 0, 2, -2])
        kw: dict[str, Any] = {"acks": acks, "timeout_ms": tms,
                              "topic_data": [(t, [(p, _batch(rng))])]}
        if v >= 3:
            kw["transactional_id"] = None if rng.random() < 0.9 else "tx"
        answer = acks != 0
    elif key == api.FETCH:
        part: tuple = (p, _offset(rng), _offset(rng), _int(rng, 10 ** 6)) if v >= 5 else (
            p, _offset(rng), _int(rng, 10 ** 6))
        if v >= 9:  # the sender's leader epoch: fenced when it is not the leader's
            part = (p, _epoch(rng)) + part[1:]
        kw = {"replica_id": rng.choice([-1, -1, -1, 1, 2, 3, 99]), "max_wait_ms": tms,
              "min_bytes": _int(rng, 1000), "topics": [(t, [part])]}
        if v >= 3:
            kw["max_bytes"] = _int(rng, 10 ** 6)
        if v >= 4:
            kw["isolation_level"] = rng.choice([0, 1, 7])
        if v >= 7:
            kw.update(session_id=rng.choice([0, 0, 0, 5]), session_epoch=rng.choice([-1, -1, 0, 4]),
                      forgotten_topics_data=[])
    elif key == api.LIST_OFFSETS:
        ts = rng.choice([-1, -2, 0, _offset(rng)])
        kw = {"replica_id": rng.choice([-1, -1, 2]),
              "topics": [(t, [(p, ts, _int(rng)) if v == 0 else (p, ts)])]}
        if v >= 2:
            kw["isolation_level"] = rng.choice([0, 1])
    elif key == api.METADATA:
        kw = {"topics": None if rng.random() < 0.3 else [(_topic(rng, target),)
                                                         for _ in range(rng.randint(0, 3))]}
        if v >= 4:
            kw["allow_auto_topic_creation"] = rng.random() < 0.5
    elif key == api.API_VERSIONS:
        kw = {}
    elif key == api.INIT_PRODUCER_ID:
        kw = {"transactional_id": None if rng.random() < 0.8 else "tx",
              "transaction_timeout_ms": _int(rng, 60000)}
    elif key == api.OFFSET_FOR_LEADER_EPOCH:
        kw = {"topics": [(t, [(p, _epoch(rng), _int(rng, 20)) if v >= 2 else (p, _int(rng, 20))])]}
    elif key == api.CREATE_TOPICS:
        name = f"fz-{rng.randint(0, 20)}" if rng.random() < 0.8 else _topic(rng, target)
        assignments = [] if rng.random() < 0.8 else [
            (i, [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]) for i in range(rng.randint(0, 3))]
        counts = (-1, -1) if assignments and rng.random() < 0.7 else (
            rng.choice([1, 2, -1, 0, 2 ** 31 - 1]), rng.choice([1, 2, 3, -1, 0, 7]))
        configs = [] if rng.random() < 0.9 else [("retention.ms", "1000")]
        kw = {"topics": [(name, counts[0], counts[1], assignments, configs)],
              "timeout_ms": rng.choice([0, tms]), "validate_only": rng.random() < 0.3}
    elif key == api.DELETE_TOPICS:
        kw = {"topic_names": [f"fz-{rng.randint(0, 20)}" for _ in range(rng.randint(0, 2))],
              "timeout_ms": rng.choice([0, tms])}
    elif key == api.CREATE_PARTITIONS:
        name = f"fz-{rng.randint(0, 20)}" if rng.random() < 0.7 else t
        count = rng.choice([rng.randint(1, 6), 0, -3, 2 ** 31 - 1])
        assignments = None if rng.random() < 0.8 else [
            [rng.randint(0, 4) for _ in range(rng.randint(0, 3))] for _ in range(rng.randint(0, 3))]
        kw = {"topics": [(name, count, assignments)], "timeout_ms": rng.choice([0, tms]),
              "validate_only": rng.random() < 0.3}
    elif key == api.DESCRIBE_CONFIGS:
        kw = {"resources": [(rng.choice([2, 4, 0, 8]), rng.choice([t, "1", "2", "7", ""]),
                             None if rng.random() < 0.7 else ["min.insync.replicas", "x"])],
              "include_synonyms": rng.random() < 0.5}
    elif key in GROUP_KEYS:
        kw = _group_request(rng, key, v, t, p, index=rng.randrange(1 << 30))
    elif key in TRANSACTION_KEYS:
        kw = _transaction_request(rng, key, v, t, p)
    elif key == api.SASL_HANDSHAKE:   # on a listener without SASL: ILLEGAL_SASL_STATE
        kw = {"mechanism": rng.choice(["PLAIN", "SCRAM-SHA-512", "GSSAPI", ""])}
    elif key == api.SASL_AUTHENTICATE:
        kw = {"auth_bytes": rng.randbytes(rng.randint(0, 64))}
    else:  # pragma: no cover - a new API needs a builder here
        raise AssertionError(f"no request builder for api key {key}")
    return key, v, req_cls(version=v, **kw), answer


GROUP_KEYS = frozenset(api.GROUP_APIS)
TRANSACTION_KEYS = frozenset(api.TRANSACTION_APIS)


def _transaction_request(rng: random.Random, key: int, v: int, t: str, p: int
                         ) -> dict[str, Any]:
    """The fields of a transactional request (docs/design.md#transactions),
    for ids of the fuzzer's own."""
    tid = rng.choice([f"fz-tx{rng.randint(0, 3)}", "", "x" * rng.randint(1, 300)])
    if key == api.DESCRIBE_TRANSACTIONS:
        return {"transactional_ids": [tid for _ in range(rng.randint(0, 3))]}
    if key == api.LIST_TRANSACTIONS:
        kw: dict[str, Any] = {
            "state_filters": rng.sample(["Ongoing", "Empty", "CompleteAbort", "Nope", ""],
                                        rng.randint(0, 2)),
            "producer_id_filters": [rng.choice([-1, 0, 7]) for _ in range(rng.randint(0, 2))]}
        if v >= 1:
            kw["duration_filter"] = rng.choice([-1, 0, 10 ** 6])
        return kw
    pid = rng.choice([-1, 0, 1, rng.randint(0, 2 ** 40)])
    epoch = rng.choice([-1, 0, 1, 32767])
    if key == api.ADD_PARTITIONS_TO_TXN:
        return {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [(t, [p])] if rng.random() < 0.9 else []}
    fields = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch}
    if key == api.ADD_OFFSETS_TO_TXN:
        return {**fields, "group_id": _group(rng)}
    if key == api.TXN_OFFSET_COMMIT:
        return {**fields, "group_id": _group(rng),
                "topics": [(t, [(p, _offset(rng), rng.choice([None, "", "m"]))])]}
    return {**fields, "committed": rng.random() < 0.5}


def _group(rng: random.Random) -> str:
    return rng.choice([f"fz-g{rng.randint(0, 5)}", "", "x" * rng.randint(1, 300)])


def _group_request(rng: random.Random, key: int, v: int, t: str, p: int, index: int
                   ) -> dict[str, Any]:
    """The fields of a group API request (docs/design.md#groups). A JoinGroup
    goes to a group of its own: one that others joined would make it wait
    for them up to its rebalance timeout, past the fuzzer's answer timeout."""
    member = rng.choice(["", "fuzz-0", "chaoslog-fuzz-1-0"])
    generation = rng.choice([-1, 0, 1, 2 ** 31 - 1])
    if key == api.FIND_COORDINATOR:
        kw: dict[str, Any] = {"key": _group(rng)}
        if v >= 1:
            kw["key_type"] = rng.choice([0, 0, 1, 7])
        return kw
    if key == api.JOIN_GROUP:
        kw = {"group_id": f"fz-join-{index}", "member_id": member,
              "session_timeout_ms": rng.choice([6000, 6000, 0, -1, 10 ** 9]),
              "protocol_type": rng.choice(["consumer", "consumer", ""]),
              "protocols": [(rng.choice(["range", "roundrobin", ""]), rng.randbytes(rng.randint(0, 20)))
                            for _ in range(rng.randint(0, 2))]}
        if v >= 1:
            kw["rebalance_timeout_ms"] = rng.choice([1000, 0, -1])
        return kw
    if key == api.SYNC_GROUP:
        return {"group_id": _group(rng), "generation_id": generation, "member_id": member,
                "assignments": [(rng.choice([member, "other"]), rng.randbytes(rng.randint(0, 20)))
                                for _ in range(rng.randint(0, 2))]}
    if key in (api.HEARTBEAT, api.LEAVE_GROUP):
        kw = {"group_id": _group(rng), "member_id": member}
        if key == api.HEARTBEAT:
            kw["generation_id"] = generation
        return kw
    if key == api.OFFSET_COMMIT:
        offset = rng.choice([0, 5, -1, 2 ** 63 - 1])
        meta = rng.choice([None, "", "m" * rng.randint(1, 5000)])
        part = (p, offset, rng.choice([-1, 0]), meta) if v == 1 else (p, offset, meta)
        kw = {"group_id": _group(rng), "generation_id_or_member_epoch": generation,
              "member_id": member, "topics": [(t, [part])]}
        if v >= 2:
            kw["retention_time_ms"] = rng.choice([-1, 0, 1000])
        return kw
    if key == api.OFFSET_FETCH:
        topics = [(t, [p])] if v < 2 or rng.random() < 0.7 else None
        return {"group_id": _group(rng), "topics": topics}
    if key == api.LIST_GROUPS:
        return {}
    return {"groups": [_group(rng) for _ in range(rng.randint(0, 3))]}   # DescribeGroups


def _client_bytes(rng: random.Random, index: int, target: Target) -> tuple[int, int, int, bytes, bool]:
    key, v, req, answer = client_request(rng, target)
    corr = index & 0x7FFFFFFF
    return key, v, corr, _frame(key, v, corr, bytes(req.encode(version=v))), answer


def _client_case(rng, index, broker, target) -> Case:
    key, v, corr, frame, answer = _client_bytes(rng, index, target)
    return Case(index, "client", f"{api.NAMES[key]} v{v}", broker, _split(rng, frame), key, v,
                corr, expect_answer=answer)


def control_request(rng: random.Random, broker: Broker, target: Target) -> tuple[str, Any]:
    """A controller request `broker` must refuse, and what it pretends."""
    t = rng.choice(sorted(target.topics)) if target.topics else "t"
    state = control.PartitionState(t, rng.randint(0, 2), rng.choice([b.id for b in target.brokers]),
                                   rng.randint(0, 1000), tuple(b.id for b in target.brokers),
                                   rng.randint(0, 1000), tuple(b.id for b in target.brokers))
    me = tuple(control.BrokerEndpoint(b.id, b.host, b.port) for b in target.brokers)
    stale = rng.choice([target.controller_epoch - 1, 0, -7])
    future = target.controller_epoch + rng.choice([1, 1000, 2 ** 31 - 1 - target.controller_epoch])
    others = [b.id for b in target.brokers if b.id != broker.id] + [77]
    how = rng.choice(["stale epoch", "another broker", "earlier incarnation"])
    if how == "stale epoch":
        epoch, bid, bepoch = stale, broker.id, broker.start_epoch
    elif how == "another broker":
        epoch, bid, bepoch = rng.choice([target.controller_epoch, future]), rng.choice(others), -1
    else:
        epoch, bid = rng.choice([target.controller_epoch, future]), broker.id
        # Any epoch below this incarnation's but -1 (which means "not
        # checked"); a later one is accepted, as in Kafka (KIP-380).
        bepoch = rng.choice([broker.start_epoch - 1 if broker.start_epoch != 0 else -9, -9,
                             -(2 ** 63)])
    c = target.controller
    body = rng.choice([
        lambda: control.LeaderAndIsrRequest(c, epoch, rng.random() < 0.2, (state,), me, bid, bepoch),
        lambda: control.StopReplicaRequest(c, epoch, rng.random() < 0.5,
                                           (control.TopicPartition(t, state.partition),), bid, bepoch),
        lambda: control.UpdateMetadataRequest(c, epoch, (state,), me, bid, bepoch),
    ])()
    return f"{type(body).__name__} ({how})", body


def _control_case(rng, index, broker, target) -> Case:
    corr = index & 0x7FFFFFFF
    if rng.random() < 0.15:
        body = control.ControlledShutdownRequest(rng.choice([77, -1, 2 ** 31 - 1]), rng.randint(-5, 5))
        frame = control.encode_request(body, corr, "fuzz")
        allowed = {e for e in range(-1, 100) if e != E.NONE}
        return Case(index, "control", "ControlledShutdown of an unknown broker", broker,
                    _split(rng, frame), body.API_KEY, control.API_VERSION, corr,
                    allowed_errors=allowed)
    what, body = control_request(rng, broker, target)
    frame = control.encode_request(body, corr, "fuzz")
    return Case(index, "control", what, broker, _split(rng, frame), body.API_KEY,
                control.API_VERSION, corr, allowed_errors=REFUSED)


def damaged_batch(rng: random.Random) -> tuple[str, bytes]:
    """A record batch a broker must refuse, and how it is damaged."""
    batch = bytearray(_batch(rng))
    how = rng.choice(["bad crc", "wrong length", "compressed garbage"])
    if how == "bad crc":
        i = rng.randrange(21, len(batch))     # past the CRC field: the CRC no longer matches
        batch[i] ^= 1 << rng.randrange(8)
    elif how == "wrong length":
        struct.pack_into(">i", batch, 8, struct.unpack_from(">i", batch, 8)[0]
                         + rng.choice([-3, -1, 1, 40, 10 ** 6]))
    else:
        # gzip codec, records replaced by garbage, CRC-32C recomputed: only
        # decompressing tells.
        struct.pack_into(">h", batch, 21, 1)
        del batch[61:]
        batch += rng.randbytes(rng.randint(1, 64))
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        struct.pack_into(">I", batch, 17, _crc32c(bytes(batch[21:])))
    return how, bytes(batch)


def _crc32c(data: bytes) -> int:
    from kafka.record.util import calc_crc32c
    return calc_crc32c(data)


def _records_case(rng, index, broker, target) -> Case:
    how, batch = damaged_batch(rng)
    t = rng.choice(sorted(target.topics)) if target.topics else "t"
    v = rng.randint(3, api.CLIENT_APIS[api.PRODUCE][1])
    from kafka.protocol.producer import ProduceRequest
    req = ProduceRequest(version=v, transactional_id=None, acks=rng.choice([1, -1]), timeout_ms=500,
                         topic_data=[(t, [(0, batch)])])
    corr = index & 0x7FFFFFFF
    frame = _frame(api.PRODUCE, v, corr, bytes(req.encode(version=v)))
    # Refused with an error code (or the connection closed), never appended.
    allowed = {e for e in range(-1, 100) if e != E.NONE}
    return Case(index, "records", f"Produce v{v} with a batch: {how}", broker, _split(rng, frame),
                api.PRODUCE, v, corr, allowed_errors=allowed)


def _mangled_case(rng, index, broker, target) -> Case:
    if rng.random() < 0.2:
        corr = index & 0x7FFFFFFF
        _what, body = control_request(rng, broker, target)
        frame = bytearray(control.encode_request(body, corr, "fuzz"))
        key, v, answer = body.API_KEY, control.API_VERSION, True
        how = rng.choice(["cut", "padded"])       # never flipped: see the module docstring
    else:
        key, v, corr, raw, answer = _client_bytes(rng, index, target)
        frame = bytearray(raw)
        how = rng.choice(["flipped", "flipped", "cut", "padded", "negative length", "short length",
                          "long length", "huge length"])
    head = 4 + _HEADER.size + 4                  # size, key, version, correlation id, "fuzz"
    if how == "flipped" and len(frame) > head:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(head, len(frame))
            frame[i] ^= 1 << rng.randrange(8)
    elif how == "cut" and len(frame) > head:
        del frame[rng.randrange(head, len(frame)):]
        _SIZE.pack_into(frame, 0, len(frame) - 4)
    elif how == "padded":
        frame += rng.randbytes(rng.randint(1, 100))
        _SIZE.pack_into(frame, 0, len(frame) - 4)
    elif how == "negative length":
        _SIZE.pack_into(frame, 0, rng.choice([-1, -(2 ** 31)]))
    elif how == "short length":
        _SIZE.pack_into(frame, 0, rng.randint(0, max(0, len(frame) - 5)))
    elif how == "long length":
        _SIZE.pack_into(frame, 0, len(frame) - 4 + rng.randint(1, 1000))
    elif how == "huge length":
        _SIZE.pack_into(frame, 0, 2 ** 31 - 1)
    # Whatever answer comes may be to a different request, so none is expected;
    # the broker must answer or close, and keep serving others.
    return Case(index, "mangled", f"{how} {api.NAMES.get(key, key)} v{v}", broker,
                _split(rng, bytes(frame)), key, v, corr, expect_answer=False)


def _unknown_case(rng, index, broker, target) -> Case:
    corr = index & 0x7FFFFFFF
    if rng.random() < 0.5:
        key, v = rng.choice([10, 11, 12, 50, 999, -1, 32767]), rng.randint(-1, 5)
    else:
        key = rng.choice(sorted(api.SUPPORTED_VERSIONS))
        v = api.SUPPORTED_VERSIONS[key][1] + rng.randint(1, 5)
    frame = _frame(key, v, corr, rng.randbytes(rng.randint(0, 40)))
    return Case(index, "unknown", f"api key {key} v{v}", broker, _split(rng, frame), key, v, corr,
                expect_answer=False)


def _churn_case(rng, index, broker, target) -> Case:
    _key, _v, _corr, frame, _a = _client_bytes(rng, index, target)
    cut = frame[:rng.randint(0, len(frame) - 1)]
    return Case(index, "churn", "connections dropped, some half-way through a frame", broker,
                [cut], expect_answer=False, connections=rng.randint(1, 30))


def _sasl_case(rng, index, broker, target) -> Case:
    user, password = target.credentials
    corr = (index * 8) & 0x7FFFFFF
    what, frames = fuzz_sasl.attack(rng, corr, user, password)
    chunks = _split(rng, b"".join(frames) + fuzz_sasl.probe(corr + 7))
    return Case(index, "sasl", what, broker, chunks, api.METADATA, 1, corr + 7,
                expect_answer=False)


# -- sending --------------------------------------------------------------------------------

def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _connect(addr: tuple[str, int], timeout: float, security: Any) -> socket.socket:
    sock = socket.create_connection(addr, timeout=timeout)
    if security is not None and security.tls:
        sock = security.ssl_context().wrap_socket(sock, server_hostname=addr[0])
    return sock


def _sasl_outcome(sock: socket.socket, case: Case) -> tuple[str, int | None, str]:
    """Answers may come to the attack's requests; the probe's must not."""
    try:
        while True:
            size = _read_exact(sock, 4)
            if size is None:
                return "closed", None, ""
            frame = _read_exact(sock, _SIZE.unpack(size)[0])
            if frame is None:
                return "closed", None, "mid-response"
            if len(frame) >= 4 and _SIZE.unpack_from(frame)[0] == case.correlation_id:
                return "accepted", None, "the probe was answered: access without a credential"
    except socket.timeout:
        return "silent", None, ""
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        return "closed", None, "reset"


def send_case(case: Case, security: Any = None) -> tuple[str, int | None, str]:
    """Play one case on fresh connections (TLS where `security` says):
    (outcome, error code or None, detail). Outcomes: answered, closed,
    silent (no answer in time), malformed (an answer that does not decode),
    wrong-error, refused-to-connect, dropped (churn), accepted (a SASL
    case's probe answered)."""
    addr = (case.broker.host, case.broker.port)
    timeout = ANSWER_TIMEOUT_S if case.expect_answer else LISTEN_S
    if case.kind == "churn":
        for _ in range(case.connections):
            try:
                with _connect(addr, timeout, security) as s:
                    if case.chunks[0]:
                        s.sendall(case.chunks[0])
            except OSError as e:
                return "refused-to-connect", None, repr(e)
        return "dropped", None, ""
    try:
        sock = _connect(addr, ANSWER_TIMEOUT_S, security)
    except OSError as e:
        return "refused-to-connect", None, repr(e)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout)
        try:
            for chunk in case.chunks:
                sock.sendall(chunk)
            if case.kind == "sasl":
                return _sasl_outcome(sock, case)
            size = _read_exact(sock, 4)
            if size is None:
                return "closed", None, ""
            (n,) = _SIZE.unpack(size)
            frame = _read_exact(sock, n)
            if frame is None:
                return "closed", None, "mid-response"
        except socket.timeout:
            return "silent", None, ""
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return "closed", None, "reset"
        if not case.expect_answer:
            return "answered", None, ""
        return _judge(case, frame)
    finally:
        sock.close()


def _judge(case: Case, frame: bytes) -> tuple[str, int | None, str]:
    try:
        if case.api_key in control.CONTROL_API_KEYS:
            corr, body = control.decode_response_with_header(case.api_key, frame)
            err = body.error
        else:
            (corr,) = _SIZE.unpack_from(frame)
            rest = frame[4:]
            if api.is_flexible(case.api_key, case.version):
                rest = kafka_wire.after_tagged_fields(rest)
            body = api.response_class(case.api_key).decode(rest, version=case.version)
            err = _first_error(body)
    except Exception as e:  # noqa: BLE001 - any decoding failure is the finding
        return "malformed", None, f"{type(e).__name__}: {e}"
    if corr != case.correlation_id:
        return "malformed", err, f"correlation id {corr}, sent {case.correlation_id}"
    if case.allowed_errors is not None and err not in case.allowed_errors:
        return "wrong-error", err, f"answered {E.name(err)}"
    return "answered", err, ""


def _first_error(body: Any) -> int:
    """The first non-zero error code anywhere in a response, else 0."""
    def walk(x: Any) -> int:
        if hasattr(x, "to_dict"):
            x = x.to_dict()
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "error_code" and isinstance(v, int) and v:
                    return v
                if isinstance(v, (dict, list, tuple)) or hasattr(v, "to_dict"):
                    e = walk(v)
                    if e:
                        return e
        elif isinstance(x, (list, tuple)):
            for v in x:
                e = walk(v)
                if e:
                    return e
        return 0
    return walk(body)


# -- health and the logs afterwards ------------------------------------------------------------

def serves(broker: Broker, timeout: float = CHECK_TIMEOUT_S, security: Any = None) -> str | None:
    """None if a fresh client (authenticated where `security` says) gets
    ApiVersions and Metadata answered in time; else what went wrong."""
    try:
        conn = kafka_wire.KafkaConnection(broker.host, broker.port, client_id="fuzz-check",
                                          timeout=timeout, security=security)
    except (OSError, kafka_wire.WireError) as e:
        return f"no connection: {e}"
    try:
        kafka_wire.metadata(conn)
    except (OSError, kafka_wire.WireError) as e:
        return f"Metadata not answered: {e}"
    finally:
        conn.close()
    return None


def check_replica_files(log_dir: Path) -> list[str]:
    """Every segment of every replica under `log_dir` must hold whole
    batches with valid CRCs, starting at the segment's base offset, with
    offsets contiguous across the replica. Returns the violations."""
    from kafka.record.default_records import DefaultRecordBatch
    bad = []
    for d in sorted(p for p in Path(log_dir).iterdir() if p.is_dir()):
        segs = sorted((p for p in d.glob("*.log") if p.stem.isdigit()), key=lambda p: int(p.stem))
        next_offset = None
        for seg in segs:
            data, pos = seg.read_bytes(), 0
            if next_offset is not None and data and int(seg.stem) != next_offset:
                bad.append(f"{d.name}/{seg.name}: starts at {int(seg.stem)}, the log ended at "
                           f"{next_offset}")
            while pos < len(data):
                if pos + 12 > len(data):
                    bad.append(f"{d.name}/{seg.name}@{pos}: {len(data) - pos} trailing bytes")
                    break
                base, length = struct.unpack_from(">qi", data, pos)
                end = pos + 12 + length
                if length < 49 or end > len(data):
                    bad.append(f"{d.name}/{seg.name}@{pos}: batch length {length}")
                    break
                batch = DefaultRecordBatch(data[pos:end])
                if not batch.validate_crc():
                    bad.append(f"{d.name}/{seg.name}@{pos}: CRC mismatch at offset {base}")
                if next_offset is not None and base != next_offset:
                    bad.append(f"{d.name}/{seg.name}@{pos}: base offset {base} after {next_offset}")
                next_offset = batch.last_offset + 1
                pos = end
    return bad


# -- the run ---------------------------------------------------------------------------------

def run(target: Target, seed: int, cases: int, *, first: int = 0, check_every: int = 200,
        alive: Callable[[], list[str]] = lambda: [], pids: Callable[[], dict[str, int]] = dict,
        progress: Callable[[Report], None] = lambda r: None) -> Report:
    """Play cases first..first+cases-1 against the live `target`. `alive()`
    names the brokers whose processes are gone; `pids()` maps broker names
    to process ids for the memory samples."""
    report = Report(seed, first)
    started = time.monotonic()
    since_check: list[int] = []

    def check(upto: int) -> bool:
        report.health_checks += 1
        for name, pid in pids().items():
            kb = rss_kb(pid)
            if kb:
                report.peak_rss_kb[name] = max(report.peak_rss_kb.get(name, 0), kb)
        dead = alive()
        trouble = [f"broker {b.id}: {why}" for b in target.brokers
                   if (why := serves(b, security=target.security))]
        if dead or trouble:
            report.findings.append({"what": "crash" if dead else "hang", "brokers": dead,
                                    "detail": trouble, "cases": [since_check[0], upto]
                                    if since_check else [upto, upto]})
            return False
        since_check.clear()
        return True

    for i in range(first, first + cases):
        case = make_case(seed, i, target)
        outcome, err, detail = send_case(case, target.security)
        report.cases += 1
        report.kinds[case.kind] += 1
        report.outcomes[outcome] += 1
        if err is not None:
            report.errors[err] += 1
        since_check.append(i)
        if outcome in ("malformed", "wrong-error", "refused-to-connect", "accepted") or (
                outcome == "silent" and case.expect_answer):
            report.findings.append({"what": outcome, "case": i, "kind": case.kind,
                                    "request": case.what, "broker": case.broker.id,
                                    "detail": detail})
        if (i - first + 1) % check_every == 0:
            if not check(i):
                break
            progress(report)
    else:
        check(first + cases - 1)
    report.seconds = time.monotonic() - started
    return report


def write_report(report: Report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report.to_json(), indent=1, sort_keys=True))
    tmp.replace(path)

