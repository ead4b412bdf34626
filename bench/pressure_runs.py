"""Randomized pressure runs of one suite test, many seeds: do the oracles stay
silent on a correct broker, and do the faults take effect?

    .venv/bin/python bench/pressure_runs.py [--runs 20] [--first-seed 100]
        [--test suites/test_suite_pressure.py::test_fixed_configuration_under_everything_at_once]
        [--coordination controller|v2] [--out runs/bench/pressure-DATE.json]

Each run is the test with CHAOSLOG_PRESSURE_SEED set to another seed (so
another schedule of overlapping faults, other role choices), in a pytest
process of its own with its run directory kept under the output's folder.
For every run the file records: passed or failed, the verdict's fatal
anomaly types and counts, which oracles were checked, and the fault-coverage
table's totals (faults that took effect, that changed nothing, that cannot
tell). A false alarm is a failed run of the fixed configuration: each one is
a bug, in the broker or in an oracle, to be read in its run directory.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.paths import RAW  # noqa: E402

DEFAULT_TEST = "suites/test_suite_pressure.py::test_fixed_configuration_under_everything_at_once"


def one_run(test: str, seed: int, basetemp: Path, coordination: str = "controller") -> dict:
    env = {**os.environ, "CHAOSLOG_PRESSURE_SEED": str(seed)}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider",
                          f"--basetemp={basetemp}", "--chaoslog-coordination", coordination],
                         cwd=REPO, env=env, capture_output=True, text=True)
    result = {"seed": seed, "passed": out.returncode == 0, "exit": out.returncode,
              "seconds": round(time.monotonic() - t0, 1), "run_dir": None}
    summaries = sorted(basetemp.glob("**/summary.json"))
    if summaries:
        s = json.loads(summaries[0].read_text())
        result["run_dir"] = str(summaries[0].parent)
        result["valid"] = s.get("valid")
        result["fatal"] = {k: len(s["anomalies"].get(k, [])) for k in s.get("fatal", [])}
        result["unchecked"] = {k: v for k, v in s.get("oracles", {}).items() if v != "checked"}
        took = Counter(str(w.get("took_effect")) for w in s.get("fault_windows", [])
                       if w.get("fault") != "final-heal")
        result["faults"] = {"took_effect": took.get("True", 0), "no_effect": took.get("False", 0),
                            "cannot_tell": took.get("None", 0)}
        result["acknowledged"] = s.get("counts", {}).get("acknowledged")
    if not result["passed"]:
        lines = [l for l in out.stdout.splitlines() if l.startswith("E ")]
        result["failure"] = "\n".join(lines[:12])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--test", default=DEFAULT_TEST)
    ap.add_argument("--coordination", choices=["controller", "v2"], default="controller",
                    help="the coordination mode of the cluster (pytest --chaoslog-coordination)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    stamp = dt.datetime.now().strftime("%Y-%m-%d-%H%M")
    out = Path(a.out) if a.out else RAW / f"pressure-{stamp}.json"
    runs_dir = out.with_suffix("")
    runs_dir.mkdir(parents=True, exist_ok=True)
    report = {"command": " ".join([".venv/bin/python", "bench/pressure_runs.py",
                                   *(argv if argv is not None else sys.argv[1:])]),
              "test": a.test, "coordination": a.coordination, "commit": subprocess.run(
                  ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                  text=True).stdout.strip(),
              "started": dt.datetime.now().isoformat(timespec="seconds"), "runs": []}
    for i in range(a.runs):
        seed = a.first_seed + i
        r = one_run(a.test, seed, runs_dir / f"seed-{seed}", a.coordination)
        report["runs"].append(r)
        out.write_text(json.dumps(report, indent=1) + "\n")
        faults = r.get("faults", {})
        print(f"[{i + 1}/{a.runs}] seed {seed}: {'passed' if r['passed'] else 'FAILED'} "
              f"in {r['seconds']:.0f}s; faults took effect {faults.get('took_effect', '?')}, "
              f"no effect {faults.get('no_effect', '?')}, cannot tell "
              f"{faults.get('cannot_tell', '?')}; fatal {r.get('fatal', {})}", flush=True)
    passed = sum(r["passed"] for r in report["runs"])
    report["summary"] = {"runs": a.runs, "passed": passed, "false_alarms": a.runs - passed}
    report["finished"] = dt.datetime.now().isoformat(timespec="seconds")
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{passed} of {a.runs} runs passed -> {out}")
    return 0 if passed == a.runs else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; the runs so far are in the --out file", file=sys.stderr)
        sys.exit(130)
