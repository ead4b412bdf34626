"""Benchmark of the checkers: events per second and peak memory, Spark and reference.

    .venv/bin/python bench/bench_checker.py                 # 1e6 events, JSONL and Parquet
    .venv/bin/python bench/bench_checker.py --sizes 1e6 1e7 # add the 10-million run
    .venv/bin/python bench/bench_checker.py --no-reference  # Spark only
    git show HEAD:reports/spark_checker.py > /tmp/old_checker.py
    .venv/bin/python bench/bench_checker.py --baseline /tmp/old_checker.py  # old vs new

It writes synthetic histories (a workload of producers and consumers over a few
partitions, nemesis windows, a complete final read, and a handful of injected
anomalies so that every code path runs), times the Spark checker (session
start-up excluded, first and second run reported) and the reference checker
on each, prints a table, and writes runs/bench/checker-<date>.json with a
description of the machine. With --baseline FILE (an older copy of
spark_checker.py) both checkers are timed alternately in the same JVM, each
with its own spark.sql.* defaults, which is the fair comparison on a shared
machine; the JVM's CPU seconds per run are recorded too. Peak memory: the Python process from
getrusage(RUSAGE_SELF) (reference) and the Spark JVM's VmHWM from /proc (or
psutil if installed). Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.paths import RAW  # noqa: E402

PARQUET_ROWS_PER_PART = 1_000_000
ROW_GROUP = 131_072


class Workload:
    """Events of a synthetic run, produced in index order in chunks."""

    def __init__(self, n_events: int, seed: int = 1, partitions: int = 8, producers: int = 8,
                 consumers: int = 4):
        self.n = n_events
        self.rng = random.Random(seed)
        self.tps = [("bench", p) for p in range(partitions)]
        self.logs = {tp: [] for tp in self.tps}
        self.producers = list(range(producers))
        self.consumers = {producers + i: {tp: 0 for tp in self.tps} for i in range(consumers)}
        self.next_process = producers + consumers
        self.index = 0
        self.time = 0
        self.op = 0
        self.value = 0
        self.fault_open = False

    def _ev(self, **ev):
        self.time += self.rng.randint(20_000, 60_000)  # ~25k events/s of simulated time
        ev["index"], ev["time"] = self.index, self.time
        self.index += 1
        return ev

    def events(self):
        rng = self.rng
        budget_main = int(self.n * 0.97)
        while self.index < budget_main:
            r = rng.random()
            if r < 0.0005:
                self.fault_open = not self.fault_open
                yield self._ev(process=-1, op=self._op(), type="info", f="nemesis", fault="kill",
                               phase="start" if self.fault_open else "stop", targets=["broker-2"])
            elif r < 0.55:
                yield from self._send()
            else:
                yield from self._poll()
        if self.fault_open:
            yield self._ev(process=-1, op=self._op(), type="info", f="nemesis", fault="kill",
                           phase="stop", targets=["broker-2"])
        yield from self._final_reads()

    def _op(self):
        self.op += 1
        return self.op - 1

    def _send(self):
        rng = self.rng
        tp = self.tps[rng.randrange(len(self.tps))]
        i = rng.randrange(len(self.producers))
        proc = self.producers[i]
        self.value += 1
        v = self.value
        op = self._op()
        yield self._ev(process=proc, op=op, type="invoke", f="send", topic=tp[0], partition=tp[1], value=v)
        log = self.logs[tp]
        r = rng.random()
        if r < 0.95:
            if rng.random() < 0.00002:
                log.append(None)  # acknowledged, then lost
            else:
                log.append(v)
            offset = len(log) - 1
            if log[-1] is not None and rng.random() < 0.00002:
                log.append(v)  # a retry stored twice: a duplicate
            yield self._ev(process=proc, op=op, type="ok", f="send", topic=tp[0], partition=tp[1],
                           value=v, offset=offset)
        elif r < 0.98:
            yield self._ev(process=proc, op=op, type="fail", f="send", topic=tp[0], partition=tp[1],
                           value=v, error="NOT_ENOUGH_REPLICAS")
        else:
            if rng.random() < 0.5:
                log.append(v)
            yield self._ev(process=proc, op=op, type="info", f="send", topic=tp[0], partition=tp[1],
                           value=v, error="timeout")
            self.producers[i] = self.next_process
            self.next_process += 1

    def _poll(self, proc=None, tp=None, final=False):
        rng = self.rng
        if proc is None:
            proc = rng.choice(list(self.consumers))
        state = self.consumers[proc]
        tp = tp or self.tps[rng.randrange(len(self.tps))]
        log = self.logs[tp]
        pos = state[tp]
        explicit = None
        while pos < len(log) and log[pos] is None:
            pos += 1
            explicit = pos
        op = self._op()
        inv = dict(process=proc, op=op, type="invoke", f="poll", topic=tp[0], partition=tp[1], offset=explicit)
        if final:
            inv["final"] = True
        yield self._ev(**inv)
        if not final and rng.random() < 0.01:
            yield self._ev(process=proc, op=op, type="fail", f="poll", topic=tp[0], partition=tp[1],
                           error="NOT_LEADER_FOR_PARTITION")
            return
        k = rng.randint(1, 50) if final else rng.randint(0, 5)
        recs = []
        o = pos
        while o < len(log) and len(recs) < k and log[o] is not None:
            recs.append([o, log[o]])
            o += 1
        state[tp] = o
        done = dict(process=proc, op=op, type="ok", f="poll", topic=tp[0], partition=tp[1],
                    records=recs, high_watermark=len(log))
        if final:
            done["final"] = True
        yield self._ev(**done)

    def _final_reads(self):
        proc = self.next_process
        self.next_process += 1
        self.consumers[proc] = {tp: 0 for tp in self.tps}
        for tp in self.tps:
            if self.logs[tp] and self.logs[tp][-1] is None:
                self.logs[tp].append(-1)  # a value nobody sent: a phantom at the end
            while self.consumers[proc][tp] < len(self.logs[tp]):
                yield from self._poll(proc, tp, final=True)


def _json_line(ev) -> str:
    return json.dumps(ev, separators=(",", ":"))


def generate(out: Path, n_events: int, fmt: str, seed: int = 1) -> dict:
    """Write a run directory of about n_events; returns its size facts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(json.dumps({
        "format": 1, "run": out.name, "seed": seed, "started_at": "2024-01-01T00:00:00Z",
        "cluster": {"brokers": 3, "replication_factor": 3},
        "workload": {"client": "bench", "acks": "all", "idempotence": False,
                     "topics": {"bench": 8}},
        "faults": ["kill"],
    }))
    wl = Workload(n_events, seed)
    n = 0
    if fmt == "jsonl":
        with open(out / "history.jsonl", "w") as fh:
            buf = []
            for ev in wl.events():
                buf.append(_json_line(ev))
                n += 1
                if len(buf) >= 10000:
                    fh.write("\n".join(buf) + "\n")
                    buf = []
            if buf:
                fh.write("\n".join(buf) + "\n")
    else:
        from reports.schema import arrow_schema

        schema = arrow_schema()
        d = out / "history"
        d.mkdir(exist_ok=True)
        part, rows = 0, []

        def flush():
            nonlocal part, rows
            cols = {name: [ev.get(name) for ev in rows] for name in schema.names}
            # row groups of 128k rows, as a streaming writer would flush them: Spark
            # reads a Parquet file in parallel only across row groups
            pq.write_table(pa.table(cols, schema=schema), d / f"part-{part:05d}.parquet",
                           row_group_size=ROW_GROUP)
            part += 1
            rows = []

        for ev in wl.events():
            rows.append(ev)
            n += 1
            if len(rows) >= PARQUET_ROWS_PER_PART:
                flush()
        if rows:
            flush()
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {"events": n, "bytes": size}


# ---------------------------------------------------------------------------
# measuring


def _jvm_pid(spark) -> int | None:
    try:
        name = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getName()
        return int(name.split("@")[0])
    except Exception:
        return None


def _peak_rss_of(pid: int) -> int | None:
    """Peak resident memory of a process in bytes (psutil if present, else /proc VmHWM)."""
    try:
        import psutil  # noqa: F401

        p = psutil.Process(pid)
        info = p.memory_full_info()
        peak = getattr(info, "peak_wset", None)
        if peak:
            return int(peak)
    except Exception:
        pass
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak(pid: int) -> None:
    """Reset VmHWM (Linux: write 5 to clear_refs) so each measurement has its own peak."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def bench_reference(run_dir: Path) -> dict:
    """Run the reference checker in a child process, so its peak RSS is its own."""
    code = (
        "import sys,time,resource,json; sys.path.insert(0, %r)\n"
        "from reports import reference\n"
        "from reports.summary import build_summary\n"
        "t=time.perf_counter(); s=build_summary(reference.check(%r)); t=time.perf_counter()-t\n"
        "print(json.dumps({'seconds': t, 'peak_rss': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss*1024,"
        " 'verdict': s['verdict'], 'anomalies': s['anomaly_counts']}))\n"
    ) % (str(ROOT), str(run_dir))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process so far (Linux /proc)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, TypeError, ValueError):
        return None


def load_checker(path: str):
    """Import a copy of spark_checker.py (e.g. an older version) under another name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_spark_checker", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench_spark(spark, run_dir: Path, repeats: int = 2, checkers: dict | None = None) -> dict:
    """Time each checker module `repeats` times, alternating; {name: figures}.

    Before each run the module's own spark.sql.* defaults are set on the
    session (settings of the JVM itself, like its heap, are the session's).
    """
    from reports import spark_checker
    from reports.summary import build_summary

    checkers = checkers or {"spark": spark_checker}
    # (static settings, like the code cache's size, are the session's too)
    sql = {k for m in checkers.values() for k in m.DEFAULT_CONF
           if k.startswith("spark.sql.") and spark.conf.isModifiable(k)}
    pid = _jvm_pid(spark)
    out = {name: {"seconds": [], "jvm_cpu_s": [], "jvm_peak_rss": None} for name in checkers}
    for _ in range(repeats):
        for name, mod in checkers.items():
            for k in sql:
                if k in mod.DEFAULT_CONF:
                    spark.conf.set(k, mod.DEFAULT_CONF[k])
                else:
                    spark.conf.unset(k)
            o = out[name]
            if pid:
                _reset_peak(pid)
            cpu = _cpu_seconds(pid)
            t = time.perf_counter()
            res = mod.check([run_dir], spark=spark)[0]
            o["seconds"].append(time.perf_counter() - t)
            if cpu is not None:
                o["jvm_cpu_s"].append(_cpu_seconds(pid) - cpu)
            if isinstance(res, Exception):
                raise res
            summary = build_summary(res)
            o["verdict"], o["anomalies"] = summary["verdict"], summary["anomaly_counts"]
            if pid:
                o["jvm_peak_rss"] = max(o["jvm_peak_rss"] or 0, _peak_rss_of(pid) or 0)
    return out


def machine() -> dict:
    mem = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    import pyspark

    return {
        "cpus": os.cpu_count(), "cpu": cpu, "memory_bytes": mem, "platform": platform.platform(),
        "python": platform.python_version(), "pyspark": pyspark.__version__,
        "java": java[0] if java else None,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["1e6"], help="event counts, e.g. 1e6 1e7")
    ap.add_argument("--formats", nargs="+", default=["parquet", "jsonl"], choices=["parquet", "jsonl"])
    ap.add_argument("--no-reference", action="store_true", help="skip the reference checker")
    ap.add_argument("--workdir", default=None, help="where to write the histories (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated histories")
    ap.add_argument("--master", default=None)
    ap.add_argument("--baseline", default=None,
                    help="an older copy of spark_checker.py, timed alternately with the current one")
    ap.add_argument("--repeats", type=int, default=2, help="Spark runs per checker (default 2)")
    ap.add_argument("--out", default=None,
                    help="result file (default runs/bench/checker-<date>.json, same-day rows merged)")
    args = ap.parse_args(argv)

    from reports import spark_checker

    work = Path(args.workdir or tempfile.mkdtemp(prefix="chaoslog-bench-"))
    t = time.perf_counter()
    spark = spark_checker.get_spark(args.master)
    startup = time.perf_counter() - t
    rows = []
    try:
        for size in args.sizes:
            n = int(float(size))
            for fmt in args.formats:
                run_dir = work / f"bench-{n}-{fmt}"
                if run_dir.exists():
                    shutil.rmtree(run_dir)
                t = time.perf_counter()
                facts = generate(run_dir, n, fmt)
                gen = time.perf_counter() - t
                row = {"events": facts["events"], "format": fmt, "bytes": facts["bytes"], "generate_s": gen}
                checkers = {"spark": spark_checker}
                if args.baseline:
                    checkers["baseline"] = load_checker(args.baseline)
                row.update(bench_spark(spark, run_dir, args.repeats, checkers))
                for name in checkers:
                    row[name]["events_per_s"] = facts["events"] / min(row[name]["seconds"])
                if not args.no_reference:
                    row["reference"] = bench_reference(run_dir)
                    row["reference"]["events_per_s"] = facts["events"] / row["reference"]["seconds"]
                rows.append(row)
                _print_row(row)
                if not args.keep:
                    shutil.rmtree(run_dir)
    finally:
        spark.stop()
    path = Path(args.out) if args.out else RAW / f"checker-{dt.date.today().isoformat()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    # the same day's other sizes stay; a size measured again replaces its row
    old = []
    if path.exists():
        try:
            old = json.loads(path.read_text()).get("runs", [])
        except ValueError:
            old = []
    done = {(r["events"], r["format"]) for r in rows}
    rows = [r for r in old if (r["events"], r["format"]) not in done] + rows
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "load_average": os.getloadavg(), "spark_startup_s": startup,
              "spark_conf": {k: spark_checker.DEFAULT_CONF.get(k) for k in sorted(spark_checker.DEFAULT_CONF)},
              "jvm_options": None if args.master else spark_checker.LOCAL_JAVA_OPTIONS,
              "baseline": args.baseline,
              "runs": sorted(rows, key=lambda r: (r["events"], r["format"]))}
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nSpark session start-up: {startup:.1f} s (not in the figures above)")
    print(f"written {path}")
    return 0


def _mb(b):
    return "-" if not b else f"{b / 2**20:.0f} MB"


def _print_row(row):
    s = row["spark"]
    line = (f"{row['events']:>11,} {row['format']:<8} spark: first {s['seconds'][0]:6.1f} s, "
            f"best {min(s['seconds']):6.1f} s = {s['events_per_s']:>10,.0f} ev/s, JVM peak {_mb(s['jvm_peak_rss'])}")
    if "baseline" in row:
        b = row["baseline"]
        line += (f" | baseline: best {min(b['seconds']):6.1f} s = {b['events_per_s']:>10,.0f} ev/s, "
                 f"new/old time {min(s['seconds']) / min(b['seconds']):.2f}")
        if s["jvm_cpu_s"] and b["jvm_cpu_s"]:
            line += f", JVM CPU {min(s['jvm_cpu_s']):.1f} s vs {min(b['jvm_cpu_s']):.1f} s"
        if b["anomalies"] != s["anomalies"]:
            line += "  ** checkers disagree **"
    if "reference" in row:
        r = row["reference"]
        line += (f" | reference: {r['seconds']:6.1f} s = {r['events_per_s']:>9,.0f} ev/s, "
                 f"peak {_mb(r['peak_rss'])}")
        if r["anomalies"] != s["anomalies"]:
            line += "  ** checkers disagree **"
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
