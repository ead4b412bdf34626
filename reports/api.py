"""`analyze`: check run directories and write summary.json, report.html and junit.xml.

This is the one entry point the CLI, the harness and CI use. It chooses the
checker (Spark by default, the reference checker for small runs or when no JVM
is wanted), turns findings into summaries, fetches the ops around anomalies
for the report, and writes the three files per run.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from reports.context import requests_for
from reports.errors import HistoryError
from reports.exit_codes import of_verdict, worst
from reports.readers import RunInput, open_runs
from reports.resources import read_samples, resource_series
from reports.summary import DEFAULT_MAX_INSTANCES, build_summary, write_json


@dataclass
class RunVerdict:
    run_dir: Path
    verdict: str  # valid | invalid | unknown | error
    valid: bool | None = None
    run: str | None = None
    summary: dict | None = None
    out_dir: Path | None = None
    summary_path: Path | None = None
    report_path: Path | None = None
    junit_path: Path | None = None
    error: str | None = None

    @property
    def exit_code(self) -> int:
        return of_verdict(self.verdict)


def combined_exit(verdicts: list[RunVerdict]) -> int:
    """Error beats invalid beats unknown beats valid (reports/exit_codes.py)."""
    return worst(v.exit_code for v in verdicts)


def _out_dirs(run_dirs: list[Path], out) -> list[Path]:
    if out is None:
        return list(run_dirs)
    out = Path(out)
    used: dict[str, int] = {}
    dirs = []
    for d in run_dirs:
        name = d.resolve().name or "run"
        used[name] = used.get(name, 0) + 1
        dirs.append(out / (name if used[name] == 1 else f"{name}-{used[name]}"))
    return dirs


def analyze(run_dirs, out=None, master=None, spark=None, checker: str = "spark",
            max_instances: int | None = DEFAULT_MAX_INSTANCES, report: bool = True) -> list[RunVerdict]:
    """Check each run directory; write summary.json, report.html, junit.xml.

    Outputs go into each run directory, or with `out` into out/<run dir name>/.
    `spark` is an existing SparkSession to use; otherwise one is made
    (local[*], or `master`). A run that cannot be read gets verdict "error"
    with the HistoryError's message; the others are still checked.
    """
    run_dirs = [Path(d) for d in run_dirs]
    outs = _out_dirs(run_dirs, out)
    inputs = open_runs(run_dirs)
    runs = [r for r in inputs if isinstance(r, RunInput)]
    results, contexts = _check(runs, checker, master, spark, max_instances, report)
    verdicts = []
    done = iter(zip(results, contexts))
    for d, o, r in zip(run_dirs, outs, inputs):
        if isinstance(r, HistoryError):
            verdicts.append(RunVerdict(d, "error", error=str(r)))
            continue
        found, ctx = next(done)
        if isinstance(found, HistoryError):
            verdicts.append(RunVerdict(d, "error", run=r.run_id, error=str(found)))
            continue
        verdicts.append(_write(d, o, r, found, ctx, report))
    return verdicts


def findings(run_dirs, checker: str = "spark", master=None, spark=None,
             max_instances: int | None = DEFAULT_MAX_INSTANCES) -> list:
    """The Findings of each run directory (or the HistoryError that kept it
    from being read), writing nothing: what `analyze` summarizes."""
    inputs = open_runs([Path(d) for d in run_dirs])
    results, _ = _check([r for r in inputs if isinstance(r, RunInput)], checker, master, spark,
                        max_instances, report=False)
    done = iter(results)
    return [r if isinstance(r, HistoryError) else next(done) for r in inputs]


def _check(runs, checker, master, spark, max_instances, report):
    """Findings and report contexts for each run, in order."""
    if not runs:
        return [], []
    if checker == "reference":
        from reports import reference
        from reports.context import reference_context

        results, contexts = [], []
        for run in runs:
            try:
                f = reference.check(run, max_instances)
            except HistoryError as e:
                results.append(e)
                contexts.append(None)
                continue
            results.append(f)
            s = build_summary(f)
            contexts.append(reference_context(run, requests_for(s)) if report and _any(s) else None)
        return results, contexts
    if checker != "spark":
        raise ValueError(f"unknown checker {checker!r}")
    from reports.spark_checker import SparkChecker, get_spark

    sc = SparkChecker(spark or get_spark(master), max_instances)
    try:
        results = sc.check(runs)
        want = {}
        for k, f in enumerate(results):
            if report and not isinstance(f, HistoryError):
                s = build_summary(f)
                if _any(s):
                    want[k] = requests_for(s)
        got = sc.context(want) if want else {}
        contexts = [got.get(k) for k in range(len(results))]
    finally:
        sc.close()
    return results, contexts


def _any(summary: dict) -> bool:
    return any(summary["anomaly_counts"].values())


def _write(run_dir: Path, out_dir: Path, run: RunInput, findings, ctx, report: bool) -> RunVerdict:
    from reports.junit import write_junit
    from reports.report import write_report

    summary = build_summary(findings)
    summary["resources"] = resource_series(read_samples(run_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir.resolve() != run_dir.resolve():
        # keep the output directory self-contained (the nightly overview reads run.json there)
        shutil.copyfile(run_dir / "run.json", out_dir / "run.json")
    v = RunVerdict(run_dir, summary["verdict"], summary["valid"], summary["run"], summary, out_dir)
    v.summary_path = out_dir / "summary.json"
    write_json(v.summary_path, summary)
    if report:
        v.report_path = write_report(out_dir / "report.html", summary, run.run_json, ctx)
        v.junit_path = write_junit(out_dir / "junit.xml", [summary])
    return v
