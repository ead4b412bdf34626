"""Check one run directory several times in one JVM: wall and CPU time, code compiled, GC, per job.

    .venv/bin/python bench/repeat_checker.py RUN_DIR [--repeats 3] [--sequential] [--jobs]
        [--conf KEY=VALUE ...]

What bench_checker.py cannot show side by side: settings fixed when the JVM
starts (its collector, the size of Spark's cache of generated code) and how a
check warms up. Each repetition prints its wall time, the JVM's CPU seconds,
how many classes Spark generated and compiled (Janino) and the JVM's
collection time; --jobs adds the checker's per-job timings, and --sequential
runs the checker's concurrent sections one after another, so that those
timings add up. Compare two settings by two invocations on a quiet machine,
e.g. `--conf spark.sql.codegen.cache.maxEntries=100` (Spark's default) or
`--conf spark.driver.extraJavaOptions=-XX:+UseG1GC`. Make a history with
bench_checker.generate (or take a real run). Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sequential", action="store_true", help="run the concurrent sections one at a time")
    ap.add_argument("--jobs", action="store_true", help="print the checker's per-job timings")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the session (repeatable)")
    args = ap.parse_args(argv)
    conf = {}
    for kv in args.conf:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            ap.error(f"--conf wants KEY=VALUE, got {kv!r}")
        conf[key] = value
    if not Path(args.run_dir).is_dir():
        ap.error(f"no run directory at {args.run_dir}")

    from bench_checker import _cpu_seconds, _jvm_pid
    from reports import spark_checker
    from reports.readers import open_runs

    if args.sequential:
        from concurrent.futures import ThreadPoolExecutor

        spark_checker.ThreadPoolExecutor = lambda _n: ThreadPoolExecutor(1)
    spark = spark_checker.get_spark(conf=conf)
    jvm = spark._jvm
    compile_time = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    collectors = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    pid = _jvm_pid(spark)

    def counters():
        gc_ms = sum(b.getCollectionTime() for b in collectors)
        return _cpu_seconds(pid), compile_time.getCount(), gc_ms

    try:
        for i in range(args.repeats):
            runs = open_runs([args.run_dir])
            before, t = counters(), time.perf_counter()
            checker = spark_checker.SparkChecker(spark)
            try:
                found = checker.check(runs)[0]
            finally:
                checker.close()
            wall = time.perf_counter() - t
            cpu, compiled, gc_ms = (a - b for a, b in zip(counters(), before))
            if isinstance(found, Exception):
                print(f"run {i}: {found}")
                return 3
            anomalies = {k: n for k, n in found.anomaly_counts.items() if n}
            print(f"run {i}: {wall:.1f} s, JVM CPU {cpu:.1f} s, {compiled} classes compiled, "
                  f"GC {gc_ms / 1000:.1f} s; {found.events} events, anomalies {anomalies}", flush=True)
            if args.jobs:
                for label, seconds in checker.timings:
                    print(f"    {label:40s} {seconds:6.2f} s")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
