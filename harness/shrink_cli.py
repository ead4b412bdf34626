"""`chaoslog shrink RUN_DIR`: the failing run, made small (harness/shrink.py).

Reads the run's spec (run.json `spec`, written by `chaoslog run`) and the
anomaly types its verdict found fatal (summary.json), shrinks while one of
them still shows, and writes the reproducer into OUT (default RUN_DIR/shrunk):

  spec.json           the shrunk run: `chaoslog run --spec spec.json` in OUT
  schedule.json       its nemesis schedule alone
  command.txt         that command, naming spec.json beside it (OUT may move)
  test_reproducer.py  a pytest test that fails while the anomaly is there
  shrink.json         every candidate tried: what it dropped, its tries, how
                      many reproduced, their run directories (OUT/tries/NNN)

The budget covers the whole search and the confirmation (harness/shrink.py).

Exit codes (reports/exit_codes.py): 0 shrunk (the reproducer failed again
when confirmed, or its confirmation did not fit in the budget), 2 refused
(bad arguments or run), 3 the anomaly did not come back (or the budget did
not cover the original run).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.campaign import parse_budget
from harness.run import RunSpec, execute, log_line
from harness.shrink import NOT_DONE, Shrinker
from reports.exit_codes import EXIT_OK, EXIT_REFUSED, EXIT_UNKNOWN


class Refused(ValueError):
    """The run cannot be shrunk; the message says why and what to do."""


def load_failing_run(run_dir: Path, anomalies: list[str]) -> tuple[RunSpec, set[str]]:
    """The run's spec and the anomaly types to keep."""
    meta_path = run_dir / "run.json"
    try:
        meta = json.loads(meta_path.read_text())
    except OSError:
        raise Refused(f"{run_dir} is not a run directory (no readable run.json)") from None
    except ValueError as e:
        raise Refused(f"{meta_path} is not JSON ({e})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("spec"), dict):
        raise Refused(f"{meta_path} has no spec: only runs made by `chaoslog run` (or a "
                      f"campaign) can be replayed and shrunk")
    try:
        spec = RunSpec.from_json(meta["spec"])
    except (KeyError, TypeError, ValueError) as e:
        raise Refused(f"{meta_path}: its spec is damaged (missing or bad field {e})") from None
    if anomalies:
        return spec, set(anomalies)
    try:
        fatal = set(json.loads((run_dir / "summary.json").read_text()).get("fatal") or [])
    except (OSError, ValueError):
        raise Refused(f"{run_dir} has no readable summary.json: check it first "
                      f"(`chaoslog analyze {run_dir}`) or name the anomaly with --anomaly") from None
    if not fatal:
        raise Refused(f"{run_dir}: its verdict found no fatal anomaly, so there is nothing to "
                      f"shrink (name one with --anomaly to shrink a non-fatal finding)")
    return spec, fatal


def replay(spec: RunSpec) -> set[str] | None:
    """One try: a whole run into spec.out; its fatal anomaly types, None if
    it could not be judged."""
    return execute(spec, log=lambda m: None).fatal()


TEST_TEMPLATE = '''"""Reproducer of {types} shrunk by `chaoslog shrink` from {source}:
{faults} fault(s), {duration:g} s; {confirmation}.
It fails while the anomaly is there."""
import json
from dataclasses import replace

import pytest

from harness.run import RunSpec, execute

SPEC = json.loads(r"""{spec}""")
ANOMALIES = set({anomalies!r})


@pytest.mark.docker
def test_the_shrunk_run_finds_no_{name}(tmp_path):
    result = execute(replace(RunSpec.from_json(SPEC), out=tmp_path / "run"))
    summary = getattr(result.verdict, "summary", None)
    assert summary, f"the run could not be judged (exit {{result.exit_code}}): see {{tmp_path}}"
    found = set(summary.get("fatal") or []) & ANOMALIES
    assert not found, f"{{sorted(found)}} again: see {{tmp_path / 'run' / 'report.html'}}"
'''


# command.txt: run in the reproducer's directory.
COMMAND = "# in this directory:\nchaoslog run --spec spec.json\n"


def write_reproducer(out: Path, source: Path, spec: RunSpec, target: set[str],
                     shrinker: Shrinker, confirmed: Any) -> None:
    spec_json = {**spec.to_json()}
    (out / "spec.json").write_text(json.dumps(spec_json, indent=2, sort_keys=True) + "\n")
    (out / "schedule.json").write_text(spec.schedule.dumps() + "\n")
    # Named beside it: the reproducer works wherever OUT is copied to.
    (out / "command.txt").write_text(COMMAND)
    name = re.sub(r"[^a-z0-9]+", "_", "_or_".join(sorted(target)).lower()).strip("_")
    confirmation = (f"its confirmation was {NOT_DONE}" if confirmed.not_done and not confirmed.tries
                    else f"it reproduced in {confirmed.reproduced} of {confirmed.tries} confirming "
                         f"tries")
    (out / "test_reproducer.py").write_text(TEST_TEMPLATE.format(
        types=", ".join(sorted(target)), source=source, faults=len(spec.schedule.steps),
        duration=spec.schedule.duration_s, confirmation=confirmation,
        spec=json.dumps(spec_json, indent=1, sort_keys=True), anomalies=sorted(target), name=name))
    (out / "shrink.json").write_text(json.dumps({
        "source": str(source), "anomalies": sorted(target), "runs": shrinker.runs,
        "steps": {"before": len(shrinker.spec.schedule.steps), "after": len(spec.schedule.steps)},
        "confirmed": confirmed.to_json(),
        "search": f"{NOT_DONE} at {shrinker.not_done}" if shrinker.not_done else "done",
        "attempts": [a.to_json() for a in shrinker.attempts]}, indent=1) + "\n")


def cmd_shrink(a: argparse.Namespace) -> int:
    try:
        try:
            budget = parse_budget(a.budget)
        except ValueError as e:
            raise Refused(str(e)) from None
        if a.tries < 1:
            raise Refused(f"--tries {a.tries}: at least 1")
        run_dir = Path(a.run_dir)
        spec, target = load_failing_run(run_dir, a.anomaly)
        spec = replace(spec, checker=a.checker)
        out = Path(a.out) if a.out else run_dir / "shrunk"
        if (out / "shrink.json").exists():
            raise Refused(f"{out} already holds a shrink (shrink.json): choose another --out")
    except Refused as e:
        print(f"chaoslog shrink: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    out.mkdir(parents=True, exist_ok=True)
    log_line(f"shrinking {run_dir} ({len(spec.schedule.steps)} faults, "
             f"{spec.schedule.duration_s:g} s) while {', '.join(sorted(target))} shows; "
             f"up to {a.tries} tries per candidate, budget {budget:g} s")
    shrinker = Shrinker(spec, target, replay, out, tries=a.tries, budget_s=budget, log=log_line)
    if not shrinker.reproduces(spec, "original", "the run as it was"):
        write_reproducer(out, run_dir, spec, target, shrinker, shrinker.attempts[-1])
        if shrinker.not_done:
            log_line(f"--budget {a.budget} does not cover a replay of the run and a confirming "
                     f"try: nothing shrunk")
        else:
            log_line(f"the original run did not show {', '.join(sorted(target))} again in "
                     f"{a.tries} tries: nothing shrunk (evidence in {out})")
        return EXIT_UNKNOWN
    small = shrinker.shrink()
    confirmed = shrinker.confirm(small)
    write_reproducer(out, run_dir, small, target, shrinker, confirmed)
    log_line(f"shrunk to {len(small.schedule.steps)} fault(s) in {small.schedule.duration_s:g} s"
             f"{'; the search stopped, ' + NOT_DONE if shrinker.not_done else ''}; "
             + (f"confirmation {NOT_DONE}" if confirmed.not_done and not confirmed.tries else
                f"reproduced in {confirmed.reproduced} of {confirmed.tries} confirming tries")
             + f"; reproducer in {out} (command.txt, test_reproducer.py)")
    # Every candidate kept did fail: unconfirmed for lack of time is still a reproducer.
    return EXIT_OK if confirmed.reproduced or not confirmed.tries else EXIT_UNKNOWN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("shrink", help="make a failing run small: fewer and shorter faults, a "
                                      "shorter run, a lower rate, while the anomaly recurs",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory of `chaoslog run`")
    p.add_argument("--anomaly", action="append", default=[], metavar="TYPE",
                   help="the anomaly type to keep (default: the run's fatal ones); repeatable")
    p.add_argument("--tries", type=int, default=3,
                   help="runs per candidate before it counts as not reproducing (default 3)")
    p.add_argument("--budget", default="4h", help="time for the whole search (default 4h)")
    p.add_argument("--checker", choices=("reference", "spark"), default="reference",
                   help="the checker of each try (default reference: a try's history is small "
                        "and a new Spark JVM per try costs more than the check)")
    p.add_argument("--out", help="where the reproducer goes (default RUN_DIR/shrunk)")
    p.set_defaults(func=cmd_shrink)
