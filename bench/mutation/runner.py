"""Mutation testing of chaoslog's suites: how many broker and controller bugs
do they catch, and how fast?

    .venv/bin/python bench/mutation/runner.py [--target suites|smoke|v2|"pytest args..."]
        [--only ID ...] [--timeout SECONDS] [--out runs/bench/mutation-DATE.json]

Each mutant (bench/mutation/mutants.py) is one hand-written bug in cluster/:
one exact piece of code replaced by a wrong one, the way a real bug breaks one
guarantee of the design. For each mutant, in turn: a git worktree of HEAD in a
temporary directory, the mutant applied there, then the target command run
from that worktree with PYTHONPATH pointing at it, so that the harness, the
images it builds (their tag hashes the sources) and the brokers in them all
run the mutated code. A mutant is *killed* when the command fails (pytest -x
stops at the first failing test, which we record with the time it took from
the start); it *survives* when the command passes; it *times out* after
--timeout seconds (counted as a survivor: it was not caught in time). Before
the mutants, the same command runs once unmutated: it must pass, or the
score means nothing.

Results go to a JSON file (and a table on stdout): per mutant the guarantee it
breaks, killed/survived/timeout, the test that killed it and the seconds to
the kill. The worktree and the mutant's broker image are removed after each
mutant.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(REPO))

from bench.paths import RAW  # noqa: E402

from mutants import MUTANTS, Mutant  # noqa: E402
from mutants_blind import MUTANTS_BLIND  # noqa: E402
from mutants_blind2 import MUTANTS_BLIND_2, MUTANTS_BLIND_2_V2  # noqa: E402
from mutants_txn import MUTANTS_TXN  # noqa: E402

# mutants.py: written with the suites in view; mutants_blind.py: written by
# someone who read only cluster/ and the design (how an outsider's bugs fare);
# mutants_blind2.py: a second blind batch, its cluster/v2/ bugs measured in V2 mode;
# mutants_txn.py: the transaction code's, measured with its tests.
SETS = {"main": MUTANTS, "blind": MUTANTS_BLIND, "blind2": MUTANTS_BLIND_2,
        "blind2-v2": MUTANTS_BLIND_2_V2, "txn": MUTANTS_TXN,
        "all": MUTANTS + MUTANTS_BLIND + MUTANTS_BLIND_2 + MUTANTS_BLIND_2_V2 + MUTANTS_TXN}
# The target a set runs with when --target is not given.
DEFAULT_TARGET = {"blind2-v2": "v2", "txn": "txn"}

TARGETS = {
    "suites": ["-m", "pytest", "suites", "-x", "-q", "-p", "no:cacheprovider"],
    "smoke": ["-m", "pytest", "suites", "-x", "-q", "-m", "smoke", "-p", "no:cacheprovider"],
    # the suites in V2 mode (coordination=v2)
    "v2": ["-m", "pytest", "suites", "-x", "-q", "-p", "no:cacheprovider",
           "-m", "any_coordination or v2_only", "--chaoslog-coordination", "v2"],
    # the transaction tests (docs/design.md#transactions), until a transactional suite exists
    "txn": ["-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
            "tests/cluster/server/test_partition_transactions.py",
            "tests/cluster/server/test_open_transactions.py",
            "tests/cluster/server/test_transaction_coordinator.py",
            "tests/cluster/server/test_group_coordinator.py",
            "tests/cluster/server/test_transactions_e2e.py"],
}


class StaleMutant(Exception):
    """The mutant's code is not in the file (exactly once) any more."""


@dataclass
class Result:
    id: str
    file: str
    breaks: str
    outcome: str                   # killed | survived | timeout | stale | error
    seconds: float
    killed_by: str | None = None
    detail: str = ""
    equivalent: str = ""           # why it cannot be told from the original (mutants.py)


def apply(mutant: Mutant, tree: Path) -> None:
    path = tree / mutant.file
    text = path.read_text()
    n = text.count(mutant.find)
    if n != 1:
        raise StaleMutant(f"{mutant.file}: the code to mutate occurs {n} times (want exactly 1)")
    path.write_text(text.replace(mutant.find, mutant.replace))


def check_all_apply(mutants: list[Mutant]) -> list[str]:
    """Every mutant applies to the current sources (in memory)."""
    problems = []
    for m in mutants:
        text = (REPO / m.file).read_text()
        n = text.count(m.find)
        if n != 1:
            problems.append(f"{m.id}: {m.file}: the code to mutate occurs {n} times")
    return problems


def worktree(tmp: Path) -> Path:
    path = tmp / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path), "HEAD"],
                   check=True)
    return path


def remove_worktree(path: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                   capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)
_ASSERTION = re.compile(r"^E +(\w*Error: .*)$", re.M)
_ANOMALY = re.compile(r"^E +([a-z]+(?:-[a-z]+)*) \(\d+\): ", re.M)


def why_killed(text: str) -> str:
    """What the killing test said: the anomaly types of a verdict, else the
    first assertion line."""
    kinds = sorted(set(_ANOMALY.findall(text)))
    if kinds:
        return "anomalies: " + ", ".join(kinds)
    m = _ASSERTION.search(text)
    return m.group(1)[:240] if m else ""


def run_target(argv: list[str], tree: Path, timeout: float, log: Path
               ) -> tuple[str, float, str | None, str]:
    """(killed | survived | timeout, seconds, the first failing test, why)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.monotonic()
    with open(log, "wb") as out:
        # SIGINT back to its default in the child: a runner started in the
        # background by a shell inherits it ignored, and SIGINT is how
        # pytest is stopped with its teardown (clusters removed).
        p = subprocess.Popen([sys.executable, *argv], cwd=tree, env=env, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            code = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_target(p)
            return "timeout", time.monotonic() - t0, None, ""
        except BaseException:
            stop_target(p)  # the runner itself was interrupted: take the target with it
            raise
    seconds = time.monotonic() - t0
    text = log.read_text(errors="replace")
    m = _FAILED.search(text)
    if code == 0:
        return "survived", seconds, None, ""
    return "killed", seconds, m.group(1) if m else f"exit {code}", why_killed(text)


def stop_target(p: subprocess.Popen) -> None:
    """SIGINT to the target's process group (pytest tears its clusters
    down), SIGKILL if it is not gone within two minutes."""
    try:
        os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    except ProcessLookupError:
        pass


def remove_images_of(tree: Path) -> None:
    """The broker image built from the mutated sources (tagged by their hash)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from harness import images; "
            "print(images.current_tags().broker)")
    out = subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree)})
    tag = out.stdout.strip()
    if tag:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True)


def table(results_files: list[Path]) -> str:
    """A Markdown table of one or more results files (a later file's result
    for a mutant replaces an earlier one's): one row per mutant, with the
    commit it ran at and what the killing test said (read from the mutant's
    log when the file lacks it); then the score."""
    notes = {m.id: m for m in SETS["all"]}
    latest: dict[str, tuple[dict, Path, str]] = {}
    for path in results_files:
        report = json.loads(path.read_text())
        for r in report["results"]:
            latest[r["id"]] = (r, path.with_suffix(""), report.get("commit", "")[:7])
    order = [m.id for m in SETS["all"] if m.id in latest] + sorted(set(latest) - set(notes))
    rows = ["| mutant | breaks | outcome | seconds | killed by | what it saw | commit |",
            "|---|---|---|---|---|---|---|"]
    for mid in order:
        r, logs, commit = latest[mid]
        why = r.get("detail") or ""
        log = logs / f"{r['id']}.log"
        if not why and r["outcome"] == "killed" and log.is_file():
            why = why_killed(log.read_text(errors="replace"))
        if r.get("equivalent") or (r["id"] in notes and notes[r["id"]].equivalent):
            why = "equivalent: " + (r.get("equivalent") or notes[r["id"]].equivalent)
        test = (r.get("killed_by") or "").replace("suites/", "")
        rows.append(f"| `{r['id']}` | {r['breaks']} | {r['outcome']} | {r['seconds']:.0f} | "
                    f"{test} | {why.replace('|', '/')} | {commit} |")
    scored = [latest[m][0] for m in order
              if not (latest[m][0].get("equivalent") or (m in notes and notes[m].equivalent))]
    killed = [r for r in scored if r["outcome"] == "killed"]
    smoke = [r for r in killed if any(t in (r.get("killed_by") or "") for t in SMOKE_TESTS)]
    rows.append("")
    rows.append(f"{len(order)} mutants, {len(order) - len(scored)} equivalent; of the other "
                f"{len(scored)}: {len(killed)} killed ({100 * len(killed) / max(1, len(scored)):.0f} %), "
                f"{len(smoke)} of them by smoke-tier tests "
                f"({100 * len(smoke) / max(1, len(scored)):.0f} % of all).")
    return "\n".join(rows)


# The tests of the smoke tier (`-m smoke`); `pytest suites -x` runs them first,
# so a mutant they kill in the full run the smoke tier kills alone.
SMOKE_TESTS = ("test_suite_guarantees.py::",)


def machine() -> dict[str, str]:
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": str(os.cpu_count()), "python": platform.python_version(),
            "kernel": platform.release()}


def main(argv: list[str] | None = None) -> int:
    # SIGTERM ends the runner like Ctrl-C: the target is stopped, its
    # worktree removed, the results so far kept.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=None,
                    help="suites, smoke, v2, or a pytest command line after `python -m` (quoted); "
                         "default: v2 for --set blind2-v2, else suites")
    ap.add_argument("--set", default="main", choices=sorted(SETS),
                    help="which mutants: main (mutants.py), blind (mutants_blind.py), blind2 and "
                         "blind2-v2 (mutants_blind2.py), txn (mutants_txn.py) or all")
    ap.add_argument("--only", nargs="*", default=None, metavar="ID")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds a mutant may survive before it counts as not caught")
    ap.add_argument("--out", default=None, help="results JSON (default runs/bench/mutation-DATE.json)")
    ap.add_argument("--skip-baseline", action="store_true", help="do not run the unmutated target first")
    ap.add_argument("--baseline-timeout", type=float, default=3600.0,
                    help="seconds the unmutated target may take (it runs to its end)")
    ap.add_argument("--check", action="store_true", help="only check that every mutant applies")
    ap.add_argument("--table", metavar="RESULTS_JSON", nargs="+",
                    help="print the results of earlier runs as one Markdown table (a later "
                         "file's result for a mutant replaces an earlier one's), and exit")
    a = ap.parse_args(argv)
    if a.table:
        print(table([Path(t) for t in a.table]))
        return 0

    mutants = SETS[a.set]
    problems = check_all_apply(mutants)
    if problems or a.check:
        for p in problems:
            print(f"stale mutant: {p}", file=sys.stderr)
        print(f"{len(mutants) - len(problems)} of {len(mutants)} mutants apply")
        return 1 if problems else 0
    target_name = a.target or DEFAULT_TARGET.get(a.set, "suites")
    target = TARGETS.get(target_name) or shlex.split(target_name)
    chosen = [m for m in mutants if a.only is None or m.id in a.only]
    if a.only and len(chosen) != len(a.only):
        print(f"unknown mutant ids: {sorted(set(a.only) - {m.id for m in chosen})}", file=sys.stderr)
        return 2
    stamp = dt.datetime.now().strftime("%Y-%m-%d-%H%M")
    out = Path(a.out) if a.out else RAW / f"mutation-{stamp}.json"
    logs = out.with_suffix("")
    logs.mkdir(parents=True, exist_ok=True)
    report = {"command": " ".join([".venv/bin/python", "bench/mutation/runner.py", *(argv or sys.argv[1:])]),
              "target": target, "timeout_s": a.timeout, "machine": machine(),
              "commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                                       capture_output=True, text=True).stdout.strip(),
              "started": dt.datetime.now().isoformat(timespec="seconds"), "results": []}

    def save() -> None:
        out.write_text(json.dumps(report, indent=1) + "\n")

    if not a.skip_baseline:
        with tempfile.TemporaryDirectory(prefix="chaoslog-mutant-") as tmp:
            tree = worktree(Path(tmp))
            try:
                outcome, secs, failed, _why = run_target(target, tree, a.baseline_timeout,
                                                         logs / "baseline.log")
            finally:
                remove_worktree(tree)
        report["baseline"] = {"outcome": outcome, "seconds": round(secs, 1), "failed": failed}
        save()
        print(f"baseline (unmutated): {outcome} in {secs:.0f}s {failed or ''}", flush=True)
        if outcome != "survived":
            print("the unmutated target does not pass: fix that first", file=sys.stderr)
            return 1
    for i, m in enumerate(chosen, 1):
        with tempfile.TemporaryDirectory(prefix="chaoslog-mutant-") as tmp:
            tree = worktree(Path(tmp))
            try:
                apply(m, tree)
                outcome, secs, killer, why = run_target(target, tree, a.timeout,
                                                        logs / f"{m.id}.log")
                r = Result(m.id, m.file, m.breaks, outcome, round(secs, 1), killer, why,
                           equivalent=m.equivalent)
            except StaleMutant as e:
                r = Result(m.id, m.file, m.breaks, "stale", 0.0, detail=str(e),
                           equivalent=m.equivalent)
            finally:
                remove_images_of(tree)
                remove_worktree(tree)
        report["results"].append(asdict(r))
        save()
        print(f"[{i}/{len(chosen)}] {m.id:<34} {r.outcome:<8} {r.seconds:7.1f}s  {r.killed_by or r.detail}",
              flush=True)
    results = report["results"]
    killed = sum(r["outcome"] == "killed" for r in results)
    scored = [r for r in results if not r["equivalent"]]
    killed_scored = sum(r["outcome"] == "killed" for r in scored)
    report["score"] = {"mutants": len(results), "killed": killed,
                       "equivalent": len(results) - len(scored),
                       "killed_share": round(killed_scored / len(scored), 3) if scored else None,
                       "killed_within_s": a.timeout}
    report["finished"] = dt.datetime.now().isoformat(timespec="seconds")
    save()
    print(f"killed {killed} of {len(results)} within {a.timeout:.0f}s; score (equivalent "
          f"mutants left out): {killed_scored} of {len(scored)} -> {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: the target was stopped; results so far are in the --out file",
              file=sys.stderr)
        sys.exit(130)
