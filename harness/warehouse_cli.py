"""`chaoslog warehouse` and `chaoslog trends`: the results warehouse
(reports/warehouse.py) and its trends page (reports/trends.py), each one
Spark session: local[*] by default, an existing cluster with --master, or a
standalone cluster of N workers started for the job with --standalone N
(harness/spark_cluster.py).

Exit codes (reports/exit_codes.py): 0 done, 2 refused (bad arguments),
4 some run could not be checked (warehouse)."""
from __future__ import annotations

import argparse
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from reports.exit_codes import EXIT_ERROR, EXIT_OK, EXIT_REFUSED


@contextmanager
def _session(a: argparse.Namespace) -> Iterator[Any]:
    """The job's Spark session; a standalone cluster around it if asked."""
    from harness.spark_cluster import StandaloneSpark
    from reports.spark_checker import get_spark
    if not a.standalone:
        yield get_spark(a.master)
        return
    with StandaloneSpark(workers=a.standalone) as cluster:
        print(f"chaoslog: standalone Spark cluster {cluster.master_url} with {a.standalone} "
              f"worker(s) (logs in {cluster.log_dir})", file=sys.stderr, flush=True)
        spark = get_spark(cluster.master_url)
        try:
            yield spark
        finally:
            spark.stop()


def cmd_warehouse(a: argparse.Namespace) -> int:
    from reports.warehouse import load
    missing = [p for p in a.paths if not Path(p).exists()]
    if missing:
        print(f"chaoslog warehouse: error: no such directory: {', '.join(missing)}", file=sys.stderr)
        return EXIT_REFUSED
    if a.night and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", a.night):
        print(f"chaoslog warehouse: error: --night {a.night!r}: a date, YYYY-MM-DD", file=sys.stderr)
        return EXIT_REFUSED
    with _session(a) as spark:
        done = load(spark, [Path(p) for p in a.paths], Path(a.into), a.night,
                    log=lambda m: print(f"chaoslog: {m}", file=sys.stderr, flush=True))
    print(f"night {done['night']}: {done['loaded']} run(s) loaded into {a.into}, "
          f"{done['skipped']} already there, {len(done['failed'])} could not be checked")
    for f in done["failed"]:
        print(f"  {f['run_dir']}: {f['error']}")
    return EXIT_ERROR if done["failed"] else EXIT_OK


def cmd_trends(a: argparse.Namespace) -> int:
    from reports.trends import write_trends
    if not (Path(a.warehouse) / "runs").is_dir():
        print(f"chaoslog trends: error: {a.warehouse} holds no runs table: load runs with "
              f"`chaoslog warehouse DIR --into {a.warehouse}` first", file=sys.stderr)
        return EXIT_REFUSED
    with _session(a) as spark:
        out = write_trends(spark, Path(a.warehouse), Path(a.out))
    print(f"trends page: {out}")
    return EXIT_OK


def add_parser(sub: Any) -> None:
    p = sub.add_parser("warehouse", help="check new runs in one Spark job and append them to a "
                                         "Parquet warehouse, partitioned by night")
    p.add_argument("paths", nargs="+", metavar="DIR",
                   help="campaign directories (campaign.json), run directories or their parents")
    p.add_argument("--into", required=True, metavar="WAREHOUSE", help="the warehouse directory")
    p.add_argument("--night", help="the night's partition, YYYY-MM-DD (default: today)")
    _spark_options(p)
    p.set_defaults(func=cmd_warehouse)
    p = sub.add_parser("trends", help="an HTML page of the warehouse across nights: what is new, "
                                      "verdicts, anomalies by type and fault, flakes, availability")
    p.add_argument("warehouse", metavar="WAREHOUSE")
    p.add_argument("--out", default="trends.html", help="the page (default trends.html)")
    _spark_options(p)
    p.set_defaults(func=cmd_trends)


def _spark_options(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--master", help="Spark master URL (default local[*]), e.g. spark://HOST:7077")
    g.add_argument("--standalone", type=int, metavar="N",
                   help="start a standalone Spark cluster of N workers on this machine for the job")
