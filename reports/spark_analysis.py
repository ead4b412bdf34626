"""The Spark checker's analysis of a batch of runs: anomalies.md over histories of any size.

`analyze` turns the events of every run of a batch into a `SparkAnalysis`:
the DataFrames and the small facts that several anomaly types read,
computed once (the ops, the pairs, the values, the poll sequences; the
names of the codes; each run's partitions, observations and group events).
Then one function per anomaly type, named after it (`lost`, `poll_skip`,
...; reports/registry.py lists them), reads the SparkAnalysis and returns
that type's instances per run (`Found`). They agree with the reference
checker's (reports/reference_analysis.py) field for field.

Every definition is an aggregation, a window or a join over the events; only
aggregates and (capped) anomaly lists come back to the driver, so a history
larger than the driver's memory is fine. Many runs are checked in one pass
(every key carries the run), so a batch of small histories (the property
tests, a nightly set) costs one set of Spark jobs instead of one per run.

The plan, in the words of the definitions (all "per topic-partition"):

  events of topics deleted and created again --(renamed by incarnation:
                        reports/incarnations.py; other runs skip this)--> events
  events --(group by op; validation counted on the way; cached)--> ops:
                        invocation beside completion (outcome, latency,
                        acknowledged offset, position, final polls, error
                        code, and a summary of the records: count, first,
                        last, highest offset, whether consecutive)
  ops --(group by partition)--> validation, per-partition figures
  events --(filter: nemesis, errors, each partition's first event)--> the
                        names of the codes, the nemesis events
  events --(posexplode ok polls)--> reads: (process, offset, value) per record
  acks + reads --(partitioned by value; group by partition, offset, value;
                        cached)--> pairs: how often each (offset, value) was
                        read, whether acked, the index of its first read
  pairs --(group by partition, value: no shuffle; join the sends not ok;
                        cached)--> values: lost, unseen, duplicate,
                        aborted-read, phantom-read (resurrected: a value sent
                        to another incarnation)
  pairs --(group by partition, offset)--> inconsistent-offset, and the offsets
                        known to hold a value
  poll ops --(window per partition and process, in index order; cached)-->
                        re-seeks, nonmonotonic-poll, gaps (record by record
                        only inside the rare polls whose records are not
                        consecutive)
  gaps + known offsets --(window per partition, by offset)--> poll-skip
  ops --(group by function and second)--> timeline, latency percentiles
  ops + fault windows --(group by error)--> errors, what failed in each window
  events of transactional runs --(filter: those carrying txn, isolation or
                        source; group by op; with the ops; cached)--> each
                        transaction's outcome and sends, and the reads at
                        read_committed as pairs: the transaction types;
                        lost and unseen leave out uncommitted values

Why it is shaped like this (a 2-core machine, >= 250k events/s the goal):
the input is read in full once, for the ops; the reads pass reads only the
records and their keys, the names pass a few columns and keeps a few rows
(a JSONL input is parsed once and cached instead). Every read is folded
into the pairs before anything else looks at it: each record is read by
several consumers, so the later groupings see a few rows per value, not per
read. Keys are fixed-width numbers, not strings: `tp` is a 64-bit hash of
(run, topic, partition) and `err` one of the error text, with dictionaries
on the driver; `t` and `fn` code the event type and function (each name is
compared once per event). Only small sides are broadcast. Cached: the ops,
the pairs, the values and the poll sequences' findings (each read by several
jobs); the jobs that list anomalies only run when the counts say there are
some. The checker (reports/spark_checker.py) runs independent jobs
concurrently.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from reports import invariants, observations, transactions as txns
from reports.errors import HistoryError
from reports.figures import (CLIENT_FUNCTIONS, NS_PER_SECOND, PERCENTILES, empty_counts,
                             fault_windows)
from reports.groups import commit_regressions, final_commits, read_groups, resume_candidates
from reports.incarnations import SEPARATOR, Incarnations, split
from reports.observations import Observed, read_incarnations, read_observations
from reports.readers import RunInput, first_problem
from reports.schema import (
    CORRUPT_COLUMN,
    FUNCTIONS,
    NAMED,
    REQUIRED_ALWAYS,
    REQUIRED_BY_KIND,
    TYPES,
    source_incomplete,
    spark_problem_column,
    spark_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Event type codes; for completions the code is also the outcome.
T_INVOKE, T_FAIL, T_INFO, T_OK = 0, 1, 2, 3
TYPE_CODES = {"invoke": T_INVOKE, "fail": T_FAIL, "info": T_INFO, "ok": T_OK}
OUTCOMES = {T_FAIL: "fail", T_INFO: "info", T_OK: "ok"}
F_SEND, F_POLL, F_NEMESIS, F_TXN = 0, 1, 2, 3
F_CODES = {"send": F_SEND, "poll": F_POLL, "nemesis": F_NEMESIS, "txn": F_TXN}
F_NAMES = {F_SEND: "send", F_POLL: "poll"}
# An unknown name codes as -1, which validation rejects: the codes must name every valid one.
assert set(TYPE_CODES) == set(TYPES) and set(F_CODES) == set(FUNCTIONS)

PERCENTILE_ACCURACY = 10000
# Detail joins broadcast the flagged side when it has at most this many rows.
BROADCAST_ROWS = 200_000
# The kinds of a value read where no ok send of its partition explains it.
_UNEXPLAINED = ("phantom-read", "aborted-read", "resurrected")


class Jobs:
    """The session, and what a check did with it: the frames it cached
    (until `close`) and how long each Spark job took (`timings`; with
    concurrent jobs these overlap)."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self.timings: list[tuple[str, float]] = []
        self.cached: list = []

    def collect(self, df, label: str) -> list:
        """collect() a small result, remembering how long the Spark job took."""
        t = time.perf_counter()
        rows = df.collect()
        self.timings.append((label, time.perf_counter() - t))
        return rows

    def persist(self, df):
        df = df.persist()
        self.cached.append(df)
        return df

    def close(self) -> None:
        for df in self.cached:
            df.unpersist()
        self.cached = []


class Found(NamedTuple):
    """One anomaly type's instances in one run."""

    count: int    # how many there are
    items: list   # the instances: all of them, or the first `cap` in canonical order


@dataclass(frozen=True)
class SparkAnalysis:
    """A batch's DataFrames and the facts computed once; every anomaly function reads only this.

    Runs are keyed by their position in the batch (`run`); `tp` is a
    partition's 64-bit key."""

    jobs: Jobs
    cap: int                              # instances listed per type and run
    runs: dict[int, RunInput]             # the runs that passed validation
    incarnations: dict[int, Incarnations]
    observed: dict[int, Observed]         # observations.jsonl
    groups: dict[int, list | None]        # groups.jsonl's events (None: no file)
    stats: dict[int, dict]                # events and end_time
    ev: DataFrame                         # the events, with codes
    ops: DataFrame                        # sends and polls, invocation beside completion (cached)
    txn_ops: DataFrame                    # the txn ops, alike (cached with them)
    reads: DataFrame                      # one row per record an ok poll returned
    pairs: DataFrame                      # per (partition, offset, value): reads, acked (cached)
    offsets: DataFrame                    # per (partition, offset): least and greatest value seen
    tps: dict[int, tuple]                 # tp -> (run, topic, partition)
    tp_index: dict[tuple, int]            # (run, topic, partition) -> tp
    tp_names: DataFrame                   # tp, topic, partition
    tp_rows: list                         # per-partition figures (rows of `_partitions`)
    partitions: dict[int, list]           # summary.json's final_reads.partitions
    error_names: dict[int, str]           # err code -> error text
    nemesis: dict[int, list]              # the nemesis events
    node_flags: DataFrame | None          # run, nd, weak, idem of named producer instances
    node_rows: list                       # (run, nd, node) of every producer instance seen
    facts: Facts = field(default_factory=lambda: Facts(), compare=False)  # values, poll_sequences


class Values(NamedTuple):
    """The fact `values`."""

    frame: DataFrame            # one row per (partition, value), with its kind and `dup` (cached)
    counts: dict                # run -> Row: values read, and how many of each kind
    flagged: DataFrame | None   # the values of some kind, named, with their send (cached)
    reads: DataFrame | None     # each offset such a value was read at, with the first read (cached)


class Polls(NamedTuple):
    """The fact `poll_sequences`."""

    flags: DataFrame            # nonmonotonic-poll instances and gaps to verify (cached)
    counts: dict                # kind (nonmonotonic-poll, gap, jumping) -> count, over the batch


class Txns(NamedTuple):
    """The fact `transactions`, of the batch's transactional runs."""

    tagged: DataFrame     # per op carrying them: txn, intent, rc (read_committed), src_* (cached)
    sends: DataFrame      # each send of a transaction: its op, txn, status, commit_index and commit_time (cached)
    ends: DataFrame       # per (run, txn) that sent something: status, commit_index, commit_time, `end` witness
    rc_pairs: DataFrame   # per (partition, offset, value) read at read_committed: its first read (cached)


class Facts:
    """The facts several anomaly types read, each computed once per
    analysis: by the first function that asks for it, while the others
    that ask wait (the checker runs the functions side by side)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._once: dict = {}   # compute -> (its lock, [its result])

    def get(self, compute: Callable, a: SparkAnalysis):
        with self._lock:
            lock, box = self._once.setdefault(compute, (threading.Lock(), []))
        with lock:
            if not box:
                box.append(compute(a))
        return box[0]


# ----------------------------------------------------------------------------- helpers

def _bad_event(t, fn):
    """A boolean column: the event has a problem (`spark_problem_column` is not null).

    The same checks as schema.py's, without building the message: the cached
    ops carry only a count, and the message comes from the plain reader. `t`
    and `fn` are the type and function codes (-1 for an unknown name), so
    each name is compared once per event.
    """
    from pyspark.sql import functions as F

    c = F.col
    checks = [c(CORRUPT_COLUMN).isNotNull(), t == -1, fn == -1]
    checks += [~c(name).isin(*names) for name, names in NAMED]
    checks += [c(name).isNull() for name in REQUIRED_ALWAYS]
    for f, type_, names in REQUIRED_BY_KIND:
        kind = fn == F_CODES[f]
        if type_ is not None:
            kind = kind & (t == TYPE_CODES[type_])
        checks += [kind & c(name).isNull() for name in names]
    # (no inner lambda: with two elements, "has a null" is element 0 or 1 null)
    bad_record = F.exists(
        "records", lambda r: r.isNull() | (F.size(r) != 2) | F.get(r, 0).isNull() | F.get(r, 1).isNull()
    )
    checks.append(c("records").isNotNull() & bad_record)
    checks.append(source_incomplete())
    # three-valued logic: a null check never hides a true one (OR is true if any is)
    return F.coalesce(reduce(lambda a, b: a | b, checks), F.lit(False))


def _count_if(cond):
    """An aggregate: how many rows of the group meet `cond` (0 if none)."""
    from pyspark.sql import functions as F

    return F.count(F.when(cond, 1))


def _code(col, codes: dict):
    from pyspark.sql import functions as F

    expr = None
    for name, code in codes.items():
        expr = (F.when(col == name, code) if expr is None else expr.when(col == name, code))
    return expr.otherwise(-1)


def _small(df, n: int):
    """Broadcast a side known to be small; leave large ones to a shuffle join."""
    from pyspark.sql import functions as F

    return F.broadcast(df) if n <= BROADCAST_ROWS else df


def _named(a: SparkAnalysis, df):
    """Add topic and partition (for output and canonical order) to a small DataFrame keyed by tp."""
    from pyspark.sql import functions as F

    return df.join(F.broadcast(a.tp_names), "tp")


def _ranked(a: SparkAnalysis, df, kind_col: str, order_cols: list[str], dense: bool = False):
    """Keep the first `cap` rows per (run, kind) in canonical order, with the kind's total."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("run", kind_col).orderBy(*order_cols)
    rank = F.dense_rank() if dense else F.row_number()
    ranked = df.withColumn("rank", rank.over(w)).withColumn(
        "total", F.max("rank").over(Window.partitionBy("run", kind_col))
    )
    return ranked.filter(F.col("rank") <= a.cap)


def _found(rows, make: Callable[[Any], dict]) -> dict[int, Found]:
    """Found per run from rows ranked by `_ranked` (each with the total)."""
    out: dict[int, Found] = {}
    for r in rows:
        found = out.setdefault(r.run, Found(r.total, []))
        found.items.append(make(r))
    return out


def _every_run(a: SparkAnalysis, instances: Callable[[int], list[dict]]) -> dict[int, Found]:
    """Found per run from a plain function of the run's key."""
    out = {}
    for k in a.runs:
        items = instances(k)
        out[k] = Found(len(items), items)
    return out


def _complete(a: SparkAnalysis, k: int) -> dict[tuple, int]:
    """(topic, partition) -> final high watermark, of run k's partitions whose final reads completed."""
    return {(p["topic"], p["partition"]): p["final_high_watermark"]
            for p in a.partitions[k] if p["final_complete"]}


def _flagged_sends(node_flags, sends):
    """`sends` (ops of sends) with their instance's weak and idem flags (0 when unnamed)."""
    from pyspark.sql import functions as F

    if node_flags is None:
        return sends.withColumn("weak", F.lit(0)).withColumn("idem", F.lit(0))
    return sends.join(F.broadcast(node_flags), ["run", "nd"], "left").withColumn(
        "weak", F.coalesce("weak", F.lit(0))).withColumn("idem", F.coalesce("idem", F.lit(0)))


def acks(ops, node_flags):
    """Every acknowledged send: its offset and value, the op that got the
    ack (index, time), its invocation time and its producer's flags (weak:
    acks 0 or 1; idem: idempotent)."""
    from pyspark.sql import functions as F

    c = F.col
    sends = ops.filter((c("fn") == F_SEND) & (c("outcome") == T_OK))
    return _flagged_sends(node_flags, sends).select(
        "run", "tp", c("ack").alias("offset"), "value", c("comp_index").alias("index"),
        c("comp_time").alias("time"), "op", "process", "inv_time", "nd", "weak", "idem",
    )


def _sends(a: SparkAnalysis):
    """Each send's value with the op that sent it (for the details of value anomalies)."""
    from pyspark.sql import functions as F

    c = F.col
    return a.ops.filter(c("fn") == F_SEND).select(
        "run", "tp", "value", c("op").alias("send_op"), c("process").alias("send_process"),
        c("comp_time").alias("send_time"), c("comp_index").alias("send_index"),
    )


def _first_reads(a: SparkAnalysis, flagged, on: list[str], n: int, cols: list[str]):
    """The pairs read at least once that match `flagged` (n rows) on `on`:
    `cols`, and `idx`, time, op and process of each pair's first read.

    A flagged value or offset has one pair or a few. The first read's
    index is a completion's (a poll that read): the cached ops find its
    op, no pass over the input.
    """
    from pyspark.sql import functions as F

    c = F.col
    read = a.pairs.filter(c("reads") > 0).join(_small(flagged, n), on).select(
        *cols, c("read_index").alias("idx"))
    return _witnessed(a, read, 4 * n, cols)


def _witnessed(a: SparkAnalysis, rows, n: int, cols: list[str]):
    """`cols` of `rows` (n of them, each with `idx`, the index of a client
    op's completion) with the time, op and process of that event, from the cached ops."""
    from pyspark.sql import functions as F

    c = F.col
    at = a.ops.select("run", c("comp_index").alias("idx"), c("comp_time").alias("time"), "op", "process")
    return at.join(_small(rows, n), ["run", "idx"]).select(*cols, "idx", "time", "op", "process")


def _final_offsets(a: SparkAnalysis):
    """Per (run, tp, value) the final reads returned: the lowest offset they returned it at."""
    from pyspark.sql import functions as F

    c = F.col
    final_ops = a.ops.filter((c("fn") == F_POLL) & (c("final") == 1)).select("run", "op")
    return (a.reads.join(final_ops, ["run", "op"]).groupBy("run", "tp", "value")
            .agg(F.min("offset").alias("offset")))


# ----------------------------------------------------------------------------- input

def _scan(spark, kind: str, paths: list[str]):
    """The events of some files of one kind, explicitly typed (JSONL: bad lines kept aside)."""
    from pyspark.sql import functions as F

    read = spark.read
    if kind == "jsonl":
        return (
            read.schema(spark_schema(with_corrupt=True))
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
            .option("allowSingleQuotes", "false")
            .json(paths)
        )
    return (
        read.schema(spark_schema(with_corrupt=False))
        .parquet(*paths)
        .withColumn(CORRUPT_COLUMN, F.lit(None).cast("string"))
    )


def _uris(spark, path) -> set[str]:
    """The ways Spark's `_metadata.file_path` may spell a file."""
    jvm = spark._jvm
    p = jvm.org.apache.hadoop.fs.Path(str(path))
    fs = p.getFileSystem(spark._jsc.hadoopConfiguration())
    uri = fs.makeQualified(p).toUri().toString()
    return {uri, re.sub(r"^file:/+", "file:/", uri), re.sub(r"^file:/+", "file:///", uri)}


def _read_events(spark, files: list[tuple[int, object]]):
    """All files' events with `run` (the batch key), codes and the columns the checks read.

    `files` is [(run key, HistoryFile)]. One scan per kind of file, so that
    Spark packs many small histories into few tasks (a batch of runs is
    the common case); each row finds its run by its file's name.
    """
    from pyspark.sql import functions as F

    c = F.col
    # One run and nothing to cut: no file names (spelling one per row
    # costs about a second per pass over 10M events).
    by_name = len({k for k, _ in files}) > 1 or any(hf.truncated_tail is not None for _, hf in files)
    frames = [
        _scan(spark, kind, paths)
        for kind in ("jsonl", "parquet")
        if (paths := [str(hf.path) for _, hf in files if hf.kind == kind])
    ]
    if by_name:
        frames = [f.withColumn("file", c("_metadata.file_path")) for f in frames]
    ev = reduce(lambda a, b: a.unionByName(b), frames)
    if by_name:
        # Spark names a file by a URI (file:/x for local files, file:///x from
        # Hadoop's qualification): the mapping lists both spellings, so the
        # per-row join needs no string rewriting.
        mapping = spark.createDataFrame(
            [(uri, k, i) for i, (k, hf) in enumerate(files) for uri in _uris(spark, hf.path)],
            "file string, run int, file_id int",
        )
        ev = ev.join(F.broadcast(mapping), "file")
    else:
        ev = ev.withColumn("run", F.lit(files[0][0]))
    # A line cut by a crash (no newline, not JSON) was warned about by open_run: drop it.
    for i, (_k, hf) in enumerate(files):
        if hf.truncated_tail is not None:
            cut = (
                (c("file_id") == i)
                & c(CORRUPT_COLUMN).isNotNull()
                & c(CORRUPT_COLUMN).startswith(_decodable_prefix(hf.truncated_tail))
            )
            ev = ev.filter(~F.coalesce(cut, F.lit(False)))
    # Only fixed-width columns of what the checks read, plus the records;
    # the nemesis fields (a few rows) travel packed in one JSON column. An
    # ok poll's records also become plain columns (count, first, last and
    # highest offset, and whether they are consecutive), so the per-op
    # aggregation never decodes the arrays ([offset, value] pairs order by
    # offset first: array_max is the one with the highest offset).
    t, fn = _code(c("type"), TYPE_CODES), _code(c("f"), F_CODES)
    ok_poll = (fn == F_POLL) & (t == T_OK)
    n = F.size("records")
    first = F.get(F.get(c("records"), 0), 0)
    last = F.get(F.get(c("records"), n - 1), 0)
    # Records of one poll must be consecutive offsets; the rare poll that
    # is not gets a record-by-record look in poll_sequences.
    jumps = (n > 1) & (
        F.transform("records", lambda r: r[0]) != F.sequence(first, first + n - 1)
    )
    return ev.select(
        "run", "topic", "partition",
        F.xxhash64("run", "topic", "partition").alias("tp"),
        "index", "time", "process", "op",
        t.alias("t"),
        fn.alias("fn"),
        "value", "offset", "records", "high_watermark", "final", "error", "node",
        "log_start_offset", "group", "txn", "intent", "isolation", "source",
        # errors travel through the ops as a code (a hash; _names has the text)
        F.when(c("error").isNotNull(), F.xxhash64("error")).alias("err"),
        # so does a send's producer instance
        F.when((fn == F_SEND) & c("node").isNotNull(), F.xxhash64("node")).alias("nd"),
        _bad_event(t, fn).alias("bad"),
        F.when(fn == F_NEMESIS, F.to_json(F.struct("fault", "phase", "targets", "detail")))
        .alias("nemesis"),
        F.when(ok_poll, n).alias("rec_n"),
        F.when(ok_poll, F.get(F.array_max("records"), 0)).alias("rec_max"),
        F.when(ok_poll & (n > 0), first).alias("rec_first"),
        F.when(ok_poll & (n > 0), last).alias("rec_last"),
        F.when(ok_poll, jumps.cast("int")).alias("rec_jumps"),
    )


def _renamed(ev, incarnations: dict[int, Incarnations]):
    """The sends and polls of topics deleted and created again, named by
    their incarnation as reports/incarnations.py attributes them: a send
    by when it completed, a poll by the send of its first record's value
    (else by when it completed). Only those topics' events take the extra
    groupings."""
    from pyspark.sql import functions as F

    c = F.col
    recreated = reduce(lambda a, b: a | b, [
        (c("run") == k) & (c("topic") == topic)
        for k, inc in incarnations.items() for topic in inc.created])
    recreated = recreated & c("fn").isin(F_SEND, F_POLL)
    theirs, others = ev.filter(recreated), ev.filter(~F.coalesce(recreated, F.lit(False)))
    first = F.when((c("fn") == F_POLL) & (c("t") == T_OK) & ~F.coalesce(c("final"), F.lit(False)),
                   F.get(F.get(c("records"), 0), 1))
    ops = theirs.groupBy("run", "topic", "op").agg(
        F.max("time").alias("at"), F.max("fn").alias("ofn"), F.max("value").alias("sent"),
        F.max(first).alias("first_value"))
    by_time = F.lit(0)
    for run, inc in incarnations.items():
        for topic, created in inc.created.items():
            by_time = F.when((c("run") == run) & (c("topic") == topic), reduce(
                lambda a, b: a + b, [F.when(c("at") >= t, 1).otherwise(0) for t in created])
            ).otherwise(by_time)
    ops = ops.withColumn("k", by_time)
    sends = ops.filter(c("ofn") == F_SEND).select(
        "run", "topic", c("sent").alias("first_value"), c("k").alias("k_sent"))
    ops = (ops.join(sends, ["run", "topic", "first_value"], "left")
           .select("run", "op", F.coalesce("k_sent", "k").alias("k")))
    theirs = (theirs.join(ops, ["run", "op"])
              .withColumn("topic", F.when(c("k") > 0, F.concat(c("topic"), F.lit(SEPARATOR),
                                                                c("k").cast("string")))
                          .otherwise(c("topic")))
              .withColumn("tp", F.xxhash64("run", "topic", "partition"))
              .drop("k"))
    return others.unionByName(theirs)


def _names(jobs: Jobs, ev, firsts: set[int]):
    """What the ops carry only as codes, from the few events that tell it.

    The name of each partition key (`tp`: the events at `firsts`, the
    first index of each), the text of each error code (`err`), and the
    nemesis events: (tps, error names, nemesis events by run). Strings stay
    out of the ops: grouping and caching 64-bit codes is cheaper; and a
    filter before the distinct is much cheaper than a distinct of every event.
    """
    from pyspark.sql import functions as F

    c = F.col
    nemesis = c("fn") == F_NEMESIS
    rows = jobs.collect(
        ev.filter(nemesis | c("error").isNotNull() | c("index").isin(*sorted(firsts))).select(
            "run", "tp", "topic", "partition", "err", "error", "nemesis",
            F.when(nemesis, c("index")).alias("n_index"), F.when(nemesis, c("time")).alias("n_time"),
        ).distinct(),
        "partitions, errors and nemesis",
    )
    tps: dict[int, tuple[int, str, int]] = {}
    error_names: dict[int, str] = {}
    nemesis_events: dict[int, list] = defaultdict(list)
    for r in rows:
        if r.topic is not None and r.partition is not None:
            _same(tps, r.tp, (r.run, r.topic, r.partition), "partition")
        if r.err is not None:
            _same(error_names, r.err, r.error, "error")
        if r.n_index is not None:
            nemesis_events[r.run].append({"index": r.n_index, "time": r.n_time, **json.loads(r.nemesis)})
    return tps, error_names, nemesis_events


def _node_flags(jobs: Jobs, ev, runs: dict[int, RunInput]):
    """Which producer instances (a send's `node`, coded as `nd`) were
    weak (acks 0 or 1: their acknowledgements bind nothing) or
    idempotent, per run.json's workload.clients: a small table joined to
    the sends (None when no run names its clients), and (run, nd, node)
    of every instance seen."""
    from pyspark.sql import functions as F

    named = {k: (run.weak_nodes(), run.idempotent_nodes()) for k, run in runs.items()}
    if not any(w or i for w, i in named.values()):
        return None, []
    rows = jobs.collect(
        ev.filter(F.col("nd").isNotNull()).select("run", "nd", "node").distinct(),
        "producer instances",
    )
    flags = [(r.run, r.nd, int(r.node in named[r.run][0]), int(r.node in named[r.run][1]))
             for r in rows if r.run in named]
    node_flags = (jobs.spark.createDataFrame(flags, "run int, nd long, weak int, idem int")
                  if flags else None)
    return node_flags, [(r.run, r.nd, r.node) for r in rows]


def _partitions(jobs: Jobs, ops, runs: dict[int, RunInput]):
    """Validation, and the figures summary.json gives per partition: one aggregation of the cached ops.

    The ops count their events and their malformed ones, so Spark only
    sums; the plain reader then names the first malformed event's file
    and line (it applies the same rules, schema.py). Per (run,
    topic-partition) also the outcomes by function, furthest offsets and
    whether the final reads completed (the nemesis's key, a partition of
    no name, only counts events).
    """
    from pyspark.sql import functions as F

    c = F.col
    send, poll = c("fn") == F_SEND, c("fn") == F_POLL
    ok = c("outcome") == T_OK
    final_ok = poll & ok & (c("final") == 1)
    complete = final_ok & c("hw").isNotNull() & (
        ((c("rec_n") > 0) & (c("rec_max") >= c("hw") - 1))
        | ((c("rec_n") == 0) & ((c("hw") == 0) | (c("position") == c("hw"))))
    )

    counts = []
    for fn, is_f in (("send", send), ("poll", poll)):
        for code, name in OUTCOMES.items():
            counts.append(_count_if(is_f & (c("outcome") == code)).alias(f"{fn}_{name}"))
        counts.append(_count_if(is_f & c("outcome").isNull()).alias(f"{fn}_pending"))
    rows = jobs.collect(
        ops.groupBy("run", "tp").agg(
            F.sum("events").alias("events"),
            F.max("end_time").alias("end_time"),
            F.sum("bad").alias("bad"),
            F.min(F.coalesce("inv_index", "comp_index")).alias("first_index"),
            _count_if(send).alias("sends"),
            _count_if(send & ok).alias("acknowledged"),
            _count_if(poll).alias("polls"),
            F.sum(F.when(poll & ok, c("rec_n")).otherwise(0)).alias("records"),
            F.max(F.when(send & ok, c("ack"))).alias("max_ack_offset"),
            F.max(F.when(poll & ok, c("rec_max"))).alias("max_read_offset"),
            _count_if(final_ok).alias("final_polls"),
            _count_if(poll & ok & c("lso").isNotNull()).alias("exact_polls"),
            F.max(complete.cast("int")).alias("final_complete"),
            F.max(F.when(final_ok, c("hw"))).alias("final_high_watermark"),
            *counts,
        ),
        "validation and partitions",
    )
    stats: dict[int, dict] = {k: {"events": 0, "end_time": 0} for k in runs}
    bad: dict[int, int] = defaultdict(int)
    for r in rows:
        s = stats[r.run]
        s["events"] += r.events
        s["end_time"] = max(s["end_time"], r.end_time or 0)
        bad[r.run] += r.bad
    errors = {k: _first_problem(jobs.spark, runs[k], n) for k, n in sorted(bad.items()) if n}
    return stats, errors, rows


def _first_problem(spark, run: RunInput, n: int) -> HistoryError:
    """The error naming a run's first malformed event (Spark counted `n`)."""
    from pyspark.sql import functions as F

    for hf in run.files:
        try:
            err = first_problem(hf)
        except HistoryError as e:  # e.g. an unreadable part file
            return e
        if err is not None:
            return err
    # The two readers disagree: still name a file and the problem.
    for hf in run.files:
        example = (
            _scan(spark, hf.kind, [str(hf.path)]).select(spark_problem_column().alias("problem"))
            .filter(F.col("problem").isNotNull()).limit(1).collect()
        )
        if example:
            return HistoryError(hf.path, None, f"{n} malformed events, e.g.: {example[0].problem}")
    return HistoryError(run.files[0].path, None, f"{n} malformed events")


def _ops(ev):
    """One row per op (client or nemesis): its invocation and completion side by side.

    Also what validation needs (events, malformed events, the last time),
    so that one pass over the input does both. Only fixed-width keys and
    aggregates (Spark hash-aggregates them; names are codes) and plain min/max
    where the rules of history-format.md make them exact: an invocation
    (t = 0) comes before its one completion (t > 0), so the least index
    and time are the invocation's and the greatest the completion's; only
    an ok send carries an acknowledged offset and only a poll invocation a
    position, so one `offset` column holds both.
    """
    from pyspark.sql import functions as F

    c = F.col
    ops = ev.groupBy("run", "tp", "op").agg(
        F.max("fn").alias("fn"),
        F.count(F.lit(1)).alias("events"),
        F.sum(c("bad").cast("int")).alias("bad"),
        F.min("t").alias("t_min"),
        F.max("t").alias("t_max"),
        F.min("index").alias("i_min"),
        F.max("index").alias("i_max"),
        F.min("time").alias("time_min"),
        F.max("time").alias("end_time"),
        F.min("process").alias("process"),
        F.max("value").alias("value"),
        F.max("offset").alias("offset"),
        F.max("high_watermark").alias("hw"),
        F.max(F.coalesce(c("final").cast("int"), F.lit(0))).alias("final"),
        F.max("err").alias("err"),
        F.max("nd").alias("nd"),
        F.max("log_start_offset").alias("lso"),
        *[F.max(x).alias(x) for x in ("rec_n", "rec_max", "rec_first", "rec_last", "rec_jumps")],
    )
    invoked, done = c("t_min") == T_INVOKE, c("t_max") > T_INVOKE
    return ops.select(
        "run", "tp", "op", "fn", "events", "bad", "end_time", "process", "value", "hw", "final",
        "err", "nd", "lso", "rec_n", "rec_max", "rec_first", "rec_last", "rec_jumps",
        F.when(invoked, c("i_min")).alias("inv_index"),
        F.when(invoked, c("time_min")).alias("inv_time"),
        F.when(done, c("i_max")).alias("comp_index"),
        F.when(done, c("end_time")).alias("comp_time"),
        F.when(done, c("t_max")).alias("outcome"),
        F.when((c("fn") == F_SEND) & (c("t_max") == T_OK), c("offset")).alias("ack"),
        F.when(c("fn") == F_POLL, c("offset")).alias("position"),
    )


def _reads(ev):
    """Every record an ok poll returned, with the poll's process, op, index and time."""
    from pyspark.sql import functions as F

    return (
        ev.filter((F.col("fn") == F_POLL) & (F.col("t") == T_OK))
        .select("run", "tp", "process", "op", "index", "time",
                F.posexplode("records").alias("pos", "rec"))
        .select("run", "tp", "process", "op", "index", "time", "pos",
                F.get(F.col("rec"), 0).alias("offset"), F.get(F.col("rec"), 1).alias("value"))
    )


def _pairs(ops, reads, node_flags):
    """One row per (partition, offset, value) acknowledged or read: how often read, whether acked.

    Every consumer reads most records, so this is several times smaller
    than the reads, and both the value checks and the offset checks
    start from it. It also keeps the index of the first read of each
    pair: the details of an anomaly find that read's op by it
    (`_first_reads`), so only two numbers per read cross the shuffle.

    Partitioned by value: the reads of one pair lie far apart in the input,
    so combining them before the shuffle saves nothing, and this way the
    value checks group the pairs without another shuffle.
    """
    from pyspark.sql import functions as F

    c = F.col
    acked = acks(ops, node_flags).select("run", "tp", "offset", "value", F.lit(1).alias("a"),
                                         F.lit(None).cast("long").alias("index"), "weak", "idem")
    read = reads.select("run", "tp", "offset", "value", F.lit(0).alias("a"), "index",
                        F.lit(None).cast("int").alias("weak"),
                        F.lit(None).cast("int").alias("idem"))
    both = acked.unionByName(read).repartition("run", "tp", "value")
    return both.groupBy("run", "tp", "offset", "value").agg(
        F.max("a").alias("acked"), _count_if(c("a") == 0).alias("reads"),
        F.min("index").alias("read_index"),  # (acknowledgements have none)
        F.max("weak").alias("weak"), F.max("idem").alias("idem"),
    )


def _offsets(pairs):
    """Per (partition, offset) acknowledged or read: the least and greatest value seen there."""
    from pyspark.sql import functions as F

    c = F.col
    # (an acks=1 acknowledgement binds no offset: the leader alone had it)
    return pairs.filter((c("reads") > 0) | (F.coalesce("weak", F.lit(0)) == 0)).groupBy(
        "run", "tp", "offset").agg(F.min("value").alias("vmin"), F.max("value").alias("vmax"))


def _partition_lists(runs, tp_rows, tps, incarnations) -> dict[int, list]:
    """summary.json's final_reads.partitions of each run, from the rows of `_partitions`."""
    per_run = defaultdict(list)
    for r in tp_rows:
        _run, topic, partition = tps[r.tp]
        per_run[r.run].append({
            "topic": topic, "partition": partition,
            **{k: r[k] for k in ("sends", "acknowledged", "polls", "records", "max_ack_offset",
                                 "max_read_offset", "final_polls")},
            "final_complete": bool(r.final_complete),
            "final_high_watermark": r.final_high_watermark,
        } | ({"deleted": True} if incarnations[r.run].is_deleted(topic) else {}))
    return {k: sorted(per_run[k], key=lambda p: (p["topic"], p["partition"])) for k in runs}


def analyze(jobs: Jobs, runs: list[RunInput], cap: int):
    """The analysis of a batch: (HistoryError by run key, for the runs that
    failed validation; the SparkAnalysis of the others, or None if none passed).

    Its facts `values` and `poll_sequences` are left to compute (side by side).
    """
    from pyspark.sql import functions as F

    spark = jobs.spark
    todo = dict(enumerate(runs))
    files = [(k, hf) for k, run in todo.items() for hf in run.files]
    incarnations = {k: read_incarnations(run.run_dir) for k, run in todo.items()}
    ev = _read_events(spark, files)
    if any(incarnations.values()):
        ev = _renamed(ev, incarnations)
    if any(hf.kind == "jsonl" for _, hf in files):
        # Parsing JSON costs more than keeping its result: parse once. A
        # Parquet input is read again by each pass instead, only the
        # columns that pass needs.
        ev = jobs.persist(ev)
    # The one pass over every event, validation included (see the module docstring).
    ops = jobs.persist(_ops(ev))
    stats, errors, tp_rows = _partitions(jobs, ops, todo)
    tps, error_names, nemesis = _names(jobs, ev, {r.first_index for r in tp_rows if r.first_index is not None})
    tp_rows = [r for r in tp_rows if r.tp in tps]  # (not the nemesis's)
    good = [k for k in todo if k not in errors]
    if not good:
        return errors, None
    if errors:
        ev = ev.filter(F.col("run").isin(good))
        ops = ops.filter(F.col("run").isin(good))
        tp_rows = [r for r in tp_rows if r.run in good]
    node_flags, node_rows = _node_flags(jobs, ev, {k: todo[k] for k in good})
    ev = ev.drop("bad", "topic", "partition", "node")
    client = ops.drop("events", "bad", "end_time")
    ops = client.filter(F.col("fn").isin(F_SEND, F_POLL))
    # Not cached: read again only by the rare jobs that list an anomaly's reads.
    reads = _reads(ev)
    pairs = jobs.persist(_pairs(ops, reads, node_flags))
    return errors, SparkAnalysis(
        jobs=jobs, cap=cap, runs={k: todo[k] for k in good},
        incarnations=incarnations,
        observed={k: read_observations(todo[k].run_dir, todo[k].run_json.get("checks")) for k in good},
        groups={k: read_groups(todo[k].run_dir) for k in good},
        stats=stats, ev=ev, ops=ops, txn_ops=client.filter(F.col("fn") == F_TXN), reads=reads,
        pairs=pairs, offsets=_offsets(pairs),
        tps=tps, tp_index={v: k for k, v in tps.items()},
        tp_names=spark.createDataFrame(
            [(tp, run, topic, partition) for tp, (run, topic, partition) in tps.items()],
            "tp long, trun int, topic string, partition int",
        ).drop("trun"),
        tp_rows=tp_rows, partitions=_partition_lists(good, tp_rows, tps, incarnations),
        error_names=error_names, nemesis=nemesis, node_flags=node_flags, node_rows=node_rows)


# ----------------------------------------------------------------------------- shared facts

def values(a: SparkAnalysis) -> Values:
    """The fact `values` (computed once per analysis: `_values`)."""
    return a.facts.get(_values, a)


def _values(a: SparkAnalysis) -> Values:
    """Per (partition, value) acknowledged or read: its kind (lost, unseen,
    lost-unreplicated, aborted-read, phantom-read, resurrected, or none) and
    whether it was read at two offsets (`dup`); cached, with the counts of
    each per run; the values of some kind with their send (`flagged`)
    and each offset one was read at (`reads`), or None when there are none.

    Every anomaly here is of a value acknowledged or read, so of a value in
    the pairs: the pairs grouped by value (no shuffle: see `_pairs`) meet
    the sends that were not ok, to tell aborted from phantom reads.
    """
    from pyspark.sql import functions as F

    c = F.col
    keys = ["run", "tp", "value"]
    not_ok = (
        _flagged_sends(
            a.node_flags,
            a.ops.filter((c("fn") == F_SEND) & (c("outcome").isNull() | (c("outcome") != T_OK))))
        .groupBy(*keys)
        .agg(F.max("outcome").alias("not_ok_outcome"), F.lit(1).alias("not_ok"),
             F.max("idem").alias("not_ok_idem"))
    )
    n_not_ok = sum(r.send_fail + r.send_info + r.send_pending for r in a.tp_rows)
    vals = (
        a.pairs.groupBy(*keys)
        .agg(
            F.max("acked").alias("acked"),
            F.max(F.when(c("acked") == 1, c("offset"))).alias("ack"),
            F.sum("reads").alias("reads"),
            F.min(F.when(c("reads") > 0, c("offset"))).alias("rmin"),
            F.max(F.when(c("reads") > 0, c("offset"))).alias("rmax"),
            F.max("weak").alias("weak"), F.max("idem").alias("idem"),
        )
        .join(_small(not_ok, n_not_ok), keys, "left")
        .select(
            *keys, "ack", "reads", "rmin", "rmax",
            F.coalesce("weak", F.lit(0)).alias("weak"),
            F.greatest(F.coalesce("idem", F.lit(0)), F.coalesce("not_ok_idem", F.lit(0)))
            .alias("idem"),
            F.greatest(c("acked"), F.coalesce("not_ok", F.lit(0))).alias("sent"),
            # (greatest passes over nulls: ok if any send of the value was)
            F.greatest(F.when(c("acked") == 1, F.lit(T_OK)), c("not_ok_outcome")).alias("outcome"),
        )
    )
    top = a.jobs.spark.createDataFrame(
        [(r.tp, r.max_read_offset) for r in a.tp_rows], "tp long, max_read long"
    )
    vals = vals.join(F.broadcast(top), "tp", "left")
    unread_ack = (c("outcome") == T_OK) & (c("reads") == 0)
    lost = unread_ack & c("max_read").isNotNull() & (c("max_read") >= c("ack"))
    unsent_read = (c("reads") > 0) & (c("sent") == 0)
    deleted = [tp for tp, (k, topic, _p) in a.tps.items() if a.incarnations[k].is_deleted(topic)]
    # Never read, then gone with its topic (reports/incarnations.py): not lost or unseen.
    gone = unread_ack & c("tp").isin(deleted) if deleted else F.lit(False)
    t = transactions(a)
    if t is not None:
        # A value of a transaction that aborted, or whose outcome is unknown, need not be read.
        hidden = (t.sends.filter(c("status") != txns.COMMITTED)
                  .select(*keys, F.lit(1).alias("hidden")).distinct())
        vals = vals.join(hidden, keys, "left")
        gone = gone | (unread_ack & c("hidden").isNotNull())
    vals = _other_incarnation(a, vals, unsent_read)
    vals = vals.withColumn(
        "vkind",
        F.when(gone, F.lit(None))
        .when(unread_ack & (c("weak") == 1), "lost-unreplicated")
        .when(lost, "lost")
        .when(unread_ack, "unseen")
        # (sent to another incarnation: resurrected, aborted, or where it may be)
        .when(unsent_read & c("x_kind").isNotNull(), F.when(c("x_kind") != "excused", c("x_kind")))
        .when(unsent_read, "phantom-read")
        .when((c("reads") > 0) & (c("outcome") == T_FAIL), "aborted-read"),
    ).withColumn("dup", c("rmin") != c("rmax"))
    # Cached (about one row per value): the counts and the lists read it.
    vals = a.jobs.persist(vals)
    counts = a.jobs.collect(
        vals.groupBy("run").agg(
            _count_if(c("reads") > 0).alias("read"),
            *[_count_if(c("vkind") == k).alias(k) for k in
              ("lost", "unseen", "lost-unreplicated", "phantom-read", "aborted-read", "resurrected")],
            _count_if(c("dup")).alias("duplicate"),
            _count_if(c("dup") & (c("idem") == 1)).alias("idem_duplicate"),
        ),
        "values",
    )
    # Only the values with something to report, with their send op if any
    # (lazy: the first function to list some computes them).
    n_unread = sum(r.lost + r.unseen + r["lost-unreplicated"] for r in counts)
    n_reads = sum(r["phantom-read"] + r["aborted-read"] + r.resurrected + r.duplicate for r in counts)
    flagged = per_offset = None
    if n_unread or n_reads:
        flagged = vals.filter(c("vkind").isNotNull() | c("dup"))
        sent = _sends(a).join(_small(flagged.select(*keys), n_unread + n_reads), keys)
        flagged = a.jobs.persist(_named(a, flagged.join(_small(sent, n_unread + n_reads), keys, "left")))
    if n_reads:
        # duplicate, aborted-read, phantom-read, resurrected: each offset the value was read at
        read = flagged.filter(c("vkind").isin(*_UNEXPLAINED) | c("dup")).select(
            "tp", "value", "topic", "partition", "vkind", c("dup").cast("int").alias("dup"),
            F.coalesce("send_op", "x_send_op").alias("send_op"), "x_topic", c("idem").alias("value_idem"),
        )
        per_offset = a.jobs.persist(_first_reads(
            a, read, ["tp", "value"], n_reads,
            ["run", "tp", "topic", "partition", "value", "offset", "vkind", "dup", "send_op",
             "x_topic", "value_idem"]))
    return Values(vals, {r.run: r for r in counts}, flagged, per_offset)


def _other_incarnation(a: SparkAnalysis, vals, unsent_read):
    """`vals` with, for a value read where nothing sent it, what another
    incarnation of its topic (reports/incarnations.py) says: `x_kind`
    resurrected (acknowledged in an earlier one), aborted-read (failed
    there) or excused (its answer may have come from either); `x_send_op`
    and `x_topic` name that send. Null columns when no topic was re-created."""
    from pyspark.sql import functions as F

    c = F.col
    rows = [(tp, k, *split(topic), partition, topic) for tp, (k, topic, partition) in a.tps.items()
            if split(topic)[0] in a.incarnations[k].created]
    if not rows:
        return (vals.withColumn("x_kind", F.lit(None).cast("string"))
                .withColumn("x_send_op", F.lit(None).cast("long"))
                .withColumn("x_topic", F.lit(None).cast("string")))
    itp = F.broadcast(a.jobs.spark.createDataFrame(
        rows, "tp long, irun int, base string, k int, partition int, name string"))
    read = (vals.filter(unsent_read).select("run", "tp", "value")
            .join(itp, "tp").drop("irun", "name"))
    sent = (a.ops.filter(c("fn") == F_SEND)
            .select("run", c("tp").alias("stp"), "value", c("op").alias("x_send_op"),
                    c("outcome").alias("x_outcome"))
            .join(itp.select(c("tp").alias("stp"), "base", "partition", c("k").alias("sk"),
                             c("name").alias("x_topic")), "stp"))
    found = (read.join(sent, ["run", "base", "partition", "value"]).filter(c("sk") != c("k"))
             .select("run", "tp", "value", "x_send_op", "x_topic",
                     F.when(c("x_outcome") == T_FAIL, "aborted-read")
                     .when((c("x_outcome") == T_OK) & (c("sk") < c("k")), "resurrected")
                     .otherwise("excused").alias("x_kind")))
    return vals.join(found, ["run", "tp", "value"], "left")


def poll_sequences(a: SparkAnalysis) -> Polls:
    """The fact `poll_sequences` (computed once per analysis: `_poll_sequences`)."""
    return a.facts.get(_poll_sequences, a)


def _poll_sequences(a: SparkAnalysis) -> Polls:
    """Each process's reads of a partition, in index order: the
    nonmonotonic-poll instances and the gaps to verify as poll-skip
    (cached), with their counts over the batch.

    A re-seek is a poll invocation whose position is not right after the
    last offset the process returned there; two successive returned offsets
    with no re-seek between them must increase by exactly one, unless no
    read or acknowledgement shows a value strictly between them.

    One row per poll, not per record: a poll's records are checked among
    themselves where they are made (`rec_jumps`: not consecutive), so the
    windows over (partition, process) in index order only link each poll's
    first record to the last record before it: that record's offset and op,
    and whether a re-seek came after it (the last "marker" before: 1 = a
    poll that returned records, 2 = a re-seeking one that returned none;
    a poll that re-seeks itself breaks the chain at its own first record).
    Only the rare polls that jump inside are looked at record by record.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c = F.col
    has_recs = c("rec_n") > 0
    polls = a.ops.filter(c("fn") == F_POLL).select(
        "run", "tp", "process", "op", "position", "comp_index", "comp_time",
        F.coalesce("inv_index", "comp_index").alias("ord"),
        *[F.when(c("outcome") == T_OK, c(x)).alias(x) for x in ("rec_n", "rec_first", "rec_last", "rec_jumps")],
    )
    w = Window.partitionBy("tp", "process").orderBy("ord")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    seq = polls.withColumn(
        "previous", F.last(F.when(has_recs, c("rec_last")), ignorenulls=True).over(before)
    ).withColumn("previous_op", F.last(F.when(has_recs, c("op")), ignorenulls=True).over(before))
    reseek = c("position").isNotNull() & c("previous").isNotNull() & (
        c("position") != c("previous") + 1
    )
    seq = seq.withColumn("reseek", reseek).withColumn(
        "last_marker", F.last(F.when(has_recs, 1).when(c("reseek"), 2), ignorenulls=True).over(before)
    )
    chained = has_recs & c("previous").isNotNull() & ~c("reseek") & (c("last_marker") == 1)
    first = (
        seq.withColumn(
            "kind",
            F.when(chained & (c("rec_first") <= c("previous")), "nonmonotonic-poll").when(
                chained & (c("rec_first") > c("previous") + 1), "gap"
            ),
        )
        .filter(c("kind").isNotNull())
        .select(
            "run", "tp", "process", c("rec_first").alias("offset"), "previous", "op",
            "previous_op", c("comp_index").alias("index"), c("comp_time").alias("time"), "kind",
        )
    )
    flagged = a.jobs.persist(first)
    jumping = a.jobs.persist(polls.filter(c("rec_jumps") == 1).select("run", "op"))
    counts = a.jobs.collect(
        flagged.groupBy("kind").count().unionByName(
            jumping.groupBy().count().select(F.lit("jumping").alias("kind"), "count")
        ),
        "poll sequences",
    )
    n = {r.kind: r["count"] for r in counts}
    if n.get("jumping"):
        # Record by record inside the polls that jump: each record after the first against the one before it.
        within = Window.partitionBy("run", "op").orderBy("pos")
        inside = (
            a.reads.join(_small(jumping, n["jumping"]), ["run", "op"])
            .withColumn("previous", F.lag("offset").over(within))
            .withColumn(
                "kind",
                F.when(c("offset") <= c("previous"), "nonmonotonic-poll").when(
                    c("offset") > c("previous") + 1, "gap"
                ),
            )
            .filter(c("kind").isNotNull())
            .select(
                "run", "tp", "process", "offset", "previous", "op", c("op").alias("previous_op"),
                "index", "time", "kind",
            )
        )
        inside = a.jobs.persist(inside)
        for r in a.jobs.collect(inside.groupBy("kind").count(), "poll sequences inside polls"):
            n[r.kind] = n.get(r.kind, 0) + r["count"]
        flagged = flagged.unionByName(inside)
    return Polls(flagged, n)


def transactions(a: SparkAnalysis) -> Txns | None:
    """The fact `transactions` (computed once per analysis: `_transactions`);
    None when no run of the batch is transactional."""
    return a.facts.get(_transactions, a)


def _transactions(a: SparkAnalysis) -> Txns | None:
    """The transactions of the batch's transactional runs (reports/transactions.py).

    The transaction fields stay out of the ops (a run without them pays
    nothing): a filtered pass over the events tags the ops that carry them;
    the cached ops then give each transaction its outcome (the rule of
    transactions.outcome, in columns), the first invocation of its commit,
    its last event (`end`: index, time, op, process) and its sends. The
    reads at read_committed (polls so marked, and a transactional run's
    final polls) are folded into pairs with their first read's index.
    """
    from pyspark.sql import functions as F

    c = F.col
    runs = [k for k, run in a.runs.items() if txns.transactional(run.run_json)]
    if not runs:
        return None
    mine = c("run").isin(runs)
    tagged = a.jobs.persist(
        a.ev.filter(mine & (c("txn").isNotNull() | c("isolation").isNotNull() | c("source").isNotNull()))
        .groupBy("run", "op").agg(
            F.max("txn").alias("txn"), F.max("intent").alias("intent"),
            F.max((c("isolation") == txns.READ_COMMITTED).cast("int")).alias("rc"),
            *[F.max(f"source.{x}").alias(f"src_{x}") for x in ("topic", "partition", "offset", "value")]))
    cols = ["run", "txn", "op", "process", "inv_index", "inv_time", "comp_index", "comp_time", "outcome"]
    in_txn = a.ops.filter(c("fn") == F_SEND).join(tagged.filter(c("txn").isNotNull()), ["run", "op"])
    ops = (a.txn_ops.join(tagged, ["run", "op"]).select(*cols, "intent", F.lit(1).alias("is_end"))
           .unionByName(in_txn.select(*cols, F.lit(None).cast("string").alias("intent"),
                                      F.lit(0).alias("is_end"))))
    commit = (c("is_end") == 1) & (c("intent") == txns.COMMIT)
    done = c("comp_index").isNotNull()
    ends = ops.groupBy("run", "txn").agg(
        F.max((commit & (c("outcome") == T_OK)).cast("int")).alias("committed"),
        F.max((commit & (c("outcome").isNull() | (c("outcome") == T_INFO))).cast("int")).alias("unknown"),
        F.min(F.when(commit, c("inv_index"))).alias("commit_index"),
        F.min(F.when(commit, c("inv_time"))).alias("commit_time"),
        F.max(1 - c("is_end")).alias("sent"),
        F.max(F.struct(F.coalesce("comp_index", "inv_index").alias("index"),
                       F.when(done, c("comp_time")).otherwise(c("inv_time")).alias("time"),
                       "op", "process")).alias("end"),
    ).filter(c("sent") == 1).select(
        "run", "txn", "commit_index", "commit_time", "end",
        F.when(c("committed") == 1, txns.COMMITTED).when(c("unknown") == 1, txns.UNKNOWN)
        .otherwise(txns.ABORTED).alias("status"))
    sends = a.jobs.persist(in_txn.join(ends.select("run", "txn", "status", "commit_index",
                                                   "commit_time"), ["run", "txn"]))
    rc_ops = (tagged.filter(c("rc") == 1).select("run", "op")
              .unionByName(a.ops.filter(mine & (c("fn") == F_POLL) & (c("final") == 1)).select("run", "op"))
              .distinct())
    rc_pairs = a.jobs.persist(a.reads.join(rc_ops, ["run", "op"]).groupBy("run", "tp", "offset", "value")
                              .agg(F.min("index").alias("read_index"),
                                   F.min("time").alias("read_time")))
    return Txns(tagged, sends, ends, rc_pairs)


# ----------------------------------------------------------------------------- one function per anomaly type
# Each: SparkAnalysis -> {run: Found}; a run with none may be left out.

def _total(a: SparkAnalysis, kind: str) -> int:
    """How many values of `kind` the batch has."""
    return sum(r[kind] for r in values(a).counts.values())


def _unread(a: SparkAnalysis, kind: str) -> dict[int, Found]:
    """lost, unseen, lost-unreplicated: an acknowledged value no read
    returned; everything is on the value row."""
    from pyspark.sql import functions as F

    if not _total(a, kind):
        return {}
    rows = a.jobs.collect(
        _ranked(a, values(a).flagged.filter(F.col("vkind") == kind), "vkind",
                ["topic", "partition", "ack", "value"]), kind)
    return _found(rows, lambda r: {
        "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.ack,
        "process": r.send_process, "op": r.send_op, "index": r.send_index, "time": r.send_time})


def lost(a: SparkAnalysis) -> dict[int, Found]:
    return _unread(a, "lost")


def unseen(a: SparkAnalysis) -> dict[int, Found]:
    return _unread(a, "unseen")


def lost_unreplicated(a: SparkAnalysis) -> dict[int, Found]:
    return _unread(a, "lost-unreplicated")


def _unexplained_reads(a: SparkAnalysis, kind: str) -> dict[int, Found]:
    """phantom-read, aborted-read, resurrected: one instance per offset the
    value was read at, with the first read there."""
    from pyspark.sql import functions as F

    if not _total(a, kind):
        return {}
    rows = a.jobs.collect(
        _ranked(a, values(a).reads.filter(F.col("vkind") == kind), "vkind",
                ["topic", "partition", "value", "offset"]), kind)

    def make(r):
        inst = {"topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
                "index": r.idx, "time": r.time, "op": r.op, "process": r.process}
        if kind != "phantom-read":
            inst["send_op"] = r.send_op
        if kind == "resurrected":
            inst["acknowledged_in"] = r.x_topic
        return inst
    return _found(rows, make)


def aborted_read(a: SparkAnalysis) -> dict[int, Found]:
    return _unexplained_reads(a, "aborted-read")


def phantom_read(a: SparkAnalysis) -> dict[int, Found]:
    return _unexplained_reads(a, "phantom-read")


def resurrected(a: SparkAnalysis) -> dict[int, Found]:
    return _unexplained_reads(a, "resurrected")


def duplicate(a: SparkAnalysis) -> dict[int, Found]:
    """A value read at two offsets or more: the offsets, and the first read
    at the second offset seen; who wrote each copy (observations.py)."""
    from pyspark.sql import functions as F

    if not _total(a, "duplicate"):
        return {}
    dups = values(a).reads.filter(F.col("dup") == 1).withColumn("vkind", F.lit("duplicate"))
    rows = a.jobs.collect(
        _ranked(a, dups, "vkind", ["topic", "partition", "value"], dense=True), "duplicate")
    by_value = defaultdict(list)
    totals = {}
    for r in rows:
        totals[r.run] = r.total
        by_value[(r.run, r.topic, r.partition, r.value)].append(r)
    out = {k: Found(total, []) for k, total in totals.items()}
    for (k, topic, partition, value), rs in by_value.items():
        rs.sort(key=lambda r: (r.idx, r.offset))
        w = rs[1]
        out[k].items.append({
            "topic": topic, "partition": partition, "value": value,
            "offsets": sorted(r.offset for r in rs), "index": w.idx, "time": w.time,
            "op": w.op, "process": w.process, "send_op": rs[0].send_op,
            "idempotent": rs[0].value_idem == 1,
        })
    for k, found in out.items():
        observations.writers_of_duplicates(a.observed[k], found.items)
    return out


def inconsistent_offset(a: SparkAnalysis) -> dict[int, Found]:
    """Per (partition, offset): two values or more, each with who saw it
    there first: its acknowledgement, or the first read (from the pairs)."""
    from pyspark.sql import functions as F

    c = F.col
    bad = a.offsets.filter(c("vmin") != c("vmax")).select("run", "tp", "offset")
    n_bad = sum(r["count"] for r in a.jobs.collect(bad.groupBy().count(), "offsets"))
    if not n_bad:
        return {}
    bad = a.jobs.persist(bad)
    keys = ["run", "tp", "offset"]
    acked = acks(a.ops, a.node_flags).filter(c("weak") == 0).join(_small(bad, n_bad), keys).select(
        *keys, "value", c("index").alias("idx"), "time", "op", "process", F.lit(1).alias("is_ack"),
    )
    read = _first_reads(a, bad, keys, n_bad, [*keys, "value"]).withColumn("is_ack", F.lit(0))
    detail = (
        acked.unionByName(read)
        .groupBy("run", "tp", "offset", "value")
        .agg(
            F.min("idx").alias("first"),
            F.min_by("time", "idx").alias("time"),
            F.min_by("op", "idx").alias("op"),
            F.min_by("process", "idx").alias("process"),
            F.max("is_ack").alias("acked"),
        )
        .withColumn("kind", F.lit("inconsistent-offset"))
    )
    rows = a.jobs.collect(
        _ranked(a, _named(a, detail), "kind", ["topic", "partition", "offset"], dense=True),
        "inconsistent offsets",
    )
    by_offset = defaultdict(list)
    totals = {}
    for r in rows:
        totals[r.run] = r.total
        by_offset[(r.run, r.topic, r.partition, r.offset)].append(r)
    out = {k: Found(total, []) for k, total in totals.items()}
    for (k, topic, partition, offset), rs in by_offset.items():
        rs.sort(key=lambda r: (r.first, r.value))
        w = rs[1]
        out[k].items.append({
            "topic": topic, "partition": partition, "offset": offset,
            "values": sorted(r.value for r in rs),
            "acknowledged": sorted(r.value for r in rs if r.acked),
            "index": w.first, "time": w.time, "op": w.op, "process": w.process,
        })
    return out


_SEQUENCE_ORDER = ["topic", "partition", "process", "index", "offset", "previous"]
_SEQUENCE_FIELDS = ["topic", "partition", "process", "offset", "previous", "op", "previous_op",
                    "index", "time"]


def nonmonotonic_poll(a: SparkAnalysis) -> dict[int, Found]:
    from pyspark.sql import functions as F

    polls = poll_sequences(a)
    if not polls.counts.get("nonmonotonic-poll"):
        return {}
    flagged = _named(a, polls.flags.filter(F.col("kind") == "nonmonotonic-poll"))
    rows = a.jobs.collect(_ranked(a, flagged, "kind", _SEQUENCE_ORDER), "nonmonotonic polls")
    return _found(rows, lambda r: {x: r[x] for x in _SEQUENCE_FIELDS})


def poll_skip(a: SparkAnalysis) -> dict[int, Found]:
    """Each gap (previous, offset) with the smallest known offset above
    `previous`, found by walking the known offsets downwards: a poll-skip
    when that offset is below `offset`. In a transactional run an offset
    known only by values of transactions that did not commit is not known."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c = F.col
    polls = poll_sequences(a)
    if not polls.counts.get("gap"):
        return {}
    cols = ("process", "offset", "previous", "op", "previous_op", "index", "time")
    known = a.offsets.select("run", "tp", "offset")
    t = transactions(a)
    if t is not None:
        # Not an offset that only ever held a value of a transaction that did
        # not commit: a read_committed consumer skips those (as the reference).
        keys = ["run", "tp", "value"]
        hidden = t.sends.filter(c("status") != txns.COMMITTED).select(*keys).distinct()
        known = (a.pairs.select(*keys, "offset").join(hidden, keys, "left_anti")
                 .select("run", "tp", "offset").distinct())
    known = known.select(
        "run", "tp", c("offset").alias("at"), F.lit(0).alias("is_gap"),
        *[F.lit(None).cast("long").alias(x) for x in cols],
    )
    cands = polls.flags.filter(c("kind") == "gap").select(
        "run", "tp", c("previous").alias("at"), F.lit(1).alias("is_gap"), *cols,
    )
    down = Window.partitionBy("tp").orderBy(F.desc("at"), F.desc("is_gap")).rowsBetween(
        Window.unboundedPreceding, -1
    )
    skips = (
        known.unionByName(cands)
        .withColumn("skipped", F.last(F.when(c("is_gap") == 0, c("at")), ignorenulls=True).over(down))
        .filter((c("is_gap") == 1) & c("skipped").isNotNull() & (c("skipped") < c("offset")))
        .withColumn("kind", F.lit("poll-skip"))
    )
    rows = a.jobs.collect(_ranked(a, _named(a, skips), "kind", _SEQUENCE_ORDER), "poll skips")
    return _found(rows, lambda r: {**{x: r[x] for x in _SEQUENCE_FIELDS}, "skipped": r.skipped})


def read_uncommitted(a: SparkAnalysis) -> dict[int, Found]:
    """A fetch's records at or past its high watermark, or below its log start."""
    from pyspark.sql import functions as F

    c = F.col
    if not sum(r.exact_polls for r in a.tp_rows):
        return {}
    polls = a.ev.filter((c("fn") == F_POLL) & (c("t") == T_OK) & c("log_start_offset").isNotNull())
    bad = (
        polls.select("run", "tp", "process", "op", "index", "time", "high_watermark",
                     "log_start_offset", F.explode("records").alias("rec"))
        .select("*", F.get(c("rec"), 0).alias("offset"), F.get(c("rec"), 1).alias("value"))
        .filter((c("offset") >= c("high_watermark")) | (c("offset") < c("log_start_offset")))
        .withColumn("kind", F.lit("read-uncommitted"))
    )
    rows = a.jobs.collect(
        _ranked(a, _named(a, bad), "kind", ["topic", "partition", "offset", "value", "index"]),
        "uncommitted reads")
    return _found(rows, lambda r: {
        "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
        "high_watermark": r.high_watermark, "log_start_offset": r.log_start_offset,
        "process": r.process, "op": r.op, "index": r["index"], "time": r.time})


def truncated_read(a: SparkAnalysis) -> dict[int, Found]:
    """A read at or past the final high watermark of a partition whose final reads completed."""
    from pyspark.sql import functions as F

    c = F.col
    ends = [(r.tp, r.final_high_watermark) for r in a.tp_rows
            if r.final_complete and r.final_high_watermark is not None]
    if not ends:
        return {}
    end = a.jobs.spark.createDataFrame(ends, "tp long, final_hw long")
    gone = (
        a.pairs.filter(c("reads") > 0).join(F.broadcast(end), "tp")
        .filter(c("offset") >= c("final_hw"))
        .select("run", "tp", "offset", "value", "final_hw")
    )
    n = sum(r["count"] for r in a.jobs.collect(gone.groupBy().count(), "truncated reads"))
    if not n:
        return {}
    detail = _first_reads(a, gone, ["run", "tp", "offset", "value"], n,
                          ["run", "tp", "offset", "value", "final_hw"])
    rows = a.jobs.collect(
        _ranked(a, _named(a, detail.withColumn("kind", F.lit("truncated-read"))), "kind",
                ["topic", "partition", "offset", "value"]),
        "truncated reads: details")
    return _found(rows, lambda r: {
        "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
        "final_high_watermark": r.final_hw, "index": r.idx, "time": r.time, "op": r.op,
        "process": r.process})


def nonmonotonic_send(a: SparkAnalysis) -> dict[int, Found]:
    """Each idempotent producer's acknowledged sends to a partition, in the
    order it invoked them, at increasing offsets."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c = F.col
    if a.node_flags is None:
        return {}
    sends = acks(a.ops, a.node_flags).filter(c("idem") == 1)
    inv = a.ops.filter(c("fn") == F_SEND).select("run", "op", "inv_index")
    w = Window.partitionBy("run", "tp", "nd").orderBy("inv_index")
    names = a.jobs.spark.createDataFrame(a.node_rows, "run int, nd long, node string")
    out = (
        sends.join(inv, ["run", "op"])
        .withColumn("previous_offset", F.lag("offset").over(w))
        .withColumn("previous_value", F.lag("value").over(w))
        .filter(c("offset") < c("previous_offset"))
        .join(F.broadcast(names), ["run", "nd"])
    )
    rows = a.jobs.collect(
        _ranked(a, _named(a, out.withColumn("kind", F.lit("nonmonotonic-send"))), "kind",
                ["topic", "partition", "node", "index"]),
        "send order")
    return _found(rows, lambda r: {
        "topic": r.topic, "partition": r.partition, "node": r.node, "value": r.value,
        "offset": r.offset, "previous_value": r.previous_value,
        "previous_offset": r.previous_offset, "process": r.process, "op": r.op,
        "index": r["index"], "time": r.time})


def ack_below_min_isr(a: SparkAnalysis) -> dict[int, Found]:
    """acks=all sends acknowledged within a span of too small an ISR
    (observations.py's below_min_isr), invoked at least the margin after it began."""
    from pyspark.sql import functions as F

    c = F.col
    spans = []
    for k, run in a.runs.items():
        margin = int(run.check_bound("ack_margin_s", 5.0) * NS_PER_SECOND)
        for sp in observations.below_min_isr(a.observed[k], run.min_isr()):
            tp = a.tp_index.get((k, sp["topic"], sp["partition"]))
            if tp is not None:
                spans.append((k, tp, sp["start"] + margin, sp["end"], sp["isr"], run.min_isr()))
    if not spans:
        return {}
    sp = a.jobs.spark.createDataFrame(
        spans, "srun int, stp long, from_time long, to_time long, isr array<int>, min_isr int")
    acked = acks(a.ops, a.node_flags).filter((c("weak") == 0) & c("inv_time").isNotNull())
    bad = (
        acked.join(F.broadcast(sp), (c("run") == c("srun")) & (c("tp") == c("stp"))
                   & (c("inv_time") >= c("from_time")) & (c("time") <= c("to_time")))
        .groupBy("run", "tp", "offset", "value", "index", "time", "op", "process", "inv_time")
        .agg(F.first("isr").alias("isr"), F.first("min_isr").alias("min_isr"))
        .withColumn("kind", F.lit("ack-below-min-isr"))
    )
    rows = a.jobs.collect(_ranked(a, _named(a, bad), "kind", ["topic", "partition", "offset", "value"]),
                          "acks below min ISR")
    return _found(rows, lambda r: {
        "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
        "isr": list(r.isr), "min_isr": r.min_isr, "invoked": r.inv_time,
        "process": r.process, "op": r.op, "index": r["index"], "time": r.time})


def replica_divergence(a: SparkAnalysis) -> dict[int, Found]:
    return _every_run(a, lambda k: observations.replica_divergence(a.observed[k], _complete(a, k)))


def isr_invariant(a: SparkAnalysis) -> dict[int, Found]:
    return _every_run(a, lambda k: observations.isr_invariant(a.observed[k]))


def epoch_regression(a: SparkAnalysis) -> dict[int, Found]:
    return _every_run(a, lambda k: observations.epoch_regression(a.observed[k]))


def leaderless(a: SparkAnalysis) -> dict[int, Found]:
    return _every_run(a, lambda k: observations.leaderless(a.observed[k]))


def stale_metadata(a: SparkAnalysis) -> dict[int, Found]:
    return _every_run(a, lambda k: observations.stale_metadata(a.observed[k]))


def unrecovered(a: SparkAnalysis) -> dict[int, Found]:
    """The cluster (observations.py), and partitions whose sends, invoked
    after the cluster recovered and the clients' grace, all failed."""
    from pyspark.sql import functions as F

    c = F.col
    found = {k: observations.unrecovered_cluster(a.observed[k]) for k in a.runs}
    afters = []
    for k, run in a.runs.items():
        at = observations.recovered_at(a.observed[k])
        if at is not None:
            afters.append((k, at + int(run.check_bound("recovery_grace_s", 5.0) * NS_PER_SECOND)))
    if afters:
        ah = a.jobs.spark.createDataFrame(afters, "arun int, after long")
        late = (
            a.ops.filter((c("fn") == F_SEND) & c("outcome").isNotNull())
            .join(F.broadcast(ah), (c("run") == c("arun")) & (c("inv_time") >= c("after")))
            .groupBy("run", "tp", "after", "err")
            .agg(_count_if(c("outcome") == T_OK).alias("ok"), F.count(F.lit(1)).alias("n"))
        )
        per_tp = defaultdict(lambda: {"ok": 0, "failed": 0, "errors": {}, "after": None})
        for r in a.jobs.collect(late, "sends after the recovery"):
            d = per_tp[(r.run, r.tp)]
            d["after"] = r.after
            d["ok"] += r.ok
            failed = r.n - r.ok
            d["failed"] += failed
            if failed:
                name = a.error_names.get(r.err, "unknown")
                d["errors"][name] = d["errors"].get(name, 0) + failed
        for (k, tp), d in sorted(per_tp.items(), key=lambda kv: a.tps[kv[0][1]]):
            if d["ok"] == 0 and d["failed"]:
                _run, topic, partition = a.tps[tp]
                found[k].append({"topic": topic, "partition": partition, "kind": "partition",
                                 "time": d["after"], "failed": d["failed"], "errors": d["errors"]})
    return {k: Found(len(items), items) for k, items in found.items()}


# The invariant oracles (reports/invariants.py) read only the observations,
# which the driver holds already: broker-state samples are small (about one
# per broker a second, a few KB each) and ZooKeeper's one a second. Each
# calls the reference checker's pure function on them, run by run.

def promises(a: SparkAnalysis, k: int) -> invariants.Promises:
    """What run k's configuration promises (reports/invariants.py)."""
    return invariants.Promises.of(a.runs[k].run_json, a.nemesis.get(k, []), a.stats[k]["end_time"])


def _invariant(name: str):
    """The Spark function of invariant oracle `name`: SparkAnalysis -> {run: Found}."""
    def find(a: SparkAnalysis) -> dict[int, Found]:
        return _every_run(a, lambda k: invariants.found(name, a.observed[k], promises(a, k)))
    find.__name__ = find.__qualname__ = name.replace("-", "_")
    return find


isr_behind_hw = _invariant("isr-behind-hw")
hw_regression = _invariant("hw-regression")
committed_divergence = _invariant("committed-divergence")
unclean_election = _invariant("unclean-election")
dead_isr_member = _invariant("dead-isr-member")
reassignment_unsynced = _invariant("reassignment-unsynced")


def commit_regressed(a: SparkAnalysis) -> dict[int, Found]:
    return _every_run(a, lambda k: commit_regressions(a.groups[k] or []))


def _polled(a: SparkAnalysis):
    """(run, tp, group, value) of each value a group's members' non-final polls
    returned (the group is on the poll's invocation)."""
    from pyspark.sql import functions as F

    c = F.col
    members = (a.ev.filter((c("fn") == F_POLL) & c("group").isNotNull())
               .select("run", "op", "group").distinct())
    polls = a.ops.filter((c("fn") == F_POLL) & (c("final") == 0)).select("run", "op")
    return (a.reads.join(polls, ["run", "op"]).join(members, ["run", "op"])
            .select("run", "tp", "group", "value").distinct())


def resume_past_commit(a: SparkAnalysis) -> dict[int, Found]:
    """The candidates of groups.jsonl (reports/groups.py) with an offset in
    [committed, position) that holds a value (a read, an acks=all
    acknowledgement) no poll of the group returned."""
    from pyspark.sql import functions as F

    c = F.col
    resumes = []
    for k, events in a.groups.items():
        for i, cand in enumerate(resume_candidates(events or [])):
            tp = a.tp_index.get((k, cand["topic"], cand["partition"]))
            if tp is not None:
                resumes.append((k, tp, cand["group"], cand["committed"], cand["offset"], i, cand))
    if not resumes:
        return {}
    cands = a.jobs.spark.createDataFrame(
        [r[:6] for r in resumes],
        "run int, tp long, group string, committed long, position long, cand int")
    known = a.pairs.filter((c("reads") > 0) | (F.coalesce("weak", F.lit(0)) == 0)).select(
        "run", "tp", "offset", "value")
    unpolled = (
        known.join(F.broadcast(cands), ["run", "tp"])
        .filter((c("offset") >= c("committed")) & (c("offset") < c("position")))
        .join(_polled(a), ["run", "tp", "group", "value"], "left_anti")
        .groupBy("run", "cand").agg(F.min("offset").alias("skipped"))
    )
    by_cand = {(r.run, r.cand): r.skipped for r in a.jobs.collect(unpolled, "resumed groups")}
    found = defaultdict(list)
    for k, _tp, _g, _lo, _hi, i, cand in resumes:
        if (k, i) in by_cand:
            found[k].append({**cand, "skipped": by_cand[(k, i)]})
    return {k: Found(len(items), items) for k, items in found.items()}


def group_skipped(a: SparkAnalysis) -> dict[int, Found]:
    """acks=all values the complete final reads returned below a group's
    final commit that no poll of the group returned."""
    from pyspark.sql import functions as F

    c = F.col
    finals = []
    for k, events in a.groups.items():
        complete = _complete(a, k)
        for fc in final_commits(events or []):
            tp = a.tp_index.get((k, fc["topic"], fc["partition"]))
            if tp is not None and (fc["topic"], fc["partition"]) in complete:
                finals.append((k, tp, fc["group"], fc["offset"], fc))
    if not finals:
        return {}
    fin = a.jobs.spark.createDataFrame(
        [r[:4] + (i,) for i, r in enumerate(finals)],
        "run int, tp long, group string, committed long, fin int")
    acked = acks(a.ops, a.node_flags).filter(c("weak") == 0).select("run", "tp", "value")
    skipped = (
        acked.join(_final_offsets(a), ["run", "tp", "value"]).join(F.broadcast(fin), ["run", "tp"])
        .filter(c("offset") < c("committed"))
        .join(_polled(a), ["run", "tp", "group", "value"], "left_anti")
        .select("run", "fin", "value", "offset")
    )
    found = defaultdict(list)
    for r in a.jobs.collect(skipped, "groups' skipped records"):
        k, _tp, group, committed, fc = finals[r.fin]
        found[k].append({
            "topic": fc["topic"], "partition": fc["partition"], "group": group,
            "value": r.value, "offset": r.offset, "committed": committed,
            "index": fc["index"], "time": fc["time"]})
    return {k: Found(len(items), items) for k, items in found.items()}


# Transactions (reports/transactions.py): the fact `transactions`, of the
# batch's transactional runs; a batch without any has nothing to judge.

def _count(a: SparkAnalysis, df, label: str) -> int:
    """How many rows `df` has (one small job)."""
    return sum(r["count"] for r in a.jobs.collect(df.groupBy().count(), label))


def _txn_reads(a: SparkAnalysis, kind: str, cond, extra: tuple[str, ...] = ()) -> dict[int, Found]:
    """aborted-txn-read, precommitted-read: each (value, offset) read at
    read_committed, of a value sent in a transaction, that meets `cond`
    (over the pair's first such read, `read_index`, and the transaction's
    status and commit_index), with that read; `extra`: more fields of the instance."""
    from pyspark.sql import functions as F

    c = F.col
    t = transactions(a)
    if t is None:
        return {}
    keys = ["run", "tp", "value"]
    sent = t.sends.select(*keys, "txn", c("op").alias("send_op"), "status", "commit_index",
                          "commit_time")
    flagged = t.rc_pairs.join(sent, keys).filter(cond).withColumn("idx", c("read_index"))
    n = _count(a, flagged, kind)
    if not n:
        return {}
    cols = [*keys, "offset", "txn", "send_op", "commit_index"]
    rows = a.jobs.collect(
        _ranked(a, _named(a, _witnessed(a, flagged, n, cols).withColumn("kind", F.lit(kind))), "kind",
                ["topic", "partition", "value", "offset"]), f"{kind}: details")
    return _found(rows, lambda r: {
        "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
        "txn": r.txn, "send_op": r.send_op, "index": r.idx, "time": r.time, "op": r.op,
        "process": r.process, **{x: r[x] for x in extra}})


def aborted_txn_read(a: SparkAnalysis) -> dict[int, Found]:
    from pyspark.sql import functions as F

    return _txn_reads(a, "aborted-txn-read", F.col("status") == txns.ABORTED)


def precommitted_read(a: SparkAnalysis) -> dict[int, Found]:
    from pyspark.sql import functions as F

    # Completed before the commit was invoked, by more than the receipt skew.
    return _txn_reads(a, "precommitted-read",
                      F.col("read_time") < F.col("commit_time") - txns.RECEIPT_SKEW_NS,
                      ("commit_index",))


def torn_txn(a: SparkAnalysis) -> dict[int, Found]:
    """Transactions whose ok sends to partitions with complete final reads
    the final reads returned in part; named by the partition of the
    smallest missing value, witnessed by the transaction's last event."""
    from pyspark.sql import functions as F

    c = F.col
    t = transactions(a)
    complete = [(r.tp,) for r in a.tp_rows if r.final_complete]
    if t is None or not complete:
        return {}
    done = a.jobs.spark.createDataFrame(complete, "tp long")
    read = c("offset").isNotNull()
    torn = (
        t.sends.filter(c("outcome") == T_OK).join(F.broadcast(done), "tp")
        .join(_final_offsets(a), ["run", "tp", "value"], "left")
        .groupBy("run", "txn").agg(
            F.sort_array(F.collect_list(F.when(read, c("value")))).alias("present"),
            F.sort_array(F.collect_list(F.when(~read, c("value")))).alias("missing"),
            F.min(F.when(~read, F.struct("value", "tp"))).alias("first_missing"))
        .filter((F.size("present") > 0) & (F.size("missing") > 0))
        .join(t.ends, ["run", "txn"])
        .select("run", "txn", "present", "missing", "status", "end", c("first_missing.tp").alias("tp"),
                F.lit("torn-txn").alias("kind"))
    )
    rows = a.jobs.collect(_ranked(a, _named(a, torn), "kind", ["topic", "partition", "txn"]), "torn-txn")
    return _found(rows, lambda r: {
        "topic": r.topic, "partition": r.partition, "txn": r.txn, "status": r.status,
        "present": list(r.present), "missing": list(r.missing), "index": r.end["index"],
        "time": r.end["time"], "op": r.end["op"], "process": r.end["process"]})


def txn_reorder(a: SparkAnalysis) -> dict[int, Found]:
    """A transaction's ok sends to a partition, in the order it invoked them,
    land at increasing offsets: as acknowledged, and as read at read_committed
    (the lowest offset such reads returned each value at)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c = F.col
    t = transactions(a)
    if t is None:
        return {}
    read_at = t.rc_pairs.groupBy("run", "tp", "value").agg(F.min("offset").alias("read_at"))
    w = Window.partitionBy("run", "tp", "txn").orderBy(F.coalesce("inv_index", "comp_index"))
    seen = (F.when(c("ack") < c("previous_ack"), "acknowledged")
            .when(c("read_at") < c("previous_read"), "read"))
    by_ack = c("seen") == "acknowledged"
    flagged = (
        t.sends.filter(c("outcome") == T_OK).join(read_at, ["run", "tp", "value"], "left")
        .select("*", *[F.lag(x).over(w).alias(f"previous_{y}") for x, y in (
            ("ack", "ack"), ("read_at", "read"), ("value", "value"), ("op", "op"))])
        .withColumn("seen", seen).filter(c("seen").isNotNull())
        .select("run", "tp", "txn", "value", "previous_value", "seen", "process", "op", "previous_op",
                c("comp_index").alias("index"), c("comp_time").alias("time"),
                F.when(by_ack, c("ack")).otherwise(c("read_at")).alias("offset"),
                F.when(by_ack, c("previous_ack")).otherwise(c("previous_read")).alias("previous_offset"),
                F.lit("txn-reorder").alias("kind"))
    )
    rows = a.jobs.collect(_ranked(a, _named(a, flagged), "kind", ["topic", "partition", "txn", "index"]),
                          "txn-reorder")
    return _found(rows, lambda r: {x: r[x] for x in (
        "topic", "partition", "txn", "value", "offset", "previous_value", "previous_offset", "seen",
        "process", "op", "previous_op", "index", "time")})


def _pipelines(a: SparkAnalysis) -> dict[int, tuple[dict, dict]]:
    """Run -> (its pipeline, its group's final committed offsets), for the runs with a pipeline."""
    out = {}
    for k, run in a.runs.items():
        pipe = txns.pipeline(run.run_json)
        if pipe is not None:
            out[k] = (pipe, txns.committed_offsets(a.groups[k], pipe))
    return out


def _outputs(a: SparkAnalysis, t: Txns, runs: list[int]):
    """The pipeline outputs (sends carrying `source`) of `runs` read at
    read_committed in their partition: their source (topic, partition,
    value and offset, as src_*) and `idx`, the index of their first such read."""
    from pyspark.sql import functions as F

    c = F.col
    first = t.rc_pairs.groupBy("run", "tp", "value").agg(F.min("read_index").alias("idx"))
    sent = a.ops.filter(c("fn") == F_SEND).select("run", "op", "tp", "value")
    return (t.tagged.filter(c("run").isin(runs) & c("src_value").isNotNull())
            .join(sent, ["run", "op"]).join(first, ["run", "tp", "value"])
            .select("run", "value", "idx", "src_topic", "src_partition", "src_value", "src_offset"))


def eos_missing(a: SparkAnalysis) -> dict[int, Found]:
    """Inputs the complete final reads returned below the group's final
    committed offset that no output read at read_committed came from."""
    from pyspark.sql import functions as F

    c = F.col
    t, pipes = transactions(a), _pipelines(a)
    rows = [(k, a.tp_index[(k, *tp)], *tp, ev["offset"], ev["index"], ev["time"])
            for k, (_pipe, committed) in pipes.items() for tp, ev in committed.items()
            if (k, *tp) in a.tp_index and tp in _complete(a, k)]
    if t is None or not rows:
        return {}
    fin = a.jobs.spark.createDataFrame(
        rows, "run int, tp long, topic string, partition int, committed long, cindex long, ctime long")
    made = _outputs(a, t, list(pipes)).select(
        "run", c("src_topic").alias("topic"), c("src_partition").alias("partition"),
        c("src_value").alias("value"))
    missing = (
        _final_offsets(a).join(F.broadcast(fin), ["run", "tp"]).filter(c("offset") < c("committed"))
        .join(made, ["run", "topic", "partition", "value"], "left_anti")
        .withColumn("kind", F.lit("eos-missing"))
    )
    found = a.jobs.collect(_ranked(a, missing, "kind", ["topic", "partition", "offset", "value"]),
                           "eos-missing")
    return _found(found, lambda r: {
        "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
        "group": pipes[r.run][0]["group"], "committed": r.committed, "index": r.cindex,
        "time": r.ctime})


def eos_duplicate(a: SparkAnalysis) -> dict[int, Found]:
    """Inputs two outputs read at read_committed came from, or one while the
    input is at or past the group's final committed offset; witnessed by the
    first read of the second output to be read (of the only one)."""
    from pyspark.sql import functions as F

    c = F.col
    t, pipes = transactions(a), _pipelines(a)
    if t is None or not pipes:
        return {}
    firsts = F.sort_array(F.collect_list(F.struct("idx", "value")))
    inputs = (_outputs(a, t, list(pipes))
              .groupBy("run", c("src_topic").alias("topic"), c("src_partition").alias("partition"),
                       c("src_value").alias("value"))
              .agg(firsts.alias("firsts"), F.min("src_offset").alias("offset")))
    rows = [(k, *tp, ev["offset"]) for k, (_pipe, committed) in pipes.items()
            for tp, ev in committed.items()]
    if rows:
        fin = a.jobs.spark.createDataFrame(rows, "run int, topic string, partition int, committed long")
        inputs = inputs.join(F.broadcast(fin), ["run", "topic", "partition"], "left")
    else:
        inputs = inputs.withColumn("committed", F.lit(None).cast("long"))
    dups = (
        inputs.filter((F.size("firsts") > 1) | (c("offset") >= c("committed")))
        .select("run", "topic", "partition", "value", "offset", "committed",
                F.sort_array(c("firsts.value")).alias("outputs"),
                F.element_at("firsts", F.least(F.size("firsts"), F.lit(2)))["idx"].alias("idx"))
    )
    n = _count(a, dups, "eos-duplicate")
    if not n:
        return {}
    cols = ["run", "topic", "partition", "value", "offset", "committed", "outputs"]
    found = a.jobs.collect(
        _ranked(a, _witnessed(a, dups, n, cols).withColumn("kind", F.lit("eos-duplicate")), "kind",
                ["topic", "partition", "value"]), "eos-duplicate: details")
    return _found(found, lambda r: {
        "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
        "outputs": list(r.outputs), "group": pipes[r.run][0]["group"], "committed": r.committed,
        "index": r.idx, "time": r.time, "op": r.op, "process": r.process})


# ----------------------------------------------------------------------------- the figures

def counts(a: SparkAnalysis) -> dict[int, dict]:
    """summary.json's counts by outcome, acknowledged and records, per run (no job)."""
    out = {k: empty_counts() for k in a.runs}
    for r in a.tp_rows:
        c = out[r.run]
        for fn in CLIENT_FUNCTIONS:
            for o in ("ok", "fail", "info", "pending"):
                c[fn][o] += r[f"{fn}_{o}"]
        c["acknowledged"] += r.acknowledged
        c["records"] += r.records
    return out


def timeline_and_latency(a: SparkAnalysis) -> dict[int, tuple[list, dict]]:
    """Per second of completion: outcomes, availability, p50 and p99; per function: latency of ok ops.

    One job, two groupings of the completed ops: (run, function) and
    (run, function, second); percentile_approx keeps a summary per group.
    """
    from pyspark.sql import functions as F

    c = F.col
    ok = c("outcome") == T_OK
    done = a.ops.filter(c("outcome").isNotNull()).select(
        "run", "fn", "outcome", F.expr(f"comp_time div {NS_PER_SECOND}").alias("second"),
        F.when(ok & c("inv_time").isNotNull(), c("comp_time") - c("inv_time")).alias("lat"),
    )
    rows = a.jobs.collect(
        done.groupingSets([["run", "fn"], ["run", "fn", "second"]], "run", "fn", "second").agg(
            F.grouping("second").alias("g_second"),
            *[_count_if(c("outcome") == code).alias(name) for code, name in OUTCOMES.items()],
            F.count("lat").alias("lat_count"),
            F.max("lat").alias("lat_max"),
            F.percentile_approx("lat", [p for p, _ in PERCENTILES], PERCENTILE_ACCURACY).alias("pct"),
        ),
        "timeline and latency",
    )
    empty = {"count": 0, **{name: None for _, name in PERCENTILES}, "max_ns": None}
    latency = {k: {fn: dict(empty) for fn in CLIENT_FUNCTIONS} for k in a.runs}
    seconds = defaultdict(dict)  # run -> second -> timeline row
    for r in rows:
        fn = F_NAMES[r.fn]
        if r.g_second:  # per function
            if r.lat_count:
                latency[r.run][fn].update(count=r.lat_count, max_ns=r.lat_max,
                                          **dict(zip((name for _, name in PERCENTILES), r.pct)))
            continue
        row = seconds[r.run].get(r.second)
        if row is None:
            row = seconds[r.run][r.second] = {"second": r.second}
            for name in CLIENT_FUNCTIONS:
                row.update({f"{name}_ok": 0, f"{name}_fail": 0, f"{name}_info": 0,
                            f"{name}_p50_ns": None, f"{name}_p99_ns": None})
        for o in ("ok", "fail", "info"):
            row[f"{fn}_{o}"] = r[o]
        if r.lat_count:
            row[f"{fn}_p50_ns"], row[f"{fn}_p99_ns"] = r.pct[0], r.pct[2]
    out = {}
    for k in a.runs:
        timeline = [seconds[k][s] for s in sorted(seconds[k])]
        for row in timeline:
            sent = row["send_ok"] + row["send_fail"] + row["send_info"]
            row["availability"] = None if sent == 0 else row["send_ok"] / sent
        out[k] = (timeline, latency[k])
    return out


def errors_and_windows(a: SparkAnalysis) -> dict[int, tuple[dict, list]]:
    """Errors by kind over the run, and the fault windows with the outcomes
    and errors of the ops completed inside each.

    Window membership is a range condition; to keep the join an equi-join,
    each window is listed under every second it covers and matched with
    completions of that second, then the exact bounds are checked.
    """
    from pyspark.sql import functions as F

    c = F.col
    windows = {k: fault_windows(a.nemesis[k], a.stats[k]["end_time"]) for k in a.runs}
    comps = a.ops.filter(c("outcome").isNotNull()).select(
        "run", "fn", c("outcome").alias("t"), c("comp_time").alias("time"),
        F.when(c("outcome") != T_OK, c("err")).alias("err"),
    )
    overall = (
        comps.filter(c("t") != T_OK)
        .groupBy("run", "fn", "t", "err")
        .count()
        .withColumn("window", F.lit(-1))
    )
    buckets = [
        (k, w["id"], w["start"], w["stop"], sec)
        for k, ws in windows.items()
        for w in ws
        for sec in range(w["start"] // NS_PER_SECOND, w["stop"] // NS_PER_SECOND + 1)
    ]
    parts = [overall]
    if buckets:
        wdf = a.jobs.spark.createDataFrame(
            buckets, "wrun int, window int, start long, stop long, wsecond long"
        )
        inside = (
            comps.withColumn("second", F.expr(f"time div {NS_PER_SECOND}"))
            .join(
                F.broadcast(wdf),
                (c("run") == c("wrun")) & (c("second") == c("wsecond"))
                & (c("time") >= c("start")) & (c("time") <= c("stop")),
            )
            .groupBy("run", "fn", "t", "err", "window")
            .count()
        )
        parts.append(inside.select(*overall.columns))
    rows = a.jobs.collect(reduce(lambda x, y: x.unionByName(y), parts), "errors and fault windows")
    errors = {k: {fn: {"fail": {}, "info": {}} for fn in CLIENT_FUNCTIONS} for k in a.runs}
    for ws in windows.values():
        for w in ws:
            w["ops"] = {fn: {o: 0 for o in ("ok", "fail", "info")} for fn in CLIENT_FUNCTIONS}
            w["errors"] = {fn: {"fail": {}, "info": {}} for fn in CLIENT_FUNCTIONS}
    for r in rows:
        fn, outcome = F_NAMES[r.fn], OUTCOMES[r.t]
        if r.window < 0:
            by_error = errors[r.run][fn][outcome]
        else:
            w = windows[r.run][r.window]
            w["ops"][fn][outcome] += r["count"]
            if outcome == "ok":
                continue
            by_error = w["errors"][fn][outcome]
        # (no error and the error "unknown" are one entry)
        error = a.error_names.get(r.err, "unknown")
        by_error[error] = by_error.get(error, 0) + r["count"]
    return {k: (errors[k], windows[k]) for k in a.runs}


def idempotent_producers(a: SparkAnalysis) -> dict[int, int]:
    """How many idempotent producer instances got an ok send, per run (the
    input of nonmonotonic-send: summary.json `oracles`)."""
    from pyspark.sql import functions as F

    if a.node_flags is None:
        return {}
    sends = acks(a.ops, a.node_flags).filter(F.col("idem") == 1)
    rows = a.jobs.collect(sends.groupBy("run").agg(F.countDistinct("nd").alias("n")),
                          "idempotent producers")
    return {r.run: r.n for r in rows}


def _same(names: dict, code: int, name, what: str) -> None:
    """Record a code's name; two names of one code (a 64-bit hash collision) cannot be told apart."""
    seen = names.setdefault(code, name)
    if seen != name:
        raise RuntimeError(f"{what} code collision: {seen!r} and {name!r}")


def _decodable_prefix(data: bytes, limit: int = 200) -> str:
    for cut in range(0, 4):
        try:
            return data[: len(data) - cut].decode("utf-8")[:limit]
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="ignore")[:limit]
