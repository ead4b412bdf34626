"""The Spark checker: anomalies.md over histories of any size.

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
  ops --(group by function and second)--> timeline, latency percentiles
  ops + fault windows --(group by error)--> errors, what failed in each window
  pairs --(group by partition, value: no shuffle; join the sends not ok)-->
                        lost, unseen, duplicate, aborted-read, phantom-read
                        (resurrected: a value sent to another incarnation)
  pairs --(group by partition, offset)--> inconsistent-offset, and the offsets
                        known to hold a value
  poll ops --(window per partition and process, in index order)--> re-seeks,
                        nonmonotonic-poll, gaps (record by record only inside
                        the rare polls whose records are not consecutive)
  gaps + known offsets --(window per partition, by offset)--> poll-skip

Why it is shaped like this (a 2-core machine, >= 250k events/s the goal):
the input is read in full once, for the ops; the reads pass reads only the
records and their keys, the names pass a few columns and keeps a few rows
(a JSONL input is parsed once and cached instead). Every read is folded
into the pairs before anything else looks at it: each record is read by
several consumers, so the later groupings see a few rows per value, not per
read. Keys are
fixed-width numbers, not strings: `tp` is a 64-bit hash of (run, topic,
partition) and `err` one of the error text, with dictionaries on the driver;
`t` and `fn` code the event type and function (each name is compared once
per event). Only small sides are broadcast. Cached: the ops, the pairs and
one row per value (each read by several jobs); the jobs that list anomalies
only run when the counts say there are some. After the validation,
independent sections run as concurrent Spark jobs.

`spark-submit reports/__main__.py analyze RUN_DIR...` runs the checker on a cluster.
"""

from __future__ import annotations

import os

if __name__ == "__main__" and not __package__:
    # Run as a script (spark-submit): import the package, not this folder's modules.
    import os as _os
    import sys as _sys

    _here = _os.path.dirname(_os.path.abspath(__file__))
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
    _sys.path.insert(0, _os.path.dirname(_here))

import json
import re
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from functools import reduce

from reports.context import PER_KEY, empty_context
from reports.errors import HistoryError
from reports.groups import (commit_regressions, final_commits, read_groups,
                            resume_candidates)
from reports.groups import oracles as group_oracles
from reports.incarnations import SEPARATOR, split
from reports.observations import (annotate_windows, below_min_isr, checked, judge,
                                  read_incarnations, read_observations, recovered_at,
                                  writers_of_duplicates)
from reports.readers import RunInput, first_problem
from reports.schema import (
    CORRUPT_COLUMN,
    FUNCTIONS,
    REQUIRED_ALWAYS,
    REQUIRED_BY_KIND,
    TYPES,
    spark_problem_column,
    spark_schema,
)
from reports.summary import (
    ANOMALY_TYPES,
    CLIENT_FUNCTIONS,
    DEFAULT_MAX_INSTANCES,
    NS_PER_SECOND,
    PERCENTILES,
    Findings,
    empty_counts,
    fault_windows,
    final_reads_complete,
    sort_key,
)

# Event type codes; for completions the code is also the outcome.
T_INVOKE, T_FAIL, T_INFO, T_OK = 0, 1, 2, 3
TYPE_CODES = {"invoke": T_INVOKE, "fail": T_FAIL, "info": T_INFO, "ok": T_OK}
OUTCOMES = {T_FAIL: "fail", T_INFO: "info", T_OK: "ok"}
F_SEND, F_POLL, F_NEMESIS = 0, 1, 2
F_CODES = {"send": F_SEND, "poll": F_POLL, "nemesis": F_NEMESIS}
F_NAMES = {F_SEND: "send", F_POLL: "poll"}
# An unknown name codes as -1, which validation rejects: the codes must name every valid one.
assert set(TYPE_CODES) == set(TYPES) and set(F_CODES) == set(FUNCTIONS)

PERCENTILE_ACCURACY = 10000
# Detail joins broadcast the flagged side when it has at most this many rows.
BROADCAST_ROWS = 200_000

# Heap of a local-mode session started by get_spark (unless conf says otherwise).
LOCAL_DRIVER_MEMORY = "4g"

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    # Cached tables are kept as they are: compressing them costs more CPU than
    # the memory it saves on one machine (10M events: 4 s more for the ops).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Few, predictable stages with explicit broadcasts: re-planning at run time costs more than it saves.
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.log.level": "WARN",
    # Input splits small enough that both cores read (a 150 MB history.jsonl is
    # otherwise one 128 MB task and a small one).
    "spark.sql.files.maxPartitionBytes": "32m",
    # Spark 4's per-row shuffle checksum costs a few percent and buys nothing here.
    "spark.sql.shuffle.orderIndependentChecksum.enabled": "false",
    # The latency percentiles keep a summary per (function, second): past 128
    # groups in a task (about a minute of history) Spark would sort every op
    # instead (10M events: 6-7 s against 4.5 s). The summaries hold about
    # one number per op of the task, whatever the number of groups.
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "8192",
    # A window keeps a group's rows in a plain buffer up to this many, then in
    # a spillable sorter: each process's polls of a partition are a group of
    # tens of thousands (10M events: poll sequences 4.3-4.9 s against 4.9-5.8
    # s with Spark's 4096). A million rows of ~100 bytes is ~100 MB a task.
    "spark.sql.windowExec.buffer.in.memory.threshold": "1048576",
    # One check compiles about 200 generated classes; with Spark's default of
    # 100 cached, the next check in the JVM (the next test, the next run of a
    # batch) compiled them all again and ran them cold (10M events, third
    # check in a JVM: 63.5 s against 53.1 s). Static: set when the JVM starts.
    "spark.sql.codegen.cache.maxEntries": "1000",
}

# The JVM of a local session: a throughput collector instead of G1 (10M events:
# 46-50 s against 52 s, 87-95 CPU seconds against 101; pauses do not matter to
# a batch job). Only when get_spark starts the JVM.
LOCAL_JAVA_OPTIONS = "-XX:+UseParallelGC"

# Every driver JVM get_spark starts names the Python process that started it
# (`-Dchaoslog.checker.driver=<pid>`). A checker killed mid-check leaves its
# JVM running for minutes; harness/reaper.py kills a marked JVM whose parent
# is no longer that process.
DRIVER_MARK = "-Dchaoslog.checker.driver="


def get_spark(master: str | None = None, conf: dict | None = None, progress: bool = False):
    """A SparkSession for the checker: local[*] unless `master` (or spark-submit) says otherwise.

    If a session already exists in this process (a test fixture, a notebook),
    it is returned as it is.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("chaoslog-checker")
    if master:
        builder = builder.master(master)
    settings = {**DEFAULT_CONF, **(conf or {})}
    if not master or master.startswith("local"):
        # In local mode everything stays on loopback: no binding to, or
        # advertising of, the machine's other addresses.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.setdefault("spark.driver.host", "127.0.0.1")
        settings.setdefault("spark.driver.bindAddress", "127.0.0.1")
        # The driver is the only executor: Spark's default heap (1 GB) leaves
        # about 400 MB for cached events, and a 10M-event history then goes
        # to disk. Takes effect only when this call starts the JVM.
        settings.setdefault("spark.driver.memory", LOCAL_DRIVER_MEMORY)
        settings.setdefault("spark.driver.extraJavaOptions", LOCAL_JAVA_OPTIONS)
    settings["spark.driver.extraJavaOptions"] = " ".join(
        filter(None, [settings.get("spark.driver.extraJavaOptions"), f"{DRIVER_MARK}{os.getpid()}"]))
    if progress:
        settings["spark.ui.showConsoleProgress"] = "true"
    for k, v in settings.items():
        builder = builder.config(k, v)
    return _start_quietly(builder)


# PySpark warns of this on every job run from a thread of ours (the checker's
# concurrent sections): nothing a user can act on.
warnings.filterwarnings("ignore", message="Spark session is not provided", category=UserWarning)


def _start_quietly(builder):
    """getOrCreate, with the JVM's own output (launcher warnings, log4j's
    start-up lines, Spark's WARN lines for the rest of its life) in a log
    file instead of the user's terminal: the JVM keeps the stderr it was
    started with. Only when this call starts the JVM; the file is named on
    failure."""
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return builder.getOrCreate()
    log_path = os.path.join(tempfile.gettempdir(), f"chaoslog-spark-{os.getpid()}.log")
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log_path, "ab") as log_file:
            os.dup2(log_file.fileno(), 2)
            try:
                return builder.getOrCreate()
            finally:
                os.dup2(saved, 2)
    except Exception as e:
        raise RuntimeError(f"Spark did not start ({e}); the JVM's output is in {log_path}") from e
    finally:
        os.close(saved)


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


class SparkChecker:
    """Check a batch of runs in one Spark application; keep what reports need until `close`."""

    def __init__(self, spark, max_instances: int | None = DEFAULT_MAX_INSTANCES):
        self.spark = spark
        self.max_instances = max_instances
        self.cap = max_instances if max_instances is not None else 2**31 - 1
        self._cached = []
        self.timings: list[tuple[str, float]] = []
        self.tps: dict[int, tuple[int, str, int]] = {}  # tp -> (run, topic, partition)

    # ------------------------------------------------------------------ plumbing

    def _collect(self, df, label: str):
        """collect() a small result, remembering how long the Spark job took (see `timings`)."""
        t = time.perf_counter()
        rows = df.collect()
        self.timings.append((label, time.perf_counter() - t))
        return rows

    def _persist(self, df):
        df = df.persist()
        self._cached.append(df)
        return df

    def close(self):
        for df in self._cached:
            df.unpersist()
        self._cached = []

    def _named(self, df):
        """Add topic and partition (for output and canonical order) to a small DataFrame keyed by tp."""
        from pyspark.sql import functions as F

        return df.join(F.broadcast(self.tp_names), "tp")

    def _ranked(self, df, kind_col: str, order_cols: list[str], dense: bool = False):
        """Keep the first `cap` rows per (run, kind) in canonical order, with the kind's total."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        w = Window.partitionBy("run", kind_col).orderBy(*order_cols)
        rank = F.dense_rank() if dense else F.row_number()
        ranked = df.withColumn("rank", rank.over(w)).withColumn(
            "total", F.max("rank").over(Window.partitionBy("run", kind_col))
        )
        return ranked.filter(F.col("rank") <= self.cap)

    def _small(self, df, n: int):
        """Broadcast a side known to be small; leave large ones to a shuffle join."""
        from pyspark.sql import functions as F

        return F.broadcast(df) if n <= BROADCAST_ROWS else df

    # ------------------------------------------------------------------ input

    def _scan(self, kind: str, paths: list[str]):
        """The events of some files of one kind, explicitly typed (JSONL: bad lines kept aside)."""
        from pyspark.sql import functions as F

        read = self.spark.read
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

    def _uris(self, path) -> set[str]:
        """The ways Spark's `_metadata.file_path` may spell a file."""
        jvm = self.spark._jvm
        p = jvm.org.apache.hadoop.fs.Path(str(path))
        fs = p.getFileSystem(self.spark._jsc.hadoopConfiguration())
        uri = fs.makeQualified(p).toUri().toString()
        return {uri, re.sub(r"^file:/+", "file:/", uri), re.sub(r"^file:/+", "file:///", uri)}

    def _read_events(self, files: list[tuple[int, object]]):
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
            self._scan(kind, paths)
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
            mapping = self.spark.createDataFrame(
                [(uri, k, i) for i, (k, hf) in enumerate(files) for uri in self._uris(hf.path)],
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
        # is not gets a record-by-record look in _sequence_anomalies.
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
            "log_start_offset", "group",
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

    def _renamed(self, ev):
        """The sends and polls of topics deleted and created again, named by
        their incarnation as reports/incarnations.py attributes them: a send
        by when it completed, a poll by the send of its first record's value
        (else by when it completed). Only those topics' events take the extra
        groupings."""
        from pyspark.sql import functions as F

        c = F.col
        recreated = reduce(lambda a, b: a | b, [
            (c("run") == k) & (c("topic") == topic)
            for k, inc in self.incarnations.items() for topic in inc.created])
        recreated = recreated & c("fn").isin(F_SEND, F_POLL)
        theirs, others = ev.filter(recreated), ev.filter(~F.coalesce(recreated, F.lit(False)))
        first = F.when((c("fn") == F_POLL) & (c("t") == T_OK) & ~F.coalesce(c("final"), F.lit(False)),
                       F.get(F.get(c("records"), 0), 1))
        ops = theirs.groupBy("run", "topic", "op").agg(
            F.max("time").alias("at"), F.max("fn").alias("ofn"), F.max("value").alias("sent"),
            F.max(first).alias("first_value"))
        by_time = F.lit(0)
        for run, inc in self.incarnations.items():
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

    def _names(self, ev, firsts: set[int]):
        """What the ops carry only as codes, from the few events that tell it.

        The name of each partition key (`tp`: the events at `firsts`, the
        first index of each), the text of each error code (`err`), and the
        nemesis events. Strings stay out of the ops: grouping and caching
        64-bit codes is cheaper; and a filter before the distinct is much
        cheaper than a distinct of every event.
        """
        from pyspark.sql import functions as F

        c = F.col
        nemesis = c("fn") == F_NEMESIS
        rows = self._collect(
            ev.filter(nemesis | c("error").isNotNull() | c("index").isin(*sorted(firsts))).select(
                "run", "tp", "topic", "partition", "err", "error", "nemesis",
                F.when(nemesis, c("index")).alias("n_index"), F.when(nemesis, c("time")).alias("n_time"),
            ).distinct(),
            "partitions, errors and nemesis",
        )
        self.error_names: dict[int, str] = {}
        self.nemesis_events: dict[int, list] = defaultdict(list)
        for r in rows:
            if r.topic is not None and r.partition is not None:
                _same(self.tps, r.tp, (r.run, r.topic, r.partition), "partition")
            if r.err is not None:
                _same(self.error_names, r.err, r.error, "error")
            if r.n_index is not None:
                self.nemesis_events[r.run].append({"index": r.n_index, "time": r.n_time, **json.loads(r.nemesis)})

    def _node_flags(self, ev, runs: dict[int, RunInput]) -> None:
        """Which producer instances (a send's `node`, coded as `nd`) were
        weak (acks 0 or 1: their acknowledgements bind nothing) or
        idempotent, per run.json's workload.clients: `node_flags`, a small
        table joined to the sends (None when no run names its clients)."""
        from pyspark.sql import functions as F

        self.node_flags = None
        self.idempotent_nodes = {k: 0 for k in runs}
        named = {k: (run.weak_nodes(), run.idempotent_nodes()) for k, run in runs.items()}
        if not any(w or i for w, i in named.values()):
            return
        rows = self._collect(
            ev.filter(F.col("nd").isNotNull()).select("run", "nd", "node").distinct(),
            "producer instances",
        )
        self._node_rows = [(r.run, r.nd, r.node) for r in rows]
        flags = [(r.run, r.nd, int(r.node in named[r.run][0]), int(r.node in named[r.run][1]))
                 for r in rows if r.run in named]
        if flags:
            self.node_flags = self.spark.createDataFrame(flags, "run int, nd long, weak int, idem int")

    def _flagged_sends(self, sends):
        """`sends` (ops of sends) with their instance's weak and idem flags (0 when unnamed)."""
        from pyspark.sql import functions as F

        if self.node_flags is None:
            return sends.withColumn("weak", F.lit(0)).withColumn("idem", F.lit(0))
        return sends.join(F.broadcast(self.node_flags), ["run", "nd"], "left").withColumn(
            "weak", F.coalesce("weak", F.lit(0))).withColumn("idem", F.coalesce("idem", F.lit(0)))

    def _partitions(self, ops, runs: dict[int, RunInput]):
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
        rows = self._collect(
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
        errors = {k: self._first_problem(runs[k], n) for k, n in sorted(bad.items()) if n}
        return stats, errors, rows

    def _first_problem(self, run: RunInput, n: int) -> HistoryError:
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
                self._scan(hf.kind, [str(hf.path)]).select(spark_problem_column().alias("problem"))
                .filter(F.col("problem").isNotNull()).limit(1).collect()
            )
            if example:
                return HistoryError(hf.path, None, f"{n} malformed events, e.g.: {example[0].problem}")
        return HistoryError(run.files[0].path, None, f"{n} malformed events")

    # ---------------------------------------------------------------- derived

    def _ops(self, ev):
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

    def _reads(self, ev):
        """Every record an ok poll returned, with the poll's process, op, index and time."""
        from pyspark.sql import functions as F

        return (
            ev.filter((F.col("fn") == F_POLL) & (F.col("t") == T_OK))
            .select("run", "tp", "process", "op", "index", "time",
                    F.posexplode("records").alias("pos", "rec"))
            .select("run", "tp", "process", "op", "index", "time", "pos",
                    F.get(F.col("rec"), 0).alias("offset"), F.get(F.col("rec"), 1).alias("value"))
        )

    # ------------------------------------------------------------------ check

    def check(self, runs: list[RunInput]) -> list[Findings | HistoryError]:
        """Findings for each run, or the HistoryError that stopped it, in input order."""
        from pyspark.sql import functions as F

        todo = dict(enumerate(runs))
        files = [(k, hf) for k, run in todo.items() for hf in run.files]
        self.incarnations = {k: read_incarnations(run.run_dir) for k, run in todo.items()}
        ev = self._read_events(files)
        if any(self.incarnations.values()):
            ev = self._renamed(ev)
        if any(hf.kind == "jsonl" for _, hf in files):
            # Parsing JSON costs more than keeping its result: parse once. A
            # Parquet input is read again by each pass instead, only the
            # columns that pass needs.
            ev = self._persist(ev)
        # The one pass over every event, validation included (see the module docstring).
        ops = self._persist(self._ops(ev))
        stats, errors, tp_rows = self._partitions(ops, todo)
        self._names(ev, {r.first_index for r in tp_rows if r.first_index is not None})
        tp_rows = [r for r in tp_rows if r.tp in self.tps]  # (not the nemesis's)
        good = [k for k in todo if k not in errors]
        results: dict[int, Findings | HistoryError] = dict(errors)
        if not good:
            return [results[k] for k in range(len(runs))]
        if errors:
            ev = ev.filter(F.col("run").isin(good))
            ops = ops.filter(F.col("run").isin(good))
        self._node_flags(ev, {k: todo[k] for k in good})
        self.ev = ev.drop("bad", "topic", "partition", "node")
        self.ops = ops.filter(F.col("fn").isin(F_SEND, F_POLL)).drop("events", "bad", "end_time")
        self.tp_names = self.spark.createDataFrame(
            [(tp, run, topic, partition) for tp, (run, topic, partition) in self.tps.items()],
            "tp long, trun int, topic string, partition int",
        ).drop("trun")
        # Not cached: read again only by the rare jobs that list an anomaly's reads.
        self.reads = self._reads(self.ev)
        self.pairs = self._persist(self._pairs())

        findings = {}
        for k in good:
            run = todo[k]
            f = Findings(run.run_id, run.run_json, run.idempotent, "spark")
            f.events, f.end_time = stats[k]["events"], stats[k]["end_time"]
            f.warnings = list(run.warnings)
            f.counts = empty_counts()
            f.windows = fault_windows(self.nemesis_events[k], f.end_time)
            findings[k] = f
        self._fill_partitions(findings, tp_rows)

        offsets = self._offsets()
        # Independent sections (each fills its own fields of the findings) run
        # as concurrent Spark jobs: one job's fixed costs and last straggling
        # task overlap with another's work, so both cores stay busy.
        observed = {k: read_observations(todo[k].run_dir, todo[k].run_json.get("checks"))
                    for k in good}
        groups = {k: read_groups(todo[k].run_dir) for k in good}
        sections = [
            lambda: self._timeline_and_latency(findings),
            lambda: self._value_anomalies(findings, tp_rows),
            lambda: self._errors_and_windows(findings),
            lambda: self._offset_anomalies(findings, offsets),
            lambda: self._sequence_anomalies(findings, offsets),
            lambda: self._read_anomalies(findings, tp_rows),
            lambda: self._send_order(findings),
            lambda: self._observed(findings, observed, todo),
            lambda: self._groups(findings, groups),
        ]
        from pyspark.util import inheritable_thread_target

        with ThreadPoolExecutor(len(sections)) as pool:
            # (the caller's job group and other local properties go along)
            for done in [pool.submit(inheritable_thread_target(s)) for s in sections]:
                done.result()
        for k, f in findings.items():
            annotate_windows(observed[k], f.windows)
            f.idempotent_duplicates -= writers_of_duplicates(observed[k], f.anomalies["duplicate"])
            f.oracles = checked(
                observed[k], exact_polls=sum(r.exact_polls for r in tp_rows if r.run == k),
                idempotent_producers=self.idempotent_nodes.get(k, 0),
                final_complete=bool(f.partitions) and final_reads_complete(f.partitions))
            f.oracles.update(group_oracles(groups[k]))
        for f in findings.values():
            c = f.counts
            c["lost"] = f.anomaly_counts["lost"]
            c["unseen"] = f.anomaly_counts["unseen"]
            c["duplicated"] = f.anomaly_counts["duplicate"]
            for kind in ANOMALY_TYPES:
                f.anomalies[kind].sort(key=sort_key(kind))
                del f.anomalies[kind][self.cap:]  # (the observed ones are not ranked in Spark)
        results.update(findings)
        return [results[k] for k in range(len(runs))]

    # -------------------------------------------------------------- sections

    def _fill_partitions(self, findings, tp_rows):
        """Counts by outcome and the per-partition figures, from the rows of `_partitions`."""
        per_run = defaultdict(list)
        for r in tp_rows:
            f = findings.get(r.run)
            if f is None:  # a run that failed validation
                continue
            for fn in CLIENT_FUNCTIONS:
                for o in ("ok", "fail", "info", "pending"):
                    f.counts[fn][o] += r[f"{fn}_{o}"]
            f.counts["acknowledged"] += r.acknowledged
            f.counts["records"] += r.records
            _run, topic, partition = self.tps[r.tp]
            per_run[r.run].append({
                "topic": topic, "partition": partition,
                **{k: r[k] for k in ("sends", "acknowledged", "polls", "records", "max_ack_offset",
                                     "max_read_offset", "final_polls")},
                "final_complete": bool(r.final_complete),
                "final_high_watermark": r.final_high_watermark,
            } | ({"deleted": True} if self.incarnations[r.run].is_deleted(topic) else {}))
        for k, f in findings.items():
            f.partitions = sorted(per_run[k], key=lambda p: (p["topic"], p["partition"]))

    def _timeline_and_latency(self, findings):
        """Per second of completion: outcomes, availability, p50 and p99; per function: latency of ok ops.

        One job, two groupings of the completed ops: (run, function) and
        (run, function, second); percentile_approx keeps a summary per group.
        """
        from pyspark.sql import functions as F

        c = F.col
        ok = c("outcome") == T_OK
        done = self.ops.filter(c("outcome").isNotNull()).select(
            "run", "fn", "outcome", F.expr(f"comp_time div {NS_PER_SECOND}").alias("second"),
            F.when(ok & c("inv_time").isNotNull(), c("comp_time") - c("inv_time")).alias("lat"),
        )
        rows = self._collect(
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
        for f in findings.values():
            f.latency = {fn: dict(empty) for fn in CLIENT_FUNCTIONS}
        seconds = defaultdict(dict)  # run -> second -> timeline row
        for r in rows:
            f, fn = findings[r.run], F_NAMES[r.fn]
            if r.g_second:  # per function
                if r.lat_count:
                    f.latency[fn].update(count=r.lat_count, max_ns=r.lat_max,
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
        for k, f in findings.items():
            f.timeline = [seconds[k][s] for s in sorted(seconds[k])]
            for row in f.timeline:
                sent = row["send_ok"] + row["send_fail"] + row["send_info"]
                row["availability"] = None if sent == 0 else row["send_ok"] / sent

    def _errors_and_windows(self, findings):
        """Errors by kind over the run, and outcomes and errors inside each fault window.

        Window membership is a range condition; to keep the join an equi-join,
        each window is listed under every second it covers and matched with
        completions of that second, then the exact bounds are checked.
        """
        from pyspark.sql import functions as F

        c = F.col
        comps = self.ops.filter(c("outcome").isNotNull()).select(
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
            for k, f in findings.items()
            for w in f.windows
            for sec in range(w["start"] // NS_PER_SECOND, w["stop"] // NS_PER_SECOND + 1)
        ]
        parts = [overall]
        if buckets:
            wdf = self.spark.createDataFrame(
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
        rows = self._collect(reduce(lambda a, b: a.unionByName(b), parts), "errors and fault windows")
        for f in findings.values():
            f.errors = {fn: {"fail": {}, "info": {}} for fn in CLIENT_FUNCTIONS}
            for w in f.windows:
                w["ops"] = {fn: {o: 0 for o in ("ok", "fail", "info")} for fn in CLIENT_FUNCTIONS}
                w["errors"] = {fn: {"fail": {}, "info": {}} for fn in CLIENT_FUNCTIONS}
        for r in rows:
            f = findings[r.run]
            fn, outcome = F_NAMES[r.fn], OUTCOMES[r.t]
            if r.window < 0:
                by_error = f.errors[fn][outcome]
            else:
                w = f.windows[r.window]
                w["ops"][fn][outcome] += r["count"]
                if outcome == "ok":
                    continue
                by_error = w["errors"][fn][outcome]
            # (no error and the error "unknown" are one entry)
            error = self.error_names.get(r.err, "unknown")
            by_error[error] = by_error.get(error, 0) + r["count"]

    def acks(self):
        """Every acknowledged send: its offset and value, the op that got the
        ack (index, time), its invocation time and its producer's flags (weak:
        acks 0 or 1; idem: idempotent)."""
        from pyspark.sql import functions as F

        c = F.col
        sends = self.ops.filter((c("fn") == F_SEND) & (c("outcome") == T_OK))
        return self._flagged_sends(sends).select(
            "run", "tp", c("ack").alias("offset"), "value", c("comp_index").alias("index"),
            c("comp_time").alias("time"), "op", "process", "inv_time", "nd", "weak", "idem",
        )

    def _pairs(self):
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
        acks = self.acks().select("run", "tp", "offset", "value", F.lit(1).alias("a"),
                                  F.lit(None).cast("long").alias("index"), "weak", "idem")
        reads = self.reads.select("run", "tp", "offset", "value", F.lit(0).alias("a"), "index",
                                  F.lit(None).cast("int").alias("weak"),
                                  F.lit(None).cast("int").alias("idem"))
        both = acks.unionByName(reads).repartition("run", "tp", "value")
        return both.groupBy("run", "tp", "offset", "value").agg(
            F.max("a").alias("acked"), _count_if(c("a") == 0).alias("reads"),
            F.min("index").alias("read_index"),  # (acknowledgements have none)
            F.max("weak").alias("weak"), F.max("idem").alias("idem"),
        )

    def _first_reads(self, flagged, on: list[str], n: int, cols: list[str]):
        """The pairs read at least once that match `flagged` (n rows) on `on`:
        `cols`, and `idx`, time, op and process of each pair's first read.

        A flagged value or offset has one pair or a few. The first read's
        index is a completion's (a poll that read): the cached ops find its
        op, no pass over the input.
        """
        from pyspark.sql import functions as F

        c = F.col
        read = self.pairs.filter(c("reads") > 0).join(self._small(flagged, n), on).select(
            *cols, c("read_index").alias("idx"))
        at = self.ops.select("run", c("comp_index").alias("idx"), c("comp_time").alias("time"), "op", "process")
        return at.join(self._small(read, 4 * n), ["run", "idx"]).select(*cols, "idx", "time", "op", "process")

    def _sends(self):
        """Each send's value with the op that sent it (for the details of value anomalies)."""
        from pyspark.sql import functions as F

        c = F.col
        return self.ops.filter(c("fn") == F_SEND).select(
            "run", "tp", "value", c("op").alias("send_op"), c("process").alias("send_process"),
            c("comp_time").alias("send_time"), c("comp_index").alias("send_index"),
        )

    def _value_anomalies(self, findings, tp_rows):
        """Per (partition, value): lost, unseen, duplicate, aborted-read, phantom-read, resurrected.

        Every anomaly here is of a value acknowledged or read, so of a value in
        the pairs: the pairs grouped by value (no shuffle: see `_pairs`) meet
        the sends that were not ok, to tell aborted from phantom reads. Only
        values with something to report meet their send op again.
        """
        from pyspark.sql import functions as F

        c = F.col
        keys = ["run", "tp", "value"]
        not_ok = (
            self._flagged_sends(
                self.ops.filter((c("fn") == F_SEND) & (c("outcome").isNull() | (c("outcome") != T_OK))))
            .groupBy(*keys)
            .agg(F.max("outcome").alias("not_ok_outcome"), F.lit(1).alias("not_ok"),
                 F.max("idem").alias("not_ok_idem"))
        )
        n_not_ok = sum(r.send_fail + r.send_info + r.send_pending for r in tp_rows)
        vals = (
            self.pairs.groupBy(*keys)
            .agg(
                F.max("acked").alias("acked"),
                F.max(F.when(c("acked") == 1, c("offset"))).alias("ack"),
                F.sum("reads").alias("reads"),
                F.min(F.when(c("reads") > 0, c("offset"))).alias("rmin"),
                F.max(F.when(c("reads") > 0, c("offset"))).alias("rmax"),
                F.max("weak").alias("weak"), F.max("idem").alias("idem"),
            )
            .join(self._small(not_ok, n_not_ok), keys, "left")
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
        top = self.spark.createDataFrame(
            [(r.tp, r.max_read_offset) for r in tp_rows], "tp long, max_read long"
        )
        vals = vals.join(F.broadcast(top), "tp", "left")
        unread_ack = (c("outcome") == T_OK) & (c("reads") == 0)
        lost = unread_ack & c("max_read").isNotNull() & (c("max_read") >= c("ack"))
        unsent_read = (c("reads") > 0) & (c("sent") == 0)
        deleted = [tp for tp, (k, topic, _p) in self.tps.items() if self.incarnations[k].is_deleted(topic)]
        # Never read, then gone with its topic (reports/incarnations.py): not lost or unseen.
        gone = unread_ack & c("tp").isin(deleted) if deleted else F.lit(False)
        vals = self._other_incarnation(vals, unsent_read)
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
        # Cached (about one row per value): the counts and the lists below read it.
        vals = self._persist(vals)
        counts = self._collect(
            vals.groupBy("run").agg(
                _count_if(c("reads") > 0).alias("read"),
                *[_count_if(c("vkind") == k).alias(k) for k in
                  ("lost", "unseen", "lost-unreplicated", "phantom-read", "aborted-read", "resurrected")],
                _count_if(c("dup")).alias("duplicate"),
                _count_if(c("dup") & (c("idem") == 1)).alias("idem_duplicate"),
            ),
            "values",
        )
        n_lu = n_flag = 0
        for r in counts:
            findings[r.run].counts["read"] = r.read
            findings[r.run].idempotent_duplicates = r.idem_duplicate
            n_lu += r.lost + r.unseen + r["lost-unreplicated"]
            n_flag += r["phantom-read"] + r["aborted-read"] + r.resurrected + r.duplicate
        if not (n_lu or n_flag):
            return
        # Only the values with something to report, with their send op if any.
        flagged = vals.filter(c("vkind").isNotNull() | c("dup"))
        keys = ["run", "tp", "value"]
        sent = self._sends().join(self._small(flagged.select(*keys), n_lu + n_flag), keys)
        flagged = self._persist(
            self._named(flagged.join(self._small(sent, n_lu + n_flag), keys, "left"))
        )
        if n_lu:
            # lost and unseen: everything is on the value row.
            lu = self._collect(
                self._ranked(flagged.filter(c("vkind").isin("lost", "unseen", "lost-unreplicated")),
                             "vkind", ["topic", "partition", "ack", "value"]),
                "lost and unseen",
            )
            for r in lu:
                f = findings[r.run]
                f.anomaly_counts[r.vkind] = r.total
                f.anomalies[r.vkind].append({
                    "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.ack,
                    "process": r.send_process, "op": r.send_op, "index": r.send_index,
                    "time": r.send_time,
                })
        if not n_flag:
            return
        # duplicate, aborted-read, phantom-read: need each offset the value was read at.
        reads_of = ("phantom-read", "aborted-read", "resurrected")
        keys = flagged.filter(c("vkind").isin(*reads_of) | c("dup")).select(
            "tp", "value", "topic", "partition", "vkind", c("dup").cast("int").alias("dup"),
            F.coalesce("send_op", "x_send_op").alias("send_op"), "x_topic", c("idem").alias("value_idem"),
        )
        per_offset = self._persist(self._first_reads(
            keys, ["tp", "value"], n_flag,
            ["run", "tp", "topic", "partition", "value", "offset", "vkind", "dup", "send_op",
             "x_topic", "value_idem"]))
        single = self._ranked(
            per_offset.filter(c("vkind").isin(*reads_of)), "vkind",
            ["topic", "partition", "value", "offset"],
        )
        dups = self._ranked(
            per_offset.filter(c("dup") == 1).withColumn("vkind", F.lit("duplicate")),
            "vkind", ["topic", "partition", "value"], dense=True,
        )
        dup_rows = defaultdict(list)
        for r in self._collect(single.unionByName(dups), "duplicate, aborted and phantom reads"):
            f = findings[r.run]
            f.anomaly_counts[r.vkind] = r.total
            if r.vkind == "duplicate":
                dup_rows[(r.run, r.topic, r.partition, r.value)].append(r)
                continue
            inst = {"topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
                    "index": r.idx, "time": r.time, "op": r.op, "process": r.process}
            if r.vkind != "phantom-read":
                inst["send_op"] = r.send_op
            if r.vkind == "resurrected":
                inst["acknowledged_in"] = r.x_topic
            f.anomalies[r.vkind].append(inst)
        for (k, topic, partition, value), rs in dup_rows.items():
            rs.sort(key=lambda r: (r.idx, r.offset))
            w = rs[1]
            findings[k].anomalies["duplicate"].append({
                "topic": topic, "partition": partition, "value": value,
                "offsets": sorted(r.offset for r in rs), "index": w.idx, "time": w.time,
                "op": w.op, "process": w.process, "send_op": rs[0].send_op,
                "idempotent": rs[0].value_idem == 1,
            })

    def _other_incarnation(self, vals, unsent_read):
        """`vals` with, for a value read where nothing sent it, what another
        incarnation of its topic (reports/incarnations.py) says: `x_kind`
        resurrected (acknowledged in an earlier one), aborted-read (failed
        there) or excused (its answer may have come from either); `x_send_op`
        and `x_topic` name that send. Null columns when no topic was re-created."""
        from pyspark.sql import functions as F

        c = F.col
        rows = [(tp, k, *split(topic), partition, topic) for tp, (k, topic, partition) in self.tps.items()
                if split(topic)[0] in self.incarnations[k].created]
        if not rows:
            return (vals.withColumn("x_kind", F.lit(None).cast("string"))
                    .withColumn("x_send_op", F.lit(None).cast("long"))
                    .withColumn("x_topic", F.lit(None).cast("string")))
        itp = F.broadcast(self.spark.createDataFrame(
            rows, "tp long, irun int, base string, k int, partition int, name string"))
        read = (vals.filter(unsent_read).select("run", "tp", "value")
                .join(itp, "tp").drop("irun", "name"))
        sent = (self.ops.filter(c("fn") == F_SEND)
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

    def _take(self, findings, kind: str, rows, make) -> None:
        """Instances of `kind` from collected rows ranked by `_ranked` (with `total`)."""
        for r in rows:
            f = findings[r.run]
            f.anomaly_counts[kind] = r.total
            f.anomalies[kind].append(make(r))

    def _read_anomalies(self, findings, tp_rows):
        """read-uncommitted (a fetch's records at or past its high watermark, or
        below its log start) and truncated-read (a read at or past the final
        high watermark of a partition whose final reads completed)."""
        from pyspark.sql import functions as F

        c = F.col
        exact = sum(r.exact_polls for r in tp_rows)
        if exact:
            polls = self.ev.filter((c("fn") == F_POLL) & (c("t") == T_OK) & c("log_start_offset").isNotNull())
            bad = (
                polls.select("run", "tp", "process", "op", "index", "time", "high_watermark",
                             "log_start_offset", F.explode("records").alias("rec"))
                .select("*", F.get(c("rec"), 0).alias("offset"), F.get(c("rec"), 1).alias("value"))
                .filter((c("offset") >= c("high_watermark")) | (c("offset") < c("log_start_offset")))
                .withColumn("kind", F.lit("read-uncommitted"))
            )
            rows = self._collect(self._ranked(self._named(bad), "kind", ["topic", "partition", "offset", "value", "index"]),
                                 "uncommitted reads")
            self._take(findings, "read-uncommitted", rows, lambda r: {
                "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
                "high_watermark": r.high_watermark, "log_start_offset": r.log_start_offset,
                "process": r.process, "op": r.op, "index": r["index"], "time": r.time})
        ends = [(r.tp, r.final_high_watermark) for r in tp_rows
                if r.final_complete and r.final_high_watermark is not None]
        if not ends:
            return
        end = self.spark.createDataFrame(ends, "tp long, final_hw long")
        gone = (
            self.pairs.filter(c("reads") > 0).join(F.broadcast(end), "tp")
            .filter(c("offset") >= c("final_hw"))
            .select("run", "tp", "offset", "value", "final_hw")
        )
        n = sum(r["count"] for r in self._collect(gone.groupBy().count(), "truncated reads"))
        if not n:
            return
        detail = self._first_reads(gone, ["run", "tp", "offset", "value"], n,
                                   ["run", "tp", "offset", "value", "final_hw"])
        rows = self._collect(
            self._ranked(self._named(detail.withColumn("kind", F.lit("truncated-read"))), "kind",
                         ["topic", "partition", "offset", "value"]),
            "truncated reads: details")
        self._take(findings, "truncated-read", rows, lambda r: {
            "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
            "final_high_watermark": r.final_hw, "index": r.idx, "time": r.time, "op": r.op,
            "process": r.process})

    def _send_order(self, findings):
        """nonmonotonic-send: each idempotent producer's acknowledged sends to a
        partition, in the order it invoked them, at increasing offsets."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        c = F.col
        if self.node_flags is None:
            return
        sends = self.acks().filter(c("idem") == 1)
        for r in self._collect(sends.groupBy("run").agg(F.countDistinct("nd").alias("n")),
                               "idempotent producers"):
            self.idempotent_nodes[r.run] = r.n
        inv = self.ops.filter(c("fn") == F_SEND).select("run", "op", "inv_index")
        w = Window.partitionBy("run", "tp", "nd").orderBy("inv_index")
        out = (
            sends.join(inv, ["run", "op"])
            .withColumn("previous_offset", F.lag("offset").over(w))
            .withColumn("previous_value", F.lag("value").over(w))
            .filter(c("offset") < c("previous_offset"))
        )
        if self.node_flags is not None:
            names = self.spark.createDataFrame(
                [(k, nd, name) for k, nd, name in self._node_names()], "run int, nd long, node string")
            out = out.join(F.broadcast(names), ["run", "nd"])
        rows = self._collect(
            self._ranked(self._named(out.withColumn("kind", F.lit("nonmonotonic-send"))), "kind",
                         ["topic", "partition", "node", "index"]),
            "send order")
        self._take(findings, "nonmonotonic-send", rows, lambda r: {
            "topic": r.topic, "partition": r.partition, "node": r.node, "value": r.value,
            "offset": r.offset, "previous_value": r.previous_value,
            "previous_offset": r.previous_offset, "process": r.process, "op": r.op,
            "index": r["index"], "time": r.time})

    def _observed(self, findings, observed, runs):
        """What observations.jsonl shows (reports/observations.py, shared with
        the reference checker), and the two oracles that join it with the
        sends: ack-below-min-isr and the partition part of unrecovered."""
        from pyspark.sql import functions as F

        c = F.col
        spans, afters = [], []
        for k, f in findings.items():
            obs, run = observed[k], runs[k]
            complete = {(p["topic"], p["partition"]): p["final_high_watermark"]
                        for p in f.partitions if p["final_complete"]}
            for kind, items in judge(obs, complete).items():
                f.anomalies[kind].extend(items)
                f.anomaly_counts[kind] += len(items)
            margin = int(run.check_bound("ack_margin_s", 5.0) * NS_PER_SECOND)
            for sp in below_min_isr(obs, run.min_isr()):
                tp = self.tp_of(k, sp["topic"], sp["partition"])
                if tp is not None:
                    spans.append((k, tp, sp["start"] + margin, sp["end"], sp["isr"], run.min_isr()))
            at = recovered_at(obs)
            if at is not None:
                afters.append((k, at + int(run.check_bound("recovery_grace_s", 5.0) * NS_PER_SECOND)))
        if spans:
            sp = self.spark.createDataFrame(
                spans, "srun int, stp long, from_time long, to_time long, isr array<int>, min_isr int")
            acked = self.acks().filter((c("weak") == 0) & c("inv_time").isNotNull())
            bad = (
                acked.join(F.broadcast(sp), (c("run") == c("srun")) & (c("tp") == c("stp"))
                           & (c("inv_time") >= c("from_time")) & (c("time") <= c("to_time")))
                .groupBy("run", "tp", "offset", "value", "index", "time", "op", "process", "inv_time")
                .agg(F.first("isr").alias("isr"), F.first("min_isr").alias("min_isr"))
                .withColumn("kind", F.lit("ack-below-min-isr"))
            )
            rows = self._collect(self._ranked(self._named(bad), "kind",
                                              ["topic", "partition", "offset", "value"]),
                                 "acks below min ISR")
            self._take(findings, "ack-below-min-isr", rows, lambda r: {
                "topic": r.topic, "partition": r.partition, "value": r.value, "offset": r.offset,
                "isr": list(r.isr), "min_isr": r.min_isr, "invoked": r.inv_time,
                "process": r.process, "op": r.op, "index": r["index"], "time": r.time})
        if afters:
            ah = self.spark.createDataFrame(afters, "arun int, after long")
            late = (
                self.ops.filter((c("fn") == F_SEND) & c("outcome").isNotNull())
                .join(F.broadcast(ah), (c("run") == c("arun")) & (c("inv_time") >= c("after")))
                .groupBy("run", "tp", "after", "err")
                .agg(_count_if(c("outcome") == T_OK).alias("ok"), F.count(F.lit(1)).alias("n"))
            )
            per_tp = defaultdict(lambda: {"ok": 0, "failed": 0, "errors": {}, "after": None})
            for r in self._collect(late, "sends after the recovery"):
                d = per_tp[(r.run, r.tp)]
                d["after"] = r.after
                d["ok"] += r.ok
                failed = r.n - r.ok
                d["failed"] += failed
                if failed:
                    name = self.error_names.get(r.err, "unknown")
                    d["errors"][name] = d["errors"].get(name, 0) + failed
            for (k, tp), d in sorted(per_tp.items(), key=lambda kv: self.tps[kv[0][1]]):
                if d["ok"] == 0 and d["failed"]:
                    _run, topic, partition = self.tps[tp]
                    f = findings[k]
                    f.anomalies["unrecovered"].append({
                        "topic": topic, "partition": partition, "kind": "partition",
                        "time": d["after"], "failed": d["failed"], "errors": d["errors"]})
                    f.anomaly_counts["unrecovered"] += 1

    def _groups(self, findings, groups):
        """commit-regressed, resume-past-commit and group-skipped (docs/anomalies.md):
        the candidates from groups.jsonl (reports/groups.py, shared with the
        reference checker), the evidence from the reads and acknowledgements
        in joins: a record in [committed, position) of a resumed partition,
        or acknowledged below a group's final commit, that no poll of the
        group's members returned."""
        from pyspark.sql import functions as F

        c = F.col
        resumes, finals = [], []
        for k, events in groups.items():
            if not events:
                continue
            f = findings[k]
            for item in commit_regressions(events):
                f.anomalies["commit-regressed"].append(item)
                f.anomaly_counts["commit-regressed"] += 1
            complete = {(p["topic"], p["partition"]) for p in f.partitions if p["final_complete"]}
            for i, cand in enumerate(resume_candidates(events)):
                tp = self.tp_of(k, cand["topic"], cand["partition"])
                if tp is not None:
                    resumes.append((k, tp, cand["group"], cand["committed"], cand["offset"], i, cand))
            for fc in final_commits(events):
                tp = self.tp_of(k, fc["topic"], fc["partition"])
                if tp is not None and (fc["topic"], fc["partition"]) in complete:
                    finals.append((k, tp, fc["group"], fc["offset"], fc))
        if not resumes and not finals:
            return
        # values each group's members returned (the group is on the poll's invocation)
        members = (self.ev.filter((c("fn") == F_POLL) & c("group").isNotNull())
                   .select("run", "op", "group").distinct())
        polls = self.ops.filter((c("fn") == F_POLL) & (c("final") == 0)).select("run", "op")
        polled = (self.reads.join(polls, ["run", "op"]).join(members, ["run", "op"])
                  .select("run", "tp", "group", "value").distinct())
        if resumes:
            cands = self.spark.createDataFrame(
                [r[:6] for r in resumes],
                "run int, tp long, group string, committed long, position long, cand int")
            known = self.pairs.filter((c("reads") > 0) | (F.coalesce("weak", F.lit(0)) == 0)).select(
                "run", "tp", "offset", "value")
            unpolled = (
                known.join(F.broadcast(cands), ["run", "tp"])
                .filter((c("offset") >= c("committed")) & (c("offset") < c("position")))
                .join(polled, ["run", "tp", "group", "value"], "left_anti")
                .groupBy("run", "cand").agg(F.min("offset").alias("skipped"))
            )
            by_cand = {(r.run, r.cand): r.skipped for r in self._collect(unpolled, "resumed groups")}
            for k, _tp, _g, _lo, _hi, i, cand in resumes:
                if (k, i) in by_cand:
                    findings[k].anomalies["resume-past-commit"].append({**cand, "skipped": by_cand[(k, i)]})
                    findings[k].anomaly_counts["resume-past-commit"] += 1
        if finals:
            fin = self.spark.createDataFrame(
                [r[:4] + (i,) for i, r in enumerate(finals)],
                "run int, tp long, group string, committed long, fin int")
            final_ops = self.ops.filter((c("fn") == F_POLL) & (c("final") == 1)).select("run", "op")
            at = (self.reads.join(final_ops, ["run", "op"]).groupBy("run", "tp", "value")
                  .agg(F.min("offset").alias("offset")))
            acked = self.acks().filter(c("weak") == 0).select("run", "tp", "value")
            skipped = (
                acked.join(at, ["run", "tp", "value"]).join(F.broadcast(fin), ["run", "tp"])
                .filter(c("offset") < c("committed"))
                .join(polled, ["run", "tp", "group", "value"], "left_anti")
                .select("run", "fin", "value", "offset")
            )
            for r in self._collect(skipped, "groups' skipped records"):
                k, _tp, group, committed, fc = finals[r.fin]
                findings[k].anomalies["group-skipped"].append({
                    "topic": fc["topic"], "partition": fc["partition"], "group": group,
                    "value": r.value, "offset": r.offset, "committed": committed,
                    "index": fc["index"], "time": fc["time"]})
                findings[k].anomaly_counts["group-skipped"] += 1

    def _node_names(self):
        """(run, node code, node name) of every producer instance seen."""
        return self._node_rows

    def _offsets(self):
        """Per (partition, offset) acknowledged or read: the least and greatest value seen there."""
        from pyspark.sql import functions as F

        c = F.col
        # (an acks=1 acknowledgement binds no offset: the leader alone had it)
        return self.pairs.filter((c("reads") > 0) | (F.coalesce("weak", F.lit(0)) == 0)).groupBy(
            "run", "tp", "offset").agg(F.min("value").alias("vmin"), F.max("value").alias("vmax"))

    def _offset_anomalies(self, findings, offsets):
        """Per (partition, offset): inconsistent-offset."""
        from pyspark.sql import functions as F

        c = F.col
        bad = offsets.filter(c("vmin") != c("vmax")).select("run", "tp", "offset")
        n_bad = sum(r["count"] for r in self._collect(bad.groupBy().count(), "offsets"))
        if not n_bad:
            return
        bad = self._persist(bad)
        # Who saw each value there: its acknowledgement, and the first read (from the pairs).
        keys = ["run", "tp", "offset"]
        acked = self.acks().filter(c("weak") == 0).join(self._small(bad, n_bad), keys).select(
            *keys, "value", c("index").alias("idx"), "time", "op", "process", F.lit(1).alias("is_ack"),
        )
        read = self._first_reads(bad, keys, n_bad, [*keys, "value"]).withColumn("is_ack", F.lit(0))
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
        rows = self._collect(
            self._ranked(self._named(detail), "kind", ["topic", "partition", "offset"], dense=True),
            "inconsistent offsets",
        )
        groups = defaultdict(list)
        for r in rows:
            findings[r.run].anomaly_counts["inconsistent-offset"] = r.total
            groups[(r.run, r.topic, r.partition, r.offset)].append(r)
        for (k, topic, partition, offset), rs in groups.items():
            rs.sort(key=lambda r: (r.first, r.value))
            w = rs[1]
            findings[k].anomalies["inconsistent-offset"].append({
                "topic": topic, "partition": partition, "offset": offset,
                "values": sorted(r.value for r in rs),
                "acknowledged": sorted(r.value for r in rs if r.acked),
                "index": w.first, "time": w.time, "op": w.op, "process": w.process,
            })

    def _sequence_anomalies(self, findings, offsets):
        """nonmonotonic-poll and poll-skip: each process's reads of a partition, in index order.

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
        polls = self.ops.filter(c("fn") == F_POLL).select(
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
        flagged = self._persist(first)
        jumping = self._persist(polls.filter(c("rec_jumps") == 1).select("run", "op"))
        counts = self._collect(
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
                self.reads.join(self._small(jumping, n["jumping"]), ["run", "op"])
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
            inside = self._persist(inside)
            for r in self._collect(inside.groupBy("kind").count(), "poll sequences inside polls"):
                n[r.kind] = n.get(r.kind, 0) + r["count"]
            flagged = flagged.unionByName(inside)
        n_nonmono, n_gaps = n.get("nonmonotonic-poll", 0), n.get("gap", 0)
        order = ["topic", "partition", "process", "index", "offset", "previous"]
        fields = ["topic", "partition", "process", "offset", "previous", "op", "previous_op", "index", "time"]
        if n_nonmono:
            nonmono = self._ranked(self._named(flagged.filter(c("kind") == "nonmonotonic-poll")),
                                   "kind", order)
            for r in self._collect(nonmono, "nonmonotonic polls"):
                f = findings[r.run]
                f.anomaly_counts["nonmonotonic-poll"] = r.total
                f.anomalies["nonmonotonic-poll"].append({x: r[x] for x in fields})
        if not n_gaps:
            return
        # For each gap (previous, offset): the smallest known offset above
        # `previous`, found by walking the known offsets downwards.
        cols = ("process", "offset", "previous", "op", "previous_op", "index", "time")
        known = offsets.select(
            "run", "tp", c("offset").alias("at"), F.lit(0).alias("is_gap"),
            *[F.lit(None).cast("long").alias(x) for x in cols],
        )
        cands = flagged.filter(c("kind") == "gap").select(
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
        for r in self._collect(self._ranked(self._named(skips), "kind", order), "poll skips"):
            f = findings[r.run]
            f.anomaly_counts["poll-skip"] = r.total
            inst = {x: r[x] for x in fields}
            inst["skipped"] = r.skipped
            f.anomalies["poll-skip"].append(inst)

    # ---------------------------------------------------------------- context

    def tp_of(self, run: int, topic: str, partition: int) -> int | None:
        if not hasattr(self, "_tp_index"):
            self._tp_index = {v: k for k, v in self.tps.items()}
        return self._tp_index.get((run, topic, partition))

    def context(self, requests: dict[int, dict], per_key: int = PER_KEY) -> dict[int, dict]:
        """Rows around the anomalies a report shows (see context.py), per batch
        key: the keys of `requests` fetched from the cached data."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        out = {k: empty_context() for k in requests}
        c = F.col
        types = {**OUTCOMES, 0: "invoke"}
        spark = self.spark

        def limited(df, key):
            w = Window.partitionBy("tp", key).orderBy("index")
            return df.withColumn("_n", F.row_number().over(w)).filter(c("_n") <= per_key)

        ops = [(k, op) for k, r in requests.items() for op in r["ops"]]
        if ops:
            keys = spark.createDataFrame(ops, "run int, op long")
            rows = self._collect(
                self.ev.filter(c("fn").isin(*F_NAMES)).join(F.broadcast(keys), ["run", "op"]).select(
                    "run", "tp", "index", "time", "process", "op", "t", "fn", "value", "offset",
                    "records", "high_watermark", "final", "error"),
                "context: ops",
            )
            for r in rows:
                ev = r.asDict(recursive=True)
                _run, ev["topic"], ev["partition"] = self.tps[ev.pop("tp")]
                ev["type"], ev["f"] = types[ev.pop("t")], F_NAMES[ev.pop("fn")]
                out[ev.pop("run")]["ops"][ev["op"]].append(ev)
            for ctx in out.values():
                for evs in ctx["ops"].values():
                    evs.sort(key=lambda e: e["index"])

        def fetch(name, df, key):
            ks = [(self.tp_of(k, t, p), x) for k, r in requests.items() for (t, p, x) in r[name]]
            ks = [(tp, x) for tp, x in ks if tp is not None]
            if not ks:
                return
            keys = spark.createDataFrame(ks, f"tp long, {key} long")
            rows = self._collect(
                limited(df.join(F.broadcast(keys), ["tp", key]), key).select(
                    "run", "tp", "process", "op", "index", "time", "offset", "value"),
                f"context: {name}",
            )
            for r in rows:
                d = r.asDict()
                run, topic, partition = self.tps[d.pop("tp")]
                del d["run"]
                out[run][name][(topic, partition, d[key])].append(d)

        fetch("reads_of", self.reads, "value")
        fetch("reads_at", self.reads, "offset")
        acks = self.acks()
        fetch("acks_at", acks, "offset")
        for ctx in out.values():
            for name in ("reads_of", "reads_at", "acks_at"):
                for rows in ctx[name].values():
                    rows.sort(key=lambda r: r["index"])
        return out


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
