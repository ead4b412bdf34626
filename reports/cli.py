"""`chaoslog analyze RUN_DIR...`: the checker on the command line.

Exit status (reports/exit_codes.py, the table of every chaoslog command):
0 valid, 1 invalid, 3 unknown (final reads incomplete), 4 error (a history
that cannot be read, named by file and line). With several runs, the worst
wins in that order: error, invalid, unknown, valid.

`add_parser(subparsers)` registers the command on another program's argparse
(the harness's `chaoslog`); `python -m reports` and `spark-submit
reports/__main__.py analyze` run the same command stand-alone.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from reports.api import analyze, combined_exit
from reports.exit_codes import EXIT_ERROR
from reports.summary import DEFAULT_MAX_INSTANCES


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "analyze",
        help="check recorded histories; write summary.json, report.html, junit.xml",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (run.json + history)")
    p.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write outputs to DIR/<run dir name>/ instead of into each run directory")
    p.add_argument("--checker", choices=("spark", "reference"), default="spark",
                   help="spark (any size, default) or reference (plain Python, small runs)")
    p.add_argument("--max-instances", type=int, default=DEFAULT_MAX_INSTANCES, metavar="N",
                   help=f"instances listed per anomaly type in summary.json (default {DEFAULT_MAX_INSTANCES}; "
                        "0 = all)")
    p.add_argument("--no-report", action="store_true", help="only summary.json")
    p.add_argument("--progress", action="store_true", help="show Spark's console progress bars")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    cap = None if args.max_instances == 0 else args.max_instances
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # open_run's warnings are printed below, once
            spark = None
            if args.checker == "spark" and getattr(args, "progress", False):
                from reports.spark_checker import get_spark

                spark = get_spark(args.master, progress=True)
            verdicts = analyze(args.run_dirs, out=args.out, master=args.master, spark=spark,
                               checker=args.checker, max_instances=cap, report=not args.no_report)
    except Exception as e:  # a Spark or I/O failure: still an error exit, with the reason
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    for v in verdicts:
        print_verdict(v)
    return combined_exit(verdicts)


def print_verdict(v) -> None:
    """The verdict of one run, its key counts and where its report is."""
    if v.verdict == "error":
        print(f"{v.run_dir}: ERROR {v.error}", file=sys.stderr)
        return
    s = v.summary
    c = s["counts"]
    print(f"{v.run_dir}: {v.verdict.upper()} (run {s['run']}): acknowledged {c['acknowledged']}, "
          f"read {c['read']}, lost {c['lost']}, duplicated {c['duplicated']}"
          + (f"; fatal: {', '.join(s['fatal'])}" if s["fatal"] else ""))
    for w in s["warnings"]:
        print(f"  warning: {w}", file=sys.stderr)
    print(f"  report: {v.report_path or v.summary_path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports", description="chaoslog history checker")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    from reports.validate import add_parser as add_validate
    from reports.aggregate import add_parser as add_aggregate

    add_validate(sub)
    add_aggregate(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
