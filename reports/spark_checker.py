"""The Spark checker: anomalies.md over histories of any size, many runs per batch.

`SparkChecker.check` turns a batch of runs into Findings in two steps:

  1. reports/spark_analysis.py `analyze`: the events read once into the
     SparkAnalysis (cached ops and pairs, the names of the codes, each
     run's partitions, observations and group events), validation on the way;
  2. each anomaly type's Spark function (reports/registry.py) and the
     figures (timeline, latency, errors, fault windows), side by side: the
     facts several types share (the values, the poll sequences) are
     computed once, by the first function that needs them.

Step 2's functions run as concurrent Spark jobs from driver threads: one
job's fixed costs and last straggling task overlap with another's work, so
both cores stay busy. The checker keeps the batch's SparkAnalysis (its
cached DataFrames) for `context` until `close`.

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

import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from reports import invariants, spark_analysis, transactions
from reports.context import PER_KEY, empty_context
from reports.errors import HistoryError
from reports.groups import status as group_status
from reports.observations import annotate_windows, checked
from reports.readers import RunInput
from reports.registry import ANOMALIES
from reports.spark_analysis import F_NAMES, OUTCOMES, Jobs, SparkAnalysis, acks
from reports.summary import (DEFAULT_MAX_INSTANCES, GROUP_TYPES, TRANSACTION_TYPES, Findings,
                             final_reads_complete)

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
    if not master or master.startswith("local") or loopback_master(master):
        # In local mode, or with a master on this machine's loopback (a
        # StandaloneSpark), everything stays on loopback: no binding to, or
        # advertising of, the machine's other addresses (SPARK_LOCAL_IP also
        # binds the web UI, when conf enables it, instead of 0.0.0.0).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.setdefault("spark.driver.host", "127.0.0.1")
        settings.setdefault("spark.driver.bindAddress", "127.0.0.1")
    if not master or master.startswith("local"):
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
    from pyspark import SparkContext
    if SparkContext._gateway is None:   # this call starts the driver
        warning = driver_exposure(master, settings, os.environ)
        if warning:
            print(warning, file=sys.stderr, flush=True)
    return _start_quietly(builder)


def _is_loopback(host: str) -> bool:
    import ipaddress
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_master(master: str) -> bool:
    """Whether `master` is a standalone master (spark://HOST:PORT[,HOST:PORT])
    on this machine's loopback, whose executors reach a driver on loopback."""
    if not master.startswith("spark://"):
        return False
    return all(_is_loopback(hp.rpartition(":")[0]) for hp in master[8:].split(","))


def driver_exposure(master: str | None, settings: dict, env) -> str | None:
    """The warning line when the driver about to start listens beyond
    loopback (its RPC and block manager, and its web UI if enabled), else
    None. Only on request: a cluster master elsewhere (--master, whose
    executors must reach the driver), or SPARK_LOCAL_IP,
    spark.driver.bindAddress or spark.driver.host set to such an address."""
    bind = (settings.get("spark.driver.bindAddress") or settings.get("spark.driver.host")
            or env.get("SPARK_LOCAL_IP"))
    ui = str(settings.get("spark.ui.enabled", "true")).lower() == "true"
    ui_bind = env.get("SPARK_LOCAL_IP") or "0.0.0.0"
    parts = []
    if not bind or not _is_loopback(bind):
        where = bind or "the address of this machine's host name"
        parts.append(f"the Spark driver listens on {where}")
    if ui and not _is_loopback(ui_bind):
        whose = "its web UI" if parts else "the Spark driver's web UI listens"
        every = " (every interface)" if ui_bind == "0.0.0.0" else ""
        parts.append(f"{whose} on {ui_bind}{every}")
    if not parts:
        return None
    local = not master or master.startswith("local")
    why = "SPARK_LOCAL_IP or the session's conf" if local else f"--master {master}"
    return (f"chaoslog: WARNING: {' and '.join(parts)}, not loopback ({why}): "
            "anyone who can reach them can read the histories being checked and the results "
            "(Spark authenticates nothing unless spark.authenticate is set)")


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


def _concurrently(jobs: dict):
    """Run each of `jobs` (name -> function of nothing) in its own driver
    thread, so that their Spark jobs overlap; name -> result."""
    from pyspark.util import inheritable_thread_target

    with ThreadPoolExecutor(len(jobs)) as pool:
        # (the caller's job group and other local properties go along)
        futures = {name: pool.submit(inheritable_thread_target(fn)) for name, fn in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


class SparkChecker:
    """Check batches of runs in one Spark application; keep the last batch's
    analysis for `context` until `close`."""

    def __init__(self, spark, max_instances: int | None = DEFAULT_MAX_INSTANCES):
        self.jobs = Jobs(spark)
        self.timings = self.jobs.timings  # (label, seconds) of each Spark job
        self.cap = max_instances if max_instances is not None else 2**31 - 1
        self.analysis: SparkAnalysis | None = None

    def check(self, runs: list[RunInput]) -> list[Findings | HistoryError]:
        """Findings for each run, or the HistoryError that stopped it, in input order."""
        errors, a = spark_analysis.analyze(self.jobs, runs, self.cap)
        if a is not None:
            self.analysis = a
            found = _concurrently({
                **{e.name: partial(e.spark, a) for e in ANOMALIES},
                "timeline and latency": partial(spark_analysis.timeline_and_latency, a),
                "errors and windows": partial(spark_analysis.errors_and_windows, a),
                "idempotent producers": partial(spark_analysis.idempotent_producers, a),
            })
            counts = spark_analysis.counts(a)
            errors.update({k: self._findings(a, k, found, counts[k]) for k in a.runs})
        return [errors[k] for k in range(len(runs))]

    def _findings(self, a: SparkAnalysis, k: int, found: dict, counts: dict) -> Findings:
        """Run k's Findings from what the functions found."""
        run = a.runs[k]
        f = Findings(run.run_id, run.run_json, run.idempotent, "spark")
        f.events, f.end_time = a.stats[k]["events"], a.stats[k]["end_time"]
        f.warnings = list(run.warnings)
        for e in ANOMALIES:
            if k in found[e.name]:
                f.anomaly_counts[e.name], items = found[e.name][k]
                f.anomalies[e.name] = sorted(items, key=e.order)[: self.cap]
        value_counts = spark_analysis.values(a).counts.get(k)
        # (duplicate's fatality: idempotent writes the client did not send twice)
        f.idempotent_duplicates = (0 if value_counts is None else value_counts.idem_duplicate) - sum(
            d["idempotent"] and bool(d.get("resent")) for d in f.anomalies["duplicate"])
        f.counts = counts
        f.counts.update(read=0 if value_counts is None else value_counts.read,
                        lost=f.anomaly_counts["lost"], unseen=f.anomaly_counts["unseen"],
                        duplicated=f.anomaly_counts["duplicate"])
        f.partitions = a.partitions[k]
        f.timeline, f.latency = found["timeline and latency"][k]
        f.errors, f.windows = found["errors and windows"][k]
        annotate_windows(a.observed[k], f.windows)
        f.oracles = checked(
            a.observed[k], exact_polls=sum(r.exact_polls for r in a.tp_rows if r.run == k),
            idempotent_producers=found["idempotent producers"].get(k, 0),
            final_complete=bool(f.partitions) and final_reads_complete(f.partitions))
        f.oracles.update(dict.fromkeys(GROUP_TYPES, group_status(a.groups[k])))
        f.oracles.update(invariants.status(a.observed[k], spark_analysis.promises(a, k)))
        f.oracles.update(transactions.status(TRANSACTION_TYPES, run.run_json, a.groups[k]))
        return f

    def context(self, requests: dict[int, dict], per_key: int = PER_KEY) -> dict[int, dict]:
        """Rows around the anomalies a report shows (see context.py), per batch key."""
        if self.analysis is None:
            return {k: empty_context() for k in requests}
        return context(self.analysis, requests, per_key)

    def close(self):
        self.jobs.close()
        self.analysis = None


def context(a: SparkAnalysis, requests: dict[int, dict], per_key: int = PER_KEY) -> dict[int, dict]:
    """Rows around the anomalies a report shows (see context.py), per batch
    key: the keys of `requests` fetched from the cached data."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    out = {k: empty_context() for k in requests}
    c = F.col
    types = {**OUTCOMES, 0: "invoke"}
    spark = a.jobs.spark

    def limited(df, key):
        w = Window.partitionBy("tp", key).orderBy("index")
        return df.withColumn("_n", F.row_number().over(w)).filter(c("_n") <= per_key)

    ops = [(k, op) for k, r in requests.items() for op in r["ops"]]
    if ops:
        keys = spark.createDataFrame(ops, "run int, op long")
        rows = a.jobs.collect(
            a.ev.filter(c("fn").isin(*F_NAMES)).join(F.broadcast(keys), ["run", "op"]).select(
                "run", "tp", "index", "time", "process", "op", "t", "fn", "value", "offset",
                "records", "high_watermark", "final", "error"),
            "context: ops",
        )
        for r in rows:
            ev = r.asDict(recursive=True)
            _run, ev["topic"], ev["partition"] = a.tps[ev.pop("tp")]
            ev["type"], ev["f"] = types[ev.pop("t")], F_NAMES[ev.pop("fn")]
            out[ev.pop("run")]["ops"][ev["op"]].append(ev)
        for ctx in out.values():
            for evs in ctx["ops"].values():
                evs.sort(key=lambda e: e["index"])

    def fetch(name, df, key):
        ks = [(a.tp_index.get((k, t, p)), x) for k, r in requests.items() for (t, p, x) in r[name]]
        ks = [(tp, x) for tp, x in ks if tp is not None]
        if not ks:
            return
        keys = spark.createDataFrame(ks, f"tp long, {key} long")
        rows = a.jobs.collect(
            limited(df.join(F.broadcast(keys), ["tp", key]), key).select(
                "run", "tp", "process", "op", "index", "time", "offset", "value"),
            f"context: {name}",
        )
        for r in rows:
            d = r.asDict()
            run, topic, partition = a.tps[d.pop("tp")]
            del d["run"]
            out[run][name][(topic, partition, d[key])].append(d)

    fetch("reads_of", a.reads, "value")
    fetch("reads_at", a.reads, "offset")
    fetch("acks_at", acks(a.ops, a.node_flags), "offset")
    for ctx in out.values():
        for name in ("reads_of", "reads_at", "acks_at"):
            for rows in ctx[name].values():
                rows.sort(key=lambda r: r["index"])
    return out
