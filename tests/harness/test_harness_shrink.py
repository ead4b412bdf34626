"""The shrinker's search (pure logic: a fake replay stands for the runs) and
`chaoslog shrink`'s handling of its input and output."""
import argparse
import itertools
import json
import random
import shutil
from dataclasses import replace

import pytest

import harness.run_cli as run_cli
import harness.shrink_cli as shrink_cli
from faults.nemesis import Schedule, Step
from harness.backends.base import ClusterSpec
from harness.campaign import parse_budget
from harness.run import RunSpec
from harness.shrink import MIN_STEP_S, NOT_DONE, RUN_MARGIN_S, Shrinker, ddmin
from harness.workload import WorkloadSpec
from reports.exit_codes import EXIT_OK, EXIT_REFUSED, EXIT_UNKNOWN


# -- ddmin ------------------------------------------------------------------------------------

def test_ddmin_finds_the_pair_that_fails():
    calls = []

    def fails(xs):
        calls.append(list(xs))
        return 3 in xs and 11 in xs

    assert ddmin(list(range(16)), fails) == [3, 11]
    assert len(calls) <= 40   # far from the 2**16 subsets


@pytest.mark.parametrize("seed", range(30))
def test_ddmin_result_fails_and_is_one_minimal_and_keeps_order(seed):
    rng = random.Random(seed)
    items = list(range(rng.randint(1, 24)))
    needed = set(rng.sample(items, rng.randint(1, min(4, len(items)))))

    def fails(xs):
        return needed <= set(xs)

    out = ddmin(items, fails)
    assert fails(out) and out == sorted(out)
    for i in range(len(out)):   # 1-minimal: no single item can go
        assert not fails(out[:i] + out[i + 1:]) or len(out) == 1


# -- the shrinker, with a fake replay ---------------------------------------------------------

def _spec(steps, rate=200.0, duration=120.0):
    return RunSpec(ClusterSpec(), "docker", 3, WorkloadSpec({"t": 3}, rate=rate),
                   Schedule(7, duration, 10.0, steps))


STEPS = [Step(5, "kill", 8), Step(12, "pause", 16), Step(20, "zk-expire", 4),
         Step(30, "partition-halves", 12), Step(50, "kill", 6, lane=1),
         Step(60, "stop", 10)]


def loss_when(spec):
    """The fake bug: a loss when a pause of at least 3 s and a partition of the
    halves both happen, at 50 sends/s or more."""
    faults = {s.fault: s for s in spec.schedule.steps}
    return ("pause" in faults and faults["pause"].duration_s >= 3
            and "partition-halves" in faults and spec.workload.rate >= 50)


def fake_replay(bug=loss_when, flaky_every=1):
    calls = itertools.count(1)

    def replay(spec):
        assert spec.out is not None
        n = next(calls)
        return {"lost"} if bug(spec) and n % flaky_every == 0 else {"duplicate"} if n % 5 == 0 else set()
    return replay


def test_the_shrinker_keeps_the_faults_that_matter_shortened_with_a_shorter_run(tmp_path):
    s = Shrinker(_spec(STEPS), {"lost"}, fake_replay(), tmp_path, tries=1)
    small = s.shrink()
    assert [st.fault for st in small.schedule.steps] == ["pause", "partition-halves"]
    pause, part = small.schedule.steps
    assert 3 <= pause.duration_s < 6 and part.duration_s == MIN_STEP_S
    assert small.schedule.duration_s == part.at_s + part.duration_s + RUN_MARGIN_S
    assert 50 <= small.workload.rate < 100
    assert loss_when(small)
    # every try went to a run directory of its own under the output
    dirs = [d for a in s.attempts for d in a.run_dirs]
    assert len(dirs) == len(set(dirs)) == s.runs and all(d.startswith(str(tmp_path)) for d in dirs)


def test_a_flaky_anomaly_is_shrunk_with_retries_and_confirmed_with_a_count(tmp_path):
    """The fake reproduces only every other run: one try per candidate would
    throw the faults that matter away; two tries keep them."""
    s = Shrinker(_spec(STEPS), {"lost"}, fake_replay(flaky_every=2), tmp_path, tries=2)
    small = s.shrink()
    assert {st.fault for st in small.schedule.steps} == {"pause", "partition-halves"}
    confirmed = s.confirm(small)
    assert confirmed.tries == 2 and confirmed.reproduced == 1 and confirmed.stage == "confirm"


def test_another_anomaly_type_does_not_count(tmp_path):
    s = Shrinker(_spec(STEPS), {"lost"}, lambda spec: {"duplicate"}, tmp_path, tries=2)
    assert not s.reproduces(s.spec, "original", "as it was")
    assert s.attempts[-1].types == [["duplicate"], ["duplicate"]]


def test_the_steps_of_one_drawn_recipe_go_or_stay_together(tmp_path):
    """A loss needs both parts of recipe draw 7 (a partition, then a kill):
    ddmin over draws keeps the draw whole and never tries a part alone."""
    steps = [Step(2, "pause", 5), Step(10, "partition-isolate", 12, recipe="r", chain=7),
             Step(14, "kill", 6, lane=2, recipe="r", chain=7), Step(30, "stop", 5),
             Step(40, "partition-isolate", 8, recipe="r", chain=9),
             Step(44, "kill", 4, lane=2, recipe="r", chain=9)]

    def replay(spec):
        return {"lost"} if sum(s.chain == 7 for s in spec.schedule.steps) == 2 else set()

    s = Shrinker(_spec(steps), {"lost"}, replay, tmp_path, tries=1)
    small = s.shrink()
    assert [(st.fault, st.chain) for st in small.schedule.steps] == [
        ("partition-isolate", 7), ("kill", 7)]
    tried = [a.what for a in s.attempts if a.stage == "fewer faults"]
    assert tried and all(("partition-isolate@10s" in w) == ("kill@14s" in w) for w in tried), tried


def test_an_anomaly_that_needs_no_fault_shrinks_to_an_empty_schedule(tmp_path):
    s = Shrinker(_spec(STEPS), {"lost"}, lambda spec: {"lost"}, tmp_path, tries=1)
    small = s.shrink()
    assert small.schedule.steps == []
    assert any(a.stage == "no faults at all" and a.reproduced for a in s.attempts)


def test_a_candidate_is_run_once_however_often_the_search_meets_it(tmp_path):
    s = Shrinker(_spec(STEPS), {"lost"}, fake_replay(), tmp_path, tries=3)
    s.shrink()
    keys = [(a.stage, a.what) for a in s.attempts]
    assert s.runs == sum(a.tries for a in s.attempts)
    assert len(keys) == len(set(keys))


def test_no_try_ends_past_the_budget_and_what_did_not_fit_is_said_once(tmp_path):
    """Runs take their schedule, quiet period and 20 s. A try of the search
    starts only if it and one confirming try of its length end in time; the
    first that cannot stops the search, in one line; the confirmation runs
    within the budget too."""
    now, made, lines = [0.0], [], []

    def replay(spec):
        start = now[0]
        now[0] += spec.schedule.duration_s + spec.quiet_s + 20.0   # 150 s for the first runs
        made.append((start, now[0]))
        return {"lost"} if loss_when(spec) else set()

    s = Shrinker(_spec(STEPS), {"lost"}, replay, tmp_path, tries=1, budget_s=1000,
                 log=lines.append, clock=lambda: now[0])
    small = s.shrink()
    confirmed = s.confirm(small)
    # the first try is expected to take 190 s (RUN_OVERHEAD_S); from then on 150 s:
    # a try of the search starts while 300 s are left, the confirming try while 150 are
    assert made == [(0, 150), (150, 300), (300, 450), (450, 600), (600, 750), (750, 900)]
    assert loss_when(small) and confirmed.tries == 1 and confirmed.not_done is None
    assert s.not_done and s.attempts[-2].not_done == NOT_DONE and s.attempts[-2].tries == 0
    assert [line for line in lines if NOT_DONE in line] == [f"{s.not_done}: {NOT_DONE}"]
    assert not [line for line in lines if "0 of 0" in line]


def test_a_budget_that_covers_no_try_makes_none(tmp_path):
    lines = []
    s = Shrinker(_spec(STEPS), {"lost"}, lambda spec: pytest.fail("no run fits"), tmp_path,
                 tries=2, budget_s=150, log=lines.append, clock=lambda: 0.0)
    # a run of 120 s and 10 s of quiet is expected to take 190 s (RUN_OVERHEAD_S)
    assert not s.reproduces(s.spec, "original", "as it was")
    confirmed = s.confirm(s.spec)
    assert s.runs == 0 and confirmed.tries == 0 and confirmed.not_done == NOT_DONE
    assert lines == [f"original: as it was: {NOT_DONE}", f"confirm: the shrunk run: {NOT_DONE}"]


# -- chaoslog shrink --------------------------------------------------------------------------

def cli(*argv):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    shrink_cli.add_parser(sub)
    run_cli.add_parser(sub)
    a = p.parse_args(list(argv))
    return a.func(a)


def _failing_run(tmp_path, fatal=("lost",), spec=True):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    meta = {"run": "x"}
    if spec:
        meta["spec"] = json.loads(json.dumps(_spec(STEPS).to_json()))
    (run_dir / "run.json").write_text(json.dumps(meta))
    if fatal is not None:
        (run_dir / "summary.json").write_text(json.dumps({"verdict": "invalid",
                                                          "fatal": list(fatal)}))
    return run_dir


@pytest.mark.parametrize("setup,argv,message", [
    ("none", [], "is not a run directory"),
    ("nospec", [], "has no spec"),
    ("nosummary", [], "has no readable summary.json"),
    ("valid", [], "found no fatal anomaly"),
    ("ok", ["--budget", "soon"], "--budget 'soon'"),
    ("ok", ["--tries", "0"], "--tries 0"),
])
def test_what_cannot_be_shrunk_is_refused_in_one_line(tmp_path, capsys, setup, argv, message):
    if setup != "none":
        _failing_run(tmp_path, fatal={"nosummary": None, "valid": ()}.get(setup, ("lost",)),
                     spec=setup != "nospec")
    assert cli("shrink", str(tmp_path / "run"), *argv) == EXIT_REFUSED
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_budgets_read_as_people_write_them():
    assert [parse_budget(t) for t in ("90", "45m", "8h", "1.5h")] == [90, 2700, 28800, 5400]


def test_shrink_writes_a_reproducer_that_replays(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(shrink_cli, "replay", fake_replay())
    run_dir = _failing_run(tmp_path)
    assert cli("shrink", str(run_dir), "--tries", "1") == EXIT_OK
    out = run_dir / "shrunk"
    spec = RunSpec.from_json(json.loads((out / "spec.json").read_text()))
    assert [s.fault for s in spec.schedule.steps] == ["pause", "partition-halves"]
    assert spec.checker == "reference"   # tries are checked by the (quicker) reference checker
    # command.txt names spec.json beside it: the reproducer may be copied anywhere
    command = (out / "command.txt").read_text().splitlines()[-1]
    assert command == "chaoslog run --spec spec.json" and str(tmp_path) not in command
    log = json.loads((out / "shrink.json").read_text())
    assert log["steps"] == {"before": 6, "after": 2} and log["confirmed"]["reproduced"] == 1
    test = (out / "test_reproducer.py").read_text()
    compile(test, "test_reproducer.py", "exec")
    assert "def test_the_shrunk_run_finds_no_lost(" in test and "['lost']" in test
    # the generated test fails while the anomaly is there, and only then
    ns: dict = {}
    exec(compile(test, "test_reproducer.py", "exec"), ns)
    for fatal, fails in ((["lost", "duplicate"], True), (["duplicate"], False), ([], False)):
        verdict = type("V", (), {"summary": {"fatal": fatal}})()
        ns["execute"] = lambda spec, verdict=verdict: type("R", (), {"verdict": verdict,
                                                                      "exit_code": 1})()
        try:
            ns["test_the_shrunk_run_finds_no_lost"](tmp_path)
            failed = False
        except AssertionError as e:
            failed = True
            assert "['lost'] again" in str(e)
        assert failed is fails, fatal
    # the command, run in a copy of the reproducer's directory, replays exactly the shrunk run
    capsys.readouterr()
    moved = tmp_path / "elsewhere"
    shutil.copytree(out, moved)
    monkeypatch.chdir(moved)
    assert cli(*command.split()[1:], "--print-schedule", "--json") == 0
    assert json.loads(capsys.readouterr().out) == spec.schedule.to_json()
    # a second shrink into the same place is refused, nothing overwritten
    assert cli("shrink", str(run_dir)) == EXIT_REFUSED
    assert "already holds a shrink" in capsys.readouterr().err


def test_a_run_that_does_not_fail_again_is_reported_not_shrunk(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shrink_cli, "replay", lambda spec: set())
    run_dir = _failing_run(tmp_path)
    assert cli("shrink", str(run_dir), "--tries", "2") == EXIT_UNKNOWN
    log = json.loads((run_dir / "shrunk" / "shrink.json").read_text())
    assert [a["stage"] for a in log["attempts"]] == ["original"] and log["attempts"][0]["tries"] == 2
    assert "did not show lost again in 2 tries" in capsys.readouterr().err


def test_an_unjudged_try_does_not_count_as_a_reproduction(tmp_path):
    s = Shrinker(replace(_spec(STEPS)), {"lost"}, lambda spec: None, tmp_path, tries=2)
    assert not s.reproduces(s.spec, "original", "as it was")
    assert s.attempts[-1].types == [None, None]


def test_a_budget_too_short_for_the_original_run_shrinks_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shrink_cli, "replay", lambda spec: pytest.fail("no run fits"))
    run_dir = _failing_run(tmp_path)
    assert cli("shrink", str(run_dir), "--budget", "5m") == EXIT_UNKNOWN
    err = capsys.readouterr().err
    assert f"original: the run as it was: {NOT_DONE}" in err
    assert "--budget 5m does not cover a replay of the run and a confirming try" in err
    log = json.loads((run_dir / "shrunk" / "shrink.json").read_text())
    assert log["runs"] == 0 and log["attempts"][0]["not_done"] == NOT_DONE
