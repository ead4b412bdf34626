"""The event fields of history-format.md (v1), and what each kind of event needs.

One table drives both checkers: the reference checker tests a parsed line with
`event_problem`, the Spark checker builds the same test as a column expression
(`spark_problem_column`), so that both reject exactly the same events with the
same words. Keep the two in step when the format changes.
"""

from __future__ import annotations

import json

FORMAT_VERSION = 1

TYPES = ("invoke", "ok", "fail", "info")
FUNCTIONS = ("send", "poll", "txn", "nemesis")
INTENTS = ("commit", "abort")  # a txn op's `intent`
ISOLATIONS = ("read_committed", "read_uncommitted")  # a poll's `isolation`
PHASES = ("start", "stop")
NEMESIS_PROCESS = -1

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# (name, kind) in the order of history-format.md. Kinds: long, int, string,
# bool, records (array of [long, long]), strings (array of string), source
# (an object: SOURCE_FIELDS).
FIELDS: tuple[tuple[str, str], ...] = (
    ("index", "long"),
    ("time", "long"),
    ("process", "long"),
    ("op", "long"),
    ("type", "string"),
    ("f", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("value", "long"),
    ("offset", "long"),
    ("records", "records"),
    ("high_watermark", "long"),
    ("final", "bool"),
    ("error", "string"),
    ("node", "string"),
    ("fault", "string"),
    ("phase", "string"),
    ("targets", "strings"),
    ("detail", "string"),
    # chaoslog's compatible extension (docs/history-format.md, "Extensions")
    ("log_start_offset", "long"),
    ("group", "string"),  # a poll of a consumer group's member (groups.jsonl)
    # transactions (docs/history-format.md, "Transactions")
    ("txn", "string"),
    ("intent", "string"),
    ("isolation", "string"),
    ("source", "source"),
)
FIELD_NAMES = tuple(name for name, _ in FIELDS)
# A pipeline output's `source`: the input record it was made from.
SOURCE_FIELDS: tuple[tuple[str, str], ...] = (
    ("topic", "string"), ("partition", "int"), ("offset", "long"), ("value", "long"))
# Fields whose value, when present, is one of a few names: (field, names).
NAMED = (("intent", INTENTS), ("isolation", ISOLATIONS))

# Fields every event carries.
REQUIRED_ALWAYS = ("index", "time", "process", "op", "type", "f")

# Fields an event of a kind carries: (f, type or None for any type) -> fields.
# A completion need not repeat the value of its send: the checker takes it from
# the invocation. `topic`/`partition` are on every send and poll event.
REQUIRED_BY_KIND: tuple[tuple[str, str | None, tuple[str, ...]], ...] = (
    ("send", None, ("topic", "partition")),
    ("poll", None, ("topic", "partition")),
    ("send", "invoke", ("value",)),
    ("send", "ok", ("value", "offset")),
    ("poll", "ok", ("records", "high_watermark")),
    ("nemesis", None, ("fault", "phase")),
    ("txn", None, ("txn",)),
    ("txn", "invoke", ("intent",)),
)

CORRUPT_COLUMN = "_corrupt_record"
MSG_NOT_JSON = "not a JSON object with v1 event fields of the right types"
MSG_RECORDS = "records must be [offset, value] pairs of integers"
MSG_SOURCE = "source must name topic, partition, offset and value"


def msg_missing(name: str, f: str | None, type_: str | None) -> str:
    if f is None:
        return f"missing required field '{name}'"
    kind = f if type_ is None else f"{type_} {f}"
    return f"missing required field '{name}' (on every {kind} event)"


def msg_unknown(name: str, value: str) -> str:
    return f"unknown {name} '{value}'"


# --------------------------------------------------------------------------
# Python side


def _as_string(value):
    """A string field given another JSON value keeps its JSON text, as Spark's reader does."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _is_int(value, lo=INT64_MIN, hi=INT64_MAX) -> bool:
    return type(value) is int and lo <= value <= hi


_BAD = object()  # a value of the wrong type


def _normal(kind: str, v):
    """A present JSON value of a field of `kind`, as Spark reads it, or _BAD."""
    if kind == "long":
        return v if _is_int(v) else _BAD
    if kind == "int":
        return v if _is_int(v, INT32_MIN, INT32_MAX) else _BAD
    if kind == "bool":
        return v if type(v) is bool else _BAD
    if kind == "string":
        return _as_string(v)
    if kind == "strings":
        return [_as_string(x) for x in v] if isinstance(v, list) else _BAD
    if kind == "records":
        if not isinstance(v, list):
            return _BAD
        for r in v:
            if r is not None and not isinstance(r, list):
                return _BAD
            for x in r or ():
                if x is not None and not _is_int(x):
                    return _BAD
        return v
    if kind == "source":
        if not isinstance(v, dict):
            return _BAD
        out = {name: None if v.get(name) is None else _normal(k, v[name]) for name, k in SOURCE_FIELDS}
        return _BAD if any(x is _BAD for x in out.values()) else out
    raise ValueError(kind)


def normalize_event(raw) -> dict | None:
    """Type-check a parsed JSON line; return the event dict, or None if malformed.

    Mirrors Spark's JSON reader with an explicit schema: a number where a string
    is expected becomes its text; anything else of the wrong type makes the
    whole line malformed.
    """
    if not isinstance(raw, dict):
        return None
    ev = {}
    for name, kind in FIELDS:
        v = raw.get(name)
        ev[name] = None if v is None else _normal(kind, v)
        if ev[name] is _BAD:
            return None
    return ev


def event_problem(ev: dict) -> str | None:
    """Why a (normalized) event cannot be checked, or None. Same order as Spark's."""
    for name in REQUIRED_ALWAYS:
        if ev.get(name) is None:
            return msg_missing(name, None, None)
    if ev["type"] not in TYPES:
        return msg_unknown("type", ev["type"])
    if ev["f"] not in FUNCTIONS:
        return msg_unknown("f", ev["f"])
    for name, names in NAMED:
        if ev.get(name) is not None and ev[name] not in names:
            return msg_unknown(name, ev[name])
    for f, type_, names in REQUIRED_BY_KIND:
        if ev["f"] == f and (type_ is None or ev["type"] == type_):
            for name in names:
                if ev.get(name) is None:
                    return msg_missing(name, f, type_)
    recs = ev.get("records")
    if recs is not None:
        for r in recs:
            if r is None or len(r) != 2 or r[0] is None or r[1] is None:
                return MSG_RECORDS
    src = ev.get("source")
    if src is not None and any(x is None for x in src.values()):
        return MSG_SOURCE
    return None


# --------------------------------------------------------------------------
# Spark side (pyspark is imported lazily: the reference checker must not need it)


def spark_schema(with_corrupt: bool):
    """The explicit read schema: never let Spark infer types from a history."""
    from pyspark.sql import types as T

    kinds = {
        "long": T.LongType(),
        "int": T.IntegerType(),
        "string": T.StringType(),
        "bool": T.BooleanType(),
        "records": T.ArrayType(T.ArrayType(T.LongType())),
        "strings": T.ArrayType(T.StringType()),
    }
    kinds["source"] = T.StructType([T.StructField(name, kinds[kind], True) for name, kind in SOURCE_FIELDS])
    fields = [T.StructField(name, kinds[kind], True) for name, kind in FIELDS]
    if with_corrupt:
        fields.append(T.StructField(CORRUPT_COLUMN, T.StringType(), True))
    return T.StructType(fields)


def arrow_schema():
    """The Parquet (pyarrow) schema of a history part file, for writers of
    Parquet histories (the benchmark, the tests' generator)."""
    import pyarrow as pa

    kinds = {
        "long": pa.int64(),
        "int": pa.int32(),
        "string": pa.string(),
        "bool": pa.bool_(),
        "records": pa.list_(pa.list_(pa.int64())),
        "strings": pa.list_(pa.string()),
    }
    kinds["source"] = pa.struct([(name, kinds[kind]) for name, kind in SOURCE_FIELDS])
    return pa.schema([(name, kinds[kind]) for name, kind in FIELDS])


def spark_problem_column():
    """A string column: the first problem of each event (or null), as `event_problem` words it."""
    from pyspark.sql import functions as F

    c = F.col
    checks = [F.when(c(CORRUPT_COLUMN).isNotNull(), F.lit(MSG_NOT_JSON))]
    for name in REQUIRED_ALWAYS:
        checks.append(F.when(c(name).isNull(), F.lit(msg_missing(name, None, None))))
    checks.append(
        F.when(~c("type").isin(*TYPES), F.concat(F.lit("unknown type '"), c("type"), F.lit("'")))
    )
    checks.append(F.when(~c("f").isin(*FUNCTIONS), F.concat(F.lit("unknown f '"), c("f"), F.lit("'"))))
    for name, names in NAMED:
        checks.append(F.when(~c(name).isin(*names),
                             F.concat(F.lit(f"unknown {name} '"), c(name), F.lit("'"))))
    for f, type_, names in REQUIRED_BY_KIND:
        kind = c("f") == f
        if type_ is not None:
            kind = kind & (c("type") == type_)
        for name in names:
            checks.append(F.when(kind & c(name).isNull(), F.lit(msg_missing(name, f, type_))))
    bad_record = F.exists(
        "records", lambda r: r.isNull() | (F.size(r) != 2) | F.exists(r, lambda x: x.isNull())
    )
    checks.append(F.when(c("records").isNotNull() & bad_record, F.lit(MSG_RECORDS)))
    checks.append(F.when(source_incomplete(), F.lit(MSG_SOURCE)))
    return F.coalesce(*checks)


def source_incomplete():
    """A boolean column: the event has a `source` without one of its fields (else false or null)."""
    from functools import reduce

    from pyspark.sql import functions as F

    return F.col("source").isNotNull() & reduce(
        lambda a, b: a | b, [F.col(f"source.{name}").isNull() for name, _ in SOURCE_FIELDS])
