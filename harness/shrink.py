"""Shrinking a failing run to a small reproducer (`chaoslog shrink RUN_DIR`).

A run that found an anomaly after twenty overlapping faults says little
about which of them mattered. Shrinking replays the run (its RunSpec, kept
in run.json as `spec`) with less and keeps each reduction under which the
same anomaly type still shows:

  1. fewer faults: delta debugging (Zeller's ddmin) over the schedule's
     steps, starting with no faults at all (a bug that needs none); the
     steps of one drawn recipe (Step.chain) go or stay together: a recipe
     is the chain of faults that reaches a state, and a part of it alone
     reaches nothing (its parts are shortened in stage 2 like any step);
  2. shorter faults: each remaining step's duration halved while it holds;
  3. a shorter run: the schedule ends soon after its last fault;
  4. a lower rate: the workload's sends per second halved while it holds.

Real clusters are not deterministic: a candidate is tried up to `tries`
times and counts as reproducing at its first failing try; the final
reproducer is run `tries` more times and the report says in how many the
anomaly came back. Every try is a whole run on a fresh cluster, kept in the
output directory as evidence.

The budget bounds everything, the confirmation too: a try is started only
if it ends in time (harness.run.RunTimes), a try of the search only if one
confirming try of its length still fits after it. The first candidate that
does not fit ends the search, recorded once as "not done: out of time"; a
confirmation that does not fit is recorded so.

The search itself (`Shrinker`) is pure: it is handed a `replay(spec)`
that returns the fatal anomaly types of one run (None when the run could
not be judged), so it is unit-tested with a fake one.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from faults.nemesis import Schedule, Step
from harness.run import RunSpec, RunTimes

T = TypeVar("T")
# replay(spec) -> the fatal anomaly types of that run (into spec.out), or None
# when the run could not be judged (harness error, final reads incomplete).
Replay = Callable[[RunSpec], "set[str] | None"]

MIN_STEP_S = 1.0        # a fault is not shortened below this
RUN_MARGIN_S = 5.0      # a shortened run goes on this long after its last fault ends
MIN_RATE = 10.0         # sends/s: not lowered below this
NOT_DONE = "not done: out of time"


def least_budget_s(spec: RunSpec, times: RunTimes) -> float:
    """The least time a try of the search of `spec` needs: its own run and
    one confirming run of its length after it."""
    return 2 * times.expected_s(spec)


def ddmin(items: Sequence[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """Zeller's ddmin: a 1-minimal sublist of `items` (order kept) for which
    `fails` still holds; `fails(items)` is assumed. 1-minimal: removing any
    single item makes it pass."""
    items = list(items)
    n = 2
    while len(items) >= 2:
        size = math.ceil(len(items) / n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        for i in range(len(chunks)):   # one chunk alone, then everything but one chunk
            if fails(chunks[i]):
                items, n = chunks[i], 2
                break
        else:
            for i in range(len(chunks)):
                rest = [x for j, c in enumerate(chunks) if j != i for x in c]
                if len(chunks) > 2 and fails(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(2 * n, len(items))
    return items


@dataclass
class Attempt:
    """One candidate and its tries."""
    stage: str
    what: str
    steps: int
    tries: int = 0
    reproduced: int = 0
    types: list[list[str] | None] = field(default_factory=list)   # fatal types of each try
    run_dirs: list[str] = field(default_factory=list)
    not_done: str | None = None        # NOT_DONE: a try did not fit in the budget

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


class Shrinker:
    """Shrinks `spec` while one of `target` (anomaly types) still shows.
    `budget_s` bounds the whole search and the confirmation; a candidate not
    tried for lack of time counts as not reproducing, so the result is
    always a reproducer that did fail. `times` says how long a run takes
    (shared with a campaign, which learned it from its runs)."""

    def __init__(self, spec: RunSpec, target: set[str], replay: Replay, out: Path, *,
                 tries: int = 3, budget_s: float = 4 * 3600.0,
                 log: Callable[[str], None] = lambda m: None,
                 clock: Callable[[], float] = time.monotonic,
                 times: RunTimes | None = None) -> None:
        if tries < 1:
            raise ValueError("tries must be at least 1")
        self.spec = spec
        self.target = set(target)
        self.replay = replay
        self.out = Path(out)
        self.tries = tries
        self.log = log
        self.clock = clock
        self.times = times or RunTimes()
        self.deadline = clock() + budget_s
        self.attempts: list[Attempt] = []
        self._seen: dict[str, bool] = {}
        self.runs = 0            # whole runs made so far
        self.not_done: str | None = None   # the candidate the search stopped at, out of time

    # -- one candidate ---------------------------------------------------------------------
    def reproduces(self, spec: RunSpec, stage: str, what: str, tries: int | None = None,
                   stop_at_first: bool = True, confirming: bool = False) -> bool:
        key = json.dumps(spec.to_json(), sort_keys=True)
        if stop_at_first and key in self._seen:
            return self._seen[key]
        if self.not_done and not confirming:
            return False         # out of time: the search is over
        a = Attempt(stage, what, len(spec.schedule.steps))
        self.attempts.append(a)
        for _ in range(tries or self.tries):
            need = self.times.expected_s(spec) if confirming else least_budget_s(spec, self.times)
            if self.clock() + need > self.deadline:
                a.not_done = NOT_DONE
                break
            self.runs += 1
            run_dir = self.out / "tries" / f"{self.runs:03d}"
            t0 = self.clock()
            types = self.replay(replace(spec, out=run_dir))
            self.times.record(spec, self.clock() - t0)
            a.tries += 1
            a.types.append(sorted(types) if types is not None else None)
            a.run_dirs.append(str(run_dir))
            if types is not None and types & self.target:
                a.reproduced += 1
                if stop_at_first:
                    break
        if a.not_done and not confirming:
            self.not_done = f"{stage}: {what}"
        if a.tries:
            self.log(f"{stage}: {what}: {'reproduced' if a.reproduced else 'not reproduced'} "
                     f"({a.reproduced} of {a.tries} tries){'; then ' + NOT_DONE if a.not_done else ''}")
            self._seen[key] = a.reproduced > 0
        else:
            self.log(f"{stage}: {what}: {NOT_DONE}")
        return a.reproduced > 0

    # -- the stages ------------------------------------------------------------------------
    def shrink(self) -> RunSpec:
        spec = self.spec
        units = ddmin(_units(spec.schedule.steps),
                      lambda us: self._with_steps(spec, _flat(us), "fewer faults"))
        steps = _flat(units)
        if len(units) == 1 and self._with_steps(spec, [], "no faults at all"):
            steps = []   # ddmin never tries the empty schedule: a bug that needs no fault
        spec = _with_schedule(spec, replace(spec.schedule, steps=steps))
        spec = self._shorter_steps(spec)
        spec = self._shorter_run(spec)
        return self._lower_rate(spec)

    def _with_steps(self, spec: RunSpec, steps: list[Step], stage: str) -> bool:
        candidate = _with_schedule(spec, replace(spec.schedule, steps=list(steps)))
        return self.reproduces(candidate, stage, f"{len(steps)} of {len(spec.schedule.steps)} "
                                                 f"faults: {_names(steps)}")

    def _shorter_steps(self, spec: RunSpec) -> RunSpec:
        for i in range(len(spec.schedule.steps)):
            while True:
                step = spec.schedule.steps[i]
                shorter = max(MIN_STEP_S, round(step.duration_s / 2, 1))
                if shorter >= step.duration_s:
                    break
                steps = list(spec.schedule.steps)
                steps[i] = replace(step, duration_s=shorter)
                candidate = _with_schedule(spec, replace(spec.schedule, steps=steps))
                if not self.reproduces(candidate, "shorter faults",
                                       f"{step.fault} at {step.at_s:g}s for {shorter:g}s"):
                    break
                spec = candidate
        return spec

    def _shorter_run(self, spec: RunSpec) -> RunSpec:
        end = max((s.at_s + s.duration_s for s in spec.schedule.steps), default=0.0)
        duration = round(end + RUN_MARGIN_S, 1)
        if duration >= spec.schedule.duration_s:
            return spec
        candidate = _with_schedule(spec, replace(spec.schedule, duration_s=duration))
        ok = self.reproduces(candidate, "shorter run", f"{duration:g}s instead of "
                                                      f"{spec.schedule.duration_s:g}s")
        return candidate if ok else spec

    def _lower_rate(self, spec: RunSpec) -> RunSpec:
        while spec.workload.rate and spec.workload.rate / 2 >= MIN_RATE:
            rate = spec.workload.rate / 2
            candidate = replace(spec, workload=replace(spec.workload, rate=rate))
            if not self.reproduces(candidate, "lower rate", f"{rate:g} sends/s"):
                break
            spec = candidate
        return spec

    # -- the result ------------------------------------------------------------------------
    def confirm(self, spec: RunSpec) -> Attempt:
        """The final reproducer, run `tries` times within the budget: how
        often it fails (`not_done` when a try did not fit)."""
        self.reproduces(spec, "confirm", "the shrunk run", stop_at_first=False, confirming=True)
        return self.attempts[-1]


def _units(steps: Sequence[Step]) -> list[list[Step]]:
    """The steps in the units ddmin drops: one per step, one per drawn
    recipe (its steps share Step.chain), in the order of their first step."""
    units: list[list[Step]] = []
    chains: dict[int, list[Step]] = {}
    for s in steps:
        if s.chain is None:
            units.append([s])
        elif s.chain in chains:
            chains[s.chain].append(s)
        else:
            chains[s.chain] = [s]
            units.append(chains[s.chain])
    return units


def _flat(units: Sequence[list[Step]]) -> list[Step]:
    return sorted((s for u in units for s in u), key=lambda s: (s.at_s, s.lane))


def _with_schedule(spec: RunSpec, schedule: Schedule) -> RunSpec:
    return replace(spec, schedule=schedule)


def _names(steps: Sequence[Step]) -> str:
    return ", ".join(f"{s.fault}@{s.at_s:g}s" for s in steps) or "none"
