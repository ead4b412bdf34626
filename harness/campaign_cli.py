"""`chaoslog campaign [FILE] --budget 8h --out DIR`: the nightly job.

Runs randomized chaos runs (harness/campaign.py: the matrix, the seeds, the
state) back to back until the budget is spent, with a progress line. A run
that errors is recorded with its reason and the campaign goes on. Between
runs it checks that the run left no container behind (and removes any).
A failing run is shrunk (`chaoslog shrink`) within the campaign's
shrink_budget, its reproducer written next to it, unless a reproducer the
campaign already has explains it (the same anomaly types, from the same
fault kinds). Killed at any moment, the same command resumes:
OUT/campaign.json says what ran; a shrink the kill interrupted starts over.

The budget is a bound: a run that cannot end within what is left of it is
not started (how long a run takes: harness.run.RunTimes, learned from the
campaign's runs), and neither is a shrink or a confirming try; what was not
done for lack of time is recorded as "not done: out of time", once.

Exit codes (reports/exit_codes.py): 0 every run judged valid, 1 some run
found an anomaly, 2 refused (bad file or arguments), 3 no run could be
judged.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from harness.campaign import (DEFAULT_FILE, Campaign, CampaignError, CampaignState,
                              PlannedRun, overlay, parse_budget)
from harness.run import Refused, RunSpec, RunTimes, execute, log_line
from harness.shrink import NOT_DONE, least_budget_s
from reports.exit_codes import EXIT_INVALID, EXIT_OK, EXIT_REFUSED, EXIT_UNKNOWN


def spec_of(campaign: Campaign, planned: PlannedRun, run_dir: Path, backend: str | None) -> RunSpec:
    """The RunSpec of a planned run, validated (CampaignError names the cell)."""
    fields = overlay(planned.fields, {"backend": backend}) if backend else planned.fields
    try:
        spec = RunSpec.from_data(fields)
        return replace(spec, out=run_dir, checker=campaign.checker).validate()
    except Refused as e:
        raise CampaignError(f"{planned.label}: {e}") from None


def check_matrix(campaign: Campaign, backend: str | None) -> None:
    """Every cell once, before anything runs."""
    for i in range(len(campaign.combinations())):
        spec_of(campaign, campaign.plan(i), Path("/nonexistent"), backend)


def leftovers() -> list[str]:
    """Containers and networks this process started and did not remove."""
    try:
        from harness import reaper
        from harness.docker_engine import docker_client
        client = docker_client()
    except Exception:  # noqa: BLE001 - no engine: nothing of ours can be left there
        return []
    mine = reaper.owner_token()
    left = []
    for c in client.containers.list(all=True, filters={"label": f"{reaper.OWNER_LABEL}={mine}"}):
        left.append(f"container {c.name}")
        c.remove(force=True, v=True)
    for n in client.networks.list(filters={"label": f"{reaper.OWNER_LABEL}={mine}"}):
        left.append(f"network {n.name}")
        n.remove()
    return left


class CampaignRunner:
    """The loop. `run(spec)` makes one run (harness.run.execute) and each
    try of a shrink; `shrink(run_dir, spec, fatal, budget_s)` shrinks a
    failure (default: shrink_failure with `run`); `left()` lists (and
    removes) what a run left behind; tests hand in fakes and a fake clock."""

    def __init__(self, campaign: Campaign, out: Path, *, budget_s: float,
                 backend: str | None = None,
                 run: Callable[[RunSpec], Any] | None = None,
                 shrink: Callable[[Path, RunSpec, set[str], float], dict[str, Any]] | None = None,
                 left: Callable[[], list[str]] = leftovers,
                 clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] = log_line) -> None:
        self.campaign = campaign
        self.out = Path(out).absolute()   # run_dir in campaign.json holds wherever it is read
        self.budget_s = budget_s
        self.backend = backend
        self.run = run or (lambda spec: execute(spec, log=lambda m: None))
        self.shrink = shrink or self._shrink_failure
        self.left = left
        self.clock = clock
        self.log = log
        self.times = RunTimes()

    def go(self) -> CampaignState:
        self.out.mkdir(parents=True, exist_ok=True)
        state = CampaignState.open(self.out, self.campaign)
        for r in state.interrupted():
            self.log(f"run {r['index']} ({r['label']}) was interrupted; its directory is kept")
        for r in state.runs:
            if (r.get("shrunk") or {}).get("status") == "started":
                self.log(f"run {r['index']}: the campaign stopped while shrinking it; "
                         f"shrinking it again")
                self._shrink_again(r, state)
        while True:
            index = len(state.runs)
            planned = self.campaign.plan(index)
            run_dir = self.out / "runs" / f"{index:04d}"
            spec = spec_of(self.campaign, planned, run_dir, self.backend)
            need, left = self.times.expected_s(spec), self.budget_s - state.spent_s
            if need > left:
                self.log(f"run {index} ({planned.label}) would take about {_hms(need)}, "
                         f"{_hms(left)} of the budget is left: not started")
                break
            record: dict[str, Any] = {"index": index, "label": planned.label, "cell": planned.cell,
                                      "seed": planned.seed, "run_dir": str(run_dir),
                                      "status": "started"}
            state.runs.append(record)
            state.save()
            self.log(f"run {index} ({planned.label}, seed {planned.seed}, "
                     f"{spec.schedule.duration_s:g} s): started; {self._progress(state)}")
            t0 = self.clock()
            try:
                self._one(spec, record, state, t0)
            finally:
                state.spent_s += self.clock() - t0
                state.save()
        self.log(f"campaign {self.campaign.name} done: {self._progress(state)}")
        return state

    def _one(self, spec: RunSpec, record: dict[str, Any], state: CampaignState, t0: float) -> None:
        try:
            result = self.run(spec)
        except Exception as e:  # noqa: BLE001 - recorded; the campaign goes on
            record.update(status="error", reason=f"{type(e).__name__}: {e}")
        else:
            self.times.record(spec, self.clock() - t0)
            summary = getattr(result.verdict, "summary", None) or {}
            fatal = sorted(summary.get("fatal") or [])
            record.update(status="done", exit_code=result.exit_code,
                          verdict=summary.get("verdict") or getattr(result.verdict, "verdict", None)
                          or "unjudged", fatal=fatal)
            if result.exit_code not in (0, 1) and not summary:
                record["reason"] = (result.outcome or {}).get("error") or f"exit {result.exit_code}"
        left = self.left()
        if left:
            record["left_behind"] = left
            self.log(f"run {record['index']} left {', '.join(left)} behind (removed)")
        state.save()
        self._shrink(record, spec, state, t0)
        self.log(f"run {record['index']}: {record.get('verdict', record['status'])}"
                 f"{' ' + ','.join(record.get('fatal') or []) if record.get('fatal') else ''}"
                 f"{' (' + record['reason'] + ')' if record.get('reason') else ''}")

    def _shrink(self, record: dict[str, Any], spec: RunSpec, state: CampaignState,
                t0: float) -> None:
        """Shrink the run's failure within what is left of both budgets,
        unless an earlier reproducer explains it (_explained_by) or the
        shrink cannot fit (not done: out of time). Marked as started first,
        so that a campaign killed meanwhile shrinks the run again when it
        resumes."""
        fatal_types = set(record.get("fatal") or [])
        if not fatal_types or not self.campaign.shrink:
            return
        remaining = self.budget_s - state.spent_s - (self.clock() - t0)
        kinds = {step.fault for step in spec.schedule.steps}
        done_by = self._explained_by(state, fatal_types, kinds)
        if done_by is not None:
            record["shrunk"] = {"skipped": f"run {done_by}'s reproducer, of the fault kinds of "
                                           f"this run, reproduced the same anomalies"}
        elif least_budget_s(spec, self.times) > remaining:
            record["shrunk"] = {"not_done": NOT_DONE}
            self.log(f"run {record['index']}: shrink {NOT_DONE}")
        else:
            record["shrunk"] = {"status": "started"}
            state.save()
            try:
                record["shrunk"] = self.shrink(Path(record["run_dir"]), spec, fatal_types,
                                               min(self.campaign.shrink_budget_s, remaining))
            except Exception as e:  # noqa: BLE001 - recorded; the campaign goes on
                record["shrunk"] = {"error": f"{type(e).__name__}: {e}"}
        state.save()

    def _shrink_failure(self, run_dir: Path, spec: RunSpec, fatal: set[str],
                        budget_s: float) -> dict[str, Any]:
        """shrink_failure with the campaign's runner, clock and run times."""
        return shrink_failure(run_dir, spec, fatal, budget_s, tries=self.campaign.shrink_tries,
                              replay=lambda s: self.run(s).fatal(), times=self.times,
                              clock=self.clock, log=self.log)

    def _shrink_again(self, record: dict[str, Any], state: CampaignState) -> None:
        """A shrink the campaign died in: its tries so far are set aside
        (RUN_DIR/shrunk.interrupted) and the search starts over."""
        shrunk = Path(record["run_dir"]) / "shrunk"
        if shrunk.exists():
            aside = shrunk.with_name("shrunk.interrupted")
            shutil.rmtree(aside, ignore_errors=True)
            shrunk.rename(aside)
        del record["shrunk"]
        planned = self.campaign.plan(record["index"])
        spec = spec_of(self.campaign, planned, Path(record["run_dir"]), self.backend)
        t0 = self.clock()
        try:
            self._shrink(record, spec, state, t0)
        finally:
            state.spent_s += self.clock() - t0
            state.save()

    @staticmethod
    def _explained_by(state: CampaignState, fatal: set[str], kinds: set[str]) -> int | None:
        """The earlier run whose failure of the same anomaly types was shrunk
        to a reproducer that reproduced it, made of exactly the fault kinds
        this run had: shrinking this one would likely find that reproducer
        again and spend the budget on what the morning already has. Any other
        failure may have another cause and is shrunk: one with a partition
        besides kills is not explained by a kills-only reproducer, nor a
        kills-only one by a reproducer that needs a partition."""
        for r in state.runs:
            shrunk = r.get("shrunk") or {}
            if (fatal and set(r.get("fatal") or []) == fatal and shrunk.get("reproduced")
                    and set(shrunk.get("fault_kinds", ["?"])) == kinds):
                return r["index"]
        return None

    def _progress(self, state: CampaignState) -> str:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(state.counts().items())) or "no runs yet"
        return (f"{counts}; {_hms(state.spent_s)} of {_hms(self.budget_s)} spent")


def shrink_failure(run_dir: Path, spec: RunSpec, fatal: set[str], budget_s: float, *,
                   tries: int = 2, replay: Callable[[RunSpec], set[str] | None] | None = None,
                   times: RunTimes | None = None, clock: Callable[[], float] = time.monotonic,
                   log: Callable[[str], None] = log_line) -> dict[str, Any]:
    """chaoslog shrink's search on a campaign's failure, into RUN_DIR/shrunk,
    the confirmation included in `budget_s`."""
    from harness.shrink import Shrinker
    from harness.shrink_cli import replay as replay_run
    from harness.shrink_cli import write_reproducer
    out = run_dir / "shrunk"
    out.mkdir(parents=True, exist_ok=True)
    shrinker = Shrinker(replace(spec, out=None), fatal, replay or replay_run, out, tries=tries,
                        budget_s=budget_s, log=log, clock=clock, times=times)
    small = shrinker.shrink()
    confirmed = shrinker.confirm(small)
    write_reproducer(out, run_dir, small, fatal, shrinker, confirmed)
    done = {"dir": str(out), "faults": len(small.schedule.steps),
            "fault_kinds": sorted({step.fault for step in small.schedule.steps}),
            "reproduced": confirmed.reproduced, "tries": confirmed.tries}
    if shrinker.not_done:
        done["search"] = f"{NOT_DONE} at {shrinker.not_done}"
    if confirmed.not_done:
        done["confirmed"] = NOT_DONE
    return done


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def cmd_campaign(a: argparse.Namespace) -> int:
    try:
        campaign = Campaign.load(Path(a.file) if a.file else DEFAULT_FILE)
        budget = parse_budget(a.budget) if a.budget else campaign.budget_s
        check_matrix(campaign, a.backend)
    except (CampaignError, ValueError) as e:
        print(f"chaoslog campaign: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    out = Path(a.out)
    log_line(f"campaign {campaign.name}: {len(campaign.combinations())} combination(s), "
             f"budget {_hms(budget)}, into {out}")
    try:
        state = CampaignRunner(campaign, out, budget_s=budget, backend=a.backend).go()
    except CampaignError as e:
        print(f"chaoslog campaign: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    judged = [r for r in state.runs if r.get("verdict") in ("valid", "invalid")]
    if any(r.get("verdict") == "invalid" for r in state.runs):
        return EXIT_INVALID
    return EXIT_OK if judged else EXIT_UNKNOWN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("campaign", help="randomized chaos runs back to back until a time budget "
                                        "is spent; failures shrunk; resumable",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", metavar="FILE",
                   help=f"the campaign (TOML); default: the shipped {DEFAULT_FILE.name}")
    p.add_argument("--budget", help="time to spend, e.g. 8h or 90m (default: the file's)")
    p.add_argument("--out", required=True, help="the campaign's directory (its state: campaign.json)")
    p.add_argument("--backend", choices=("docker", "local"), help="default: docker when an engine answers")
    p.set_defaults(func=cmd_campaign)
