"""Campaigns: the file, the matrix, the loop and its state, the budget as a
bound (pure logic: a fake run and a fake clock stand for
`harness.run.execute` and the time it takes)."""
import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.campaign_cli as campaign_cli
from harness.campaign import DEFAULT_FILE, Campaign, CampaignError, CampaignState, overlay
from harness.campaign_cli import CampaignRunner, check_matrix
from harness.run import RunResult
from harness.shrink import NOT_DONE
from reports.exit_codes import EXIT_REFUSED

SMALL = {
    "campaign": {"name": "t", "budget": "1h", "seed": 3, "shrink_budget": "10m"},
    "base": {"workload": {"rate": 50}},
    "axes": {"config": {"fixed": {"cluster": {"broker_config": {"min.insync.replicas": 2}}},
                        "loose": {"cluster": {"broker_config": {"min.insync.replicas": 1}}}},
             "faults": {"kills": {"schedule": {"faults": ["kill"]}},
                        "pauses": {"schedule": {"faults": ["pause"]}}},
             "length": {"short": {"schedule": {"duration_s": 60}}}},
}


def small(**campaign):
    return Campaign.from_dict({**SMALL, "campaign": {**SMALL["campaign"], **campaign}}, "t.toml")


# -- the file and the matrix ------------------------------------------------------------------

@pytest.mark.parametrize("d,message", [
    ({}, "no [campaign] table"),
    ({"campaign": {"nmae": "x"}}, "unknown [campaign] keys nmae"),
    ({"campaign": {}, "axes": {"config": {"a": "--brokers 3"}}}, "map each value name to RunSpec"),
    ({"campaign": {}, "axes": {"config": {}}}, "map each value name to RunSpec fields"),
    ({"campaign": {"budget": "tonight"}}, "budget 'tonight'"),
    ({"campaign": {"checker": "jepsen"}}, "checker is reference or spark"),
    ({"campaign": {}, "base": ["--rate", "5"]}, "[base] is a table of RunSpec fields"),
    ({"campaign": {}, "bases": {}}, "unknown tables bases"),
    # the old form, argv fragments, is named as such
    ({"campaign": {"base": ["--rate", "5"]}}, "[campaign] base is a list of `chaoslog run` "
                                              "options, the old form"),
    ({"campaign": {}, "axes": {"config": {"a": ["--brokers", "3"]}}}, "axes.config.a is a list "
                                                                        "of `chaoslog run` options"),
])
def test_a_bad_campaign_file_is_refused_with_the_reason(d, message):
    with pytest.raises(CampaignError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Campaign.from_dict(d, "c.toml")


def test_an_unreadable_or_broken_file_is_refused(tmp_path):
    with pytest.raises(CampaignError, match="cannot read"):
        Campaign.load(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("[campaign\nname=")
    with pytest.raises(CampaignError, match="not TOML"):
        Campaign.load(tmp_path / "bad.toml")


def test_the_runs_walk_every_cell_with_fresh_seeds_and_go_round_again():
    c = small()
    cells = [c.plan(i).cell for i in range(4)]
    assert sorted(map(lambda x: tuple(sorted(x.items())), cells)) == sorted(
        tuple(sorted({"config": a, "faults": f, "length": "short"}.items()))
        for a in ("fixed", "loose") for f in ("kills", "pauses"))
    assert c.plan(4).cell == c.plan(0).cell
    seeds = [c.plan(i).seed for i in range(8)]
    assert len(set(seeds)) == 8 and seeds == [small().plan(i).seed for i in range(8)]
    p = c.plan(1)
    assert p.fields["workload"] == {"rate": 50} and p.fields["schedule"]["seed"] == p.seed
    assert p.fields["schedule"]["faults"] in (["kill"], ["pause"])


def test_a_value_lays_its_fields_over_the_base_merging_the_spec_s_tables():
    base = {"quiet_s": 5, "workload": {"rate": 50, "producer": {"acks": "1"}},
            "cluster": {"broker_config": {"a": 1}}, "schedule": {"interval_s": [2, 4]}}
    over = {"quiet_s": 7, "workload": {"producer": {"retries": 3}},
            "cluster": {"broker_config": {"b": 2}}, "schedule": {"faults": ["kill"]}}
    assert overlay(base, over) == {
        "quiet_s": 7, "workload": {"rate": 50, "producer": {"acks": "1", "retries": 3}},
        "cluster": {"broker_config": {"b": 2}},   # a config is replaced whole, as on the command line
        "schedule": {"interval_s": [2, 4], "faults": ["kill"]}}


def test_the_shipped_nightly_campaign_is_valid_in_every_cell():
    c = Campaign.load(DEFAULT_FILE)
    assert c.name == "nightly" and len(c.combinations()) == 24
    assert "recipes" in c.axes["faults"]
    check_matrix(c, "docker")


@pytest.mark.parametrize("name,cells", [("seed-faithful", 4), ("fixed", 8)])
def test_the_other_shipped_campaigns_are_valid_in_every_cell(name, cells):
    c = Campaign.load(DEFAULT_FILE.parent / f"{name}.toml")
    assert c.name == name and len(c.combinations()) == cells
    check_matrix(c, "docker")


@pytest.mark.parametrize("bad,message", [
    ({"schedule": {"faults": ["explode"]}}, "bad.*unknown fault 'explode'"),
    ({"replication_factor": 5}, r"bad.*--replication-factor 5 with 3 broker\(s\)"),
    ({"workload": {"rat": 5}}, "bad.*workload.rat: not a field of workload"),
    ({"schedule": {"faults": ["kill"], "overlap": "two"}}, "bad.*schedule.overlap: 'two' is not a "
                                                            "whole number"),
])
def test_a_cell_run_spec_validate_refuses_is_refused_before_anything_runs(bad, message):
    c = Campaign.from_dict({**SMALL, "axes": {**SMALL["axes"], "faults": {
        "kills": {"schedule": {"faults": ["kill"]}}, "bad": bad}}})
    with pytest.raises(CampaignError, match=message):
        check_matrix(c, "docker")


# -- the loop ---------------------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def result(spec, fatal):
    verdict = SimpleNamespace(summary={"verdict": "invalid" if fatal else "valid",
                                       "fatal": list(fatal)})
    return RunResult(spec.out, 1 if fatal else 0, verdict)


def fake_run(clock, verdicts, seconds=100.0):
    """Each run takes `seconds`; verdicts in turn: 'valid', 'invalid' (lost),
    'error' (raises), 'killed' (the campaign process dies: SystemExit)."""
    it = iter(verdicts)

    def run(spec):
        clock.now += seconds
        v = next(it)
        if v == "error":
            raise RuntimeError("docker went away")
        if v == "killed":
            raise SystemExit(137)
        return result(spec, ["lost"] if v == "invalid" else [])
    return run


def runner(tmp_path, clock, verdicts, budget=1000.0, shrunk=None, left=lambda: [], reproduced=2,
           kinds=("kill",), **kw):
    calls = shrunk if shrunk is not None else []

    def shrink(run_dir, spec, fatal, budget_s):
        calls.append((run_dir, fatal, budget_s))
        clock.now += 50
        return {"dir": str(run_dir / "shrunk"), "faults": 1, "fault_kinds": kinds,
                "reproduced": reproduced}
    return CampaignRunner(small(**kw), tmp_path / "c", budget_s=budget, backend="docker",
                          run=fake_run(clock, verdicts), shrink=shrink, left=left, clock=clock,
                          log=lambda m: None)


def test_runs_follow_each_other_until_the_budget_is_spent(tmp_path):
    clock = Clock()
    state = runner(tmp_path, clock, ["valid", "error", "valid", "valid", "valid", "valid"],
                   budget=600).go()
    # A run of 60 s and 10 s of quiet is expected to take 130 s (RUN_OVERHEAD_S) until
    # the first one took 100: then 100 s. The sixth ends as the budget does.
    assert [r["status"] for r in state.runs] == ["done", "error", "done", "done", "done", "done"]
    assert state.runs[1]["reason"] == "RuntimeError: docker went away"
    assert state.spent_s == 600
    saved = json.loads((tmp_path / "c" / "campaign.json").read_text())
    assert saved["runs"] == state.runs and saved["spent_s"] == 600
    assert [r["run_dir"] for r in state.runs] == [
        str(tmp_path / "c" / "runs" / f"{i:04d}") for i in range(6)]


def test_a_first_run_longer_than_the_budget_is_not_started(tmp_path):
    lines = []
    r = runner(tmp_path, Clock(), [], budget=100)
    r.log = lines.append
    state = r.go()
    assert state.runs == [] and state.spent_s == 0
    assert any("would take about 2m10s, 1m40s of the budget is left: not started" in line
               for line in lines), lines


def test_a_failure_is_shrunk_within_the_shrink_budget_and_the_time_counts(tmp_path):
    clock, shrunk = Clock(), []
    state = runner(tmp_path, clock, ["valid", "invalid", "valid", "valid"], budget=420,
                   shrunk=shrunk).go()
    assert [r.get("verdict") for r in state.runs] == ["valid", "invalid", "valid"]
    (run_dir, fatal, budget), = shrunk
    assert run_dir == Path(state.runs[1]["run_dir"]) and fatal == {"lost"}
    assert budget == 420 - 200       # what was left of the campaign (< the 10 min shrink budget)
    assert state.runs[1]["shrunk"]["faults"] == 1 and state.spent_s == 350


# -- the budget is a bound: a fake runner, a fake clock, the real shrinker ----------------------

def timed_run(clock, fails, overhead_s):
    """A run takes its schedule, its quiet period and `overhead_s`; it finds
    `lost` when fails(spec). `made` keeps (start, end) of every run."""
    def run(spec):
        start = clock.now
        clock.now += spec.schedule.duration_s + spec.quiet_s + overhead_s
        run.made.append((start, clock.now))
        return result(spec, ["lost"] if fails(spec) else [])
    run.made = []
    return run


def bounded(tmp_path, clock, run, budget, lines):
    campaign = Campaign.from_dict({
        "campaign": {"name": "b", "seed": 5, "shrink_budget": "10m", "shrink_tries": 2},
        "base": {"schedule": {"faults": ["kill", "pause"], "duration_s": 60}}}, "b.toml")
    return CampaignRunner(campaign, tmp_path / "c", budget_s=budget, backend="docker", run=run,
                          left=lambda: [], clock=clock, log=lines.append)


def test_a_shrink_that_cannot_fit_is_not_done_in_one_line(tmp_path):
    """`campaign --budget 5m` whose first run takes 3 min and fails: the shrink
    (a try and a confirming try, 6 min) does not fit, nor another run."""
    clock, lines = Clock(), []
    run = timed_run(clock, lambda spec: True, overhead_s=110)
    state = bounded(tmp_path, clock, run, 300, lines).go()
    assert run.made == [(0, 180)] and state.spent_s == 180
    assert state.runs[0]["shrunk"] == {"not_done": NOT_DONE}
    assert [line for line in lines if NOT_DONE in line] == [f"run 0: shrink {NOT_DONE}"]
    assert any("run 1 (the base run) would take about 3m00s, 2m00s of the budget is left: "
               "not started" in line for line in lines), lines


def test_the_budget_covers_the_shrink_and_its_confirmation(tmp_path):
    """Runs take 100 s. The search stops at the first try that would leave no
    time for a confirming try after it, once; the confirmation stops at the
    first that would end past the budget; nothing ends past it."""
    clock, lines = Clock(), []
    original = []

    def fails(spec):   # the anomaly needs every fault of the first run: nothing shrinks
        original.append(len(spec.schedule.steps)) if not original else None
        return len(spec.schedule.steps) == original[0]
    run = timed_run(clock, fails, overhead_s=30)
    state = bounded(tmp_path, clock, run, 500, lines).go()
    assert run.made == [(0, 100), (100, 200), (200, 300), (300, 400), (400, 500)]
    assert state.spent_s == 500 and len(state.runs) == 1
    shrunk = state.runs[0]["shrunk"]
    assert shrunk["search"].startswith(f"{NOT_DONE} at ") and shrunk["reproduced"] == 1
    assert shrunk["tries"] == 1 and shrunk["confirmed"] == NOT_DONE
    # two tries for the first candidate, one for the second, then no time: said once
    search = [line for line in lines if line.startswith("fewer faults")]
    assert len(search) == 2 and search[0].endswith(": not reproduced (0 of 2 tries)")
    assert search[1].endswith(f": not reproduced (0 of 1 tries); then {NOT_DONE}")
    assert [line for line in lines if line.startswith("confirm")] == [
        f"confirm: the shrunk run: reproduced (1 of 1 tries); then {NOT_DONE}"]
    assert not [line for line in lines if "0 of 0" in line]
    out = Path(state.runs[0]["run_dir"]) / "shrunk"
    log = json.loads((out / "shrink.json").read_text())
    assert log["confirmed"]["not_done"] == NOT_DONE and log["search"] == shrunk["search"]


def test_a_failure_already_shrunk_to_a_working_reproducer_is_not_shrunk_again(tmp_path):
    clock, shrunk = Clock(), []
    state = runner(tmp_path, clock, ["invalid", "invalid"], budget=1000, shrunk=shrunk).go()
    assert len(shrunk) == 1
    assert state.runs[1]["shrunk"] == {
        "skipped": "run 0's reproducer, of the fault kinds of this run, reproduced the same "
                   "anomalies"}


@pytest.mark.parametrize("kinds", [("kill", "an-unheard-of-fault"), ("an-unheard-of-fault",)])
def test_a_failure_of_other_fault_kinds_than_the_known_reproducer_s_is_shrunk(tmp_path, kinds):
    clock, shrunk = Clock(), []
    runner(tmp_path, clock, ["invalid", "invalid"], budget=1000, shrunk=shrunk, kinds=kinds).go()
    assert len(shrunk) == 2


def test_a_failure_whose_reproducer_did_not_reproduce_is_shrunk_again(tmp_path):
    clock, shrunk = Clock(), []
    runner(tmp_path, clock, ["invalid", "invalid"], budget=1000, shrunk=shrunk,
           reproduced=0).go()
    assert len(shrunk) == 2


def test_no_shrink_when_the_campaign_says_so(tmp_path):
    clock, shrunk = Clock(), []
    runner(tmp_path, clock, ["invalid"], budget=200, shrunk=shrunk, shrink=False).go()
    assert shrunk == []


def test_what_a_run_left_behind_is_recorded(tmp_path):
    clock = Clock()
    state = runner(tmp_path, clock, ["valid"], budget=200,
                   left=lambda: ["container run-abc-broker-1"]).go()
    assert state.runs[0]["left_behind"] == ["container run-abc-broker-1"]


def test_a_killed_campaign_resumes_with_nothing_lost_or_run_twice(tmp_path):
    clock = Clock()
    with pytest.raises(SystemExit):
        runner(tmp_path, clock, ["valid", "invalid", "killed"], budget=1000).go()
    before = json.loads((tmp_path / "c" / "campaign.json").read_text())
    assert [r["status"] for r in before["runs"]] == ["done", "done", "started"]
    state = runner(tmp_path, clock, ["valid", "valid", "valid", "valid", "valid"],
                   budget=1000).go()
    assert state.runs[:2] == before["runs"][:2]                   # finished runs untouched
    assert state.runs[2]["status"] == "interrupted"
    assert [r["index"] for r in state.runs] == list(range(len(state.runs)))
    assert len({r["seed"] for r in state.runs}) == len(state.runs)  # no seed run twice
    assert state.spent_s <= 1000


def test_a_campaign_killed_while_shrinking_shrinks_that_run_again_when_it_resumes(tmp_path):
    clock, shrunk = Clock(), []

    def dying(run_dir, spec, fatal, budget_s):
        (run_dir / "shrunk" / "tries" / "001").mkdir(parents=True)
        raise SystemExit(137)
    killed = runner(tmp_path, clock, ["invalid"], budget=1000)
    killed.shrink = dying
    with pytest.raises(SystemExit):
        killed.go()
    before = json.loads((tmp_path / "c" / "campaign.json").read_text())
    assert before["runs"][0]["shrunk"] == {"status": "started"}
    state = runner(tmp_path, clock, ["valid"], budget=1000, shrunk=shrunk).go()
    (run_dir, fatal, _), = shrunk
    assert run_dir == Path(state.runs[0]["run_dir"]) and fatal == {"lost"}
    assert state.runs[0]["shrunk"]["faults"] == 1 and state.runs[0]["verdict"] == "invalid"
    assert (run_dir / "shrunk.interrupted" / "tries" / "001").is_dir()   # kept as evidence
    assert [r["index"] for r in state.runs] == list(range(len(state.runs)))


def test_another_campaigns_directory_is_refused(tmp_path):
    CampaignState.open(tmp_path, small(name="other"))
    with pytest.raises(CampaignError, match="holds campaign 'other'"):
        CampaignState.open(tmp_path, small())
    (tmp_path / "campaign.json").write_text("{")
    with pytest.raises(CampaignError, match="damaged"):
        CampaignState.open(tmp_path, small())


def cli(*argv):
    p = argparse.ArgumentParser()
    campaign_cli.add_parser(p.add_subparsers())
    a = p.parse_args(list(argv))
    return a.func(a)


@pytest.mark.parametrize("content,argv,message", [
    (None, [], "cannot read"),
    ("[campaign]\nbudget = 'x'", [], "budget 'x'"),
    ("[campaign]", ["--budget", "soon"], "--budget 'soon'"),
])
def test_campaign_refuses_in_one_line(tmp_path, capsys, content, argv, message):
    f = tmp_path / "c.toml"
    if content is not None:
        f.write_text(content)
    assert cli("campaign", str(f), "--out", str(tmp_path / "o"), *argv) == EXIT_REFUSED
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
