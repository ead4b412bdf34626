"""`chaoslog run / fault / heal` (harness/run_cli.py, harness/fault_cli.py): schedules printed from a seed, settings
refused before anything starts, and (slow) a real run and a fault healed
from another process on a local cluster."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness.fault_cli as fault_cli
import harness.run_cli as run_cli
from reports.exit_codes import EXIT_OK, EXIT_REFUSED

REPO = Path(__file__).resolve().parents[2]


def cli(*argv):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    run_cli.add_parser(sub)
    fault_cli.add_parser(sub)
    a = p.parse_args(list(argv))
    return a.func(a)


def schedule_text(seed, hashseed, faults="kill,pause:2,partition-halves,hard-bounce,zk-expire,latency"):
    code = ("import argparse, harness.run_cli as r; p = argparse.ArgumentParser(); r.add_parser(p.add_subparsers());"
            f"a = p.parse_args(['run', '--backend', 'local', '--seed', '{seed}', '--faults', '{faults}',"
            "'--duration', '300', '--print-schedule']); raise SystemExit(a.func(a))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": str(hashseed)}, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_print_schedule_is_a_function_of_the_seed():
    a = schedule_text(42, 1)
    assert a == schedule_text(42, 2)       # same seed, another process and hash seed
    assert a != schedule_text(43, 1)
    assert a.startswith("schedule seed=42 duration=300s")
    assert "final-heal" in a and "final reads" in a


def test_print_schedule_json(capsys):
    assert cli("run", "--backend", "local", "--seed", "5", "--faults", "kill", "--print-schedule", "--json") == 0
    d = json.loads(capsys.readouterr().out)
    assert d["seed"] == 5 and all(s["fault"] == "kill" for s in d["steps"])


@pytest.mark.parametrize("argv,message", [
    (["--faults", "kill,explode"], "unknown fault 'explode'"),
    (["--replication-factor", "4"], "--replication-factor 4 with 3 broker(s)"),
    (["--broker-config", "min.insync.replicas=3", "--replication-factor", "2"], "min.insync.replicas=3"),
    (["--broker-config", "no.such.key=1"], "unknown broker config key"),
    (["--faults", "kill", "--target", "kill=broker-9"], "no node 'broker-9'"),
    (["--faults", "kill", "--target", "pause=leader"], "pause is not among --faults"),
    (["--faults", "partition-halves", "--mechanism", "iptables"], "needs the docker backend"),
    (["--faults", "zk-kill", "--target", "zk-kill=zk-2"], "no node 'zk-2'"),
    (["--faults", "kill", "--param", "kill=3"], "expected FAULT.KEY=VALUE"),
    (["--faults", "kill,isr-shrink-then-leader-loss", "--target", "isr-shrink-then-leader-loss=leader"],
     "is a recipe, its steps choose their own roles"),
    (["--faults", "restarted-follower-elected", "--param", "restarted-follower-elected.x=1"],
     "recipes take none"),
    (["--faults", "restarted-follower-elected", "--replication-factor", "1"],
     "needs followers: a replication factor of 2"),
    (["--topics", "a,a"], "named twice"),
    (["--interval", "5,1"], "MIN <= MAX"),
    (["--commit", "auto"], "only consumers of a group commit"),
    (["--sub-via", "subscribe", "--client", "aiokafka", "--commit", "auto"], "commits manual or none"),
])
def test_impossible_settings_are_refused_in_one_line(capsys, argv, message):
    assert cli("run", "--backend", "local", *argv) == EXIT_REFUSED
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_a_schedule_replays_as_printed(tmp_path, capsys):
    """--schedule takes what --print-schedule --json printed, a run.json, or a
    run directory, and gives back the same schedule."""
    assert cli("run", "--backend", "local", "--seed", "9", "--faults", "kill,pause",
               "--overlap", "2", "--duration", "40", "--print-schedule", "--json") == 0
    printed = capsys.readouterr().out
    (tmp_path / "s.json").write_text(printed)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"run": "x", "schedule": json.loads(printed)}))
    for source in (tmp_path / "s.json", run_dir / "run.json", run_dir):
        assert cli("run", "--backend", "local", "--schedule", str(source), "--print-schedule",
                   "--json") == 0
        assert json.loads(capsys.readouterr().out) == json.loads(printed)


@pytest.mark.parametrize("content,message", [
    (None, "cannot read"),
    ("{", "is not JSON"),
    ('{"seed": 1}', "not a schedule"),
    ('{"seed": 1, "duration_s": 9, "quiet_s": 1, "steps": [{"at_s": 1, "fault": "explode", '
     '"duration_s": 2}]}', "unknown fault 'explode'"),
    ('{"seed": 1, "duration_s": 9, "quiet_s": 1, "steps": [{"at_s": 1, "fault": "kill", '
     '"duration_s": 2, "target": "broker-7"}]}', "no node 'broker-7'"),
])
def test_a_bad_schedule_file_is_refused_in_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "s.json"
    if content is not None:
        path.write_text(content)
    assert cli("run", "--backend", "local", "--schedule", str(path)) == EXIT_REFUSED
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_a_replayed_schedule_is_not_drawn_again(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text('{"seed": 1, "duration_s": 9, "quiet_s": 1, "steps": []}')
    assert cli("run", "--backend", "local", "--schedule", str(path), "--faults", "kill",
               "--seed", "3") == EXIT_REFUSED
    assert "drop --faults, --seed" in capsys.readouterr().err


def test_fault_refuses_unknown_names(capsys):
    assert cli("fault", "explode") == EXIT_REFUSED
    assert "unknown fault" in capsys.readouterr().err
    assert cli("fault", "kill", "--target", "the-boss") == EXIT_REFUSED
    assert "unknown target" in capsys.readouterr().err


def test_list_faults_names_the_recipes_after_the_faults(capsys):
    from faults.injectors import CATALOGUE
    from faults.recipes import RECIPES
    assert cli("run", "--list-faults") == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    first = [line.split()[0] for line in lines if line.strip()]
    assert first[:len(CATALOGUE)] == list(CATALOGUE)
    for r in RECIPES.values():   # one line each, after the faults
        assert f"{r.name:<34} {r.about}" in lines and first.index(r.name) > len(CATALOGUE)


def test_recipes_are_drawn_timed_by_the_broker_config_and_need_what_their_faults_need(capsys):
    argv = ["run", "--backend", "local", "--seed", "4", "--duration", "90",
            "--faults", "kill:2,isr-shrink-then-leader-loss:3",
            "--broker-config", "replica.lag.time.max.ms=20000"]
    p = argparse.ArgumentParser()
    run_cli.add_parser(p.add_subparsers())
    spec = run_cli.spec_from_args(p.parse_args(argv))
    assert spec.cluster.proxied   # the recipe cuts a partition: on the local backend, through the proxy
    assert spec.schedule.settings["lag_s"] == 20.0
    assert any(s.recipe == "isr-shrink-then-leader-loss" for s in spec.schedule.steps)
    assert cli(*argv, "--print-schedule") == EXIT_OK
    assert "[isr-shrink-then-leader-loss]" in capsys.readouterr().out


# -- slow: against a local cluster -----------------------------------------------------

def local_or_skip():
    try:
        from harness.zookeeper import check_local_zookeeper_install
        check_local_zookeeper_install()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no local backend: {e}")


@pytest.mark.slow
def test_a_short_run_end_to_end(tmp_path, capsys):
    local_or_skip()
    out = tmp_path / "run"
    code = cli("run", "--backend", "local", "--duration", "12", "--faults", "kill,partition-isolate",
               "--interval", "1,2", "--fault-duration", "2,3", "--seed", "9", "--quiet", "2",
               "--rate", "30", "--producers", "1", "--out", str(out), "--no-analysis")
    assert code == EXIT_OK
    meta = json.loads((out / "run.json").read_text())
    assert meta["format"] == 1 and meta["seed"] == 9 and meta["outcome"] == "complete"
    assert meta["cluster"]["proxied"] is True          # partitions on local go through the proxy
    assert meta["result"]["final_reads"]["complete"]
    assert {"history.jsonl", "zookeeper.json", "logs", "workers"} <= {p.name for p in out.iterdir()}
    assert len(list((out / "logs").glob("*.log"))) == 4
    events = [json.loads(l) for l in (out / "history.jsonl").read_text().splitlines()]
    faults = [e["fault"] for e in events if e["f"] == "nemesis" and e["phase"] == "start"]
    assert "final-heal" in faults and len(faults) >= 2


@pytest.mark.slow
def test_a_consumer_group_run_end_to_end(tmp_path, capsys):
    """Consumers of one group subscribe, poll and commit through a broker kill
    and client crashes: groups.jsonl holds their rebalances and commits, and
    the checker finds none of the group anomalies."""
    from reports import reference
    from reports.groups import read_groups
    from reports.summary import GROUP_TYPES, build_summary
    local_or_skip()
    out = tmp_path / "run"
    # (crashes every ~9 s: the first one, at 8.7 s, kills consumer-2; the group
    # forms in about 6 s, its first rebalance waiting group.initial.rebalance.delay.ms twice)
    code = cli("run", "--backend", "local", "--duration", "26", "--faults", "kill",
               "--interval", "14,15", "--fault-duration", "3,4", "--seed", "5", "--quiet", "2",
               "--rate", "30", "--producers", "1", "--consumers", "2", "--sub-via", "subscribe",
               "--commit", "manual", "--crash-clients", "9", "--out", str(out), "--no-analysis")
    assert code == EXIT_OK
    groups = read_groups(out)
    assigns = [g for g in groups if g["kind"] == "assign"]
    assert len(assigns) > 2, assigns   # the first assignment of two members, and rebalances
    assert any(g["kind"] == "commit" and g["type"] == "ok" for g in groups)
    events = [json.loads(l) for l in (out / "history.jsonl").read_text().splitlines()]
    assert any(e["f"] == "poll" and e.get("group") and e["type"] == "ok" for e in events)
    s = build_summary(reference.check(out))
    assert {k: s["anomalies"][k] for k in GROUP_TYPES} == {k: [] for k in GROUP_TYPES}
    assert {s["oracles"][k] for k in GROUP_TYPES} == {"checked"}


@pytest.mark.slow
def test_fault_then_heal_from_another_process(tmp_path, monkeypatch, capsys):
    local_or_skip()
    from harness.backends import attach
    from harness.backends.base import ClusterSpec
    from harness.backends.local import LocalCluster

    monkeypatch.setenv("CHAOSLOG_HOME", str(tmp_path / "home"))
    c = LocalCluster(ClusterSpec(name="byhand", brokers=3, proxied=True), persistent=True,
                     base_dir=tmp_path / "cluster")
    c.start()
    try:
        assert cli("fault", "kill", "--target", "broker-2", "--name", "byhand") == 0
        assert "active" in capsys.readouterr().out
        assert c.node("broker-2").state == "stopped"
        assert cli("fault", "partition-isolate", "--target", "broker-1", "--name", "byhand") == 0
        state = json.loads(fault_cli.fault_state_path("byhand").read_text())
        assert [f["fault"] for f in state] == ["kill", "partition-isolate"]
        assert not c.links.proxy_client().get_proxy("broker-1_to_zk-1").enabled
        code = ("import argparse, harness.fault_cli as r; p = argparse.ArgumentParser(); r.add_parser(p.add_subparsers());"
                "a = p.parse_args(['heal', '--name', 'byhand']); raise SystemExit(a.func(a))")
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                             env={**os.environ, "CHAOSLOG_HOME": str(tmp_path / "home")}, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "healed kill on broker-2" in out.stdout and "healed partition-isolate" in out.stdout
        c = attach("byhand")   # the heal restarted broker-2: another pid, in the registry
        assert all(n.state == "running" for n in c.nodes())
        assert c.links.proxy_client().get_proxy("broker-1_to_zk-1").enabled
        assert not fault_cli.fault_state_path("byhand").exists()
    finally:
        attach("byhand").destroy()


def _spec_json(seed=4):
    from faults.nemesis import make_schedule
    from harness.backends.base import ClusterSpec
    from harness.run import RunSpec
    from harness.workload import WorkloadSpec
    from harness.workload.clients import ProducerSettings
    spec = RunSpec(ClusterSpec(broker_config={"min.insync.replicas": 2}), "local", 3,
                   WorkloadSpec({"t": 2}, mix=(ProducerSettings(acks="1"), ProducerSettings())),
                   make_schedule(seed, ["kill", "pause"], duration_s=40))
    return json.loads(json.dumps(spec.to_json()))


def test_a_whole_run_replays_from_its_spec(tmp_path, capsys):
    """--spec takes a run directory, its run.json or a bare spec, and replays
    the run's schedule (and everything else) as it was."""
    from harness.run import RunSpec
    d = _spec_json()
    assert json.loads(json.dumps(RunSpec.from_json(d).to_json())) == d
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"run": "x", "cluster": {}, "spec": d}))
    (tmp_path / "spec.json").write_text(json.dumps(d))
    for source in (run_dir, run_dir / "run.json", tmp_path / "spec.json"):
        assert cli("run", "--spec", str(source), "--print-schedule", "--json") == 0
        assert json.loads(capsys.readouterr().out) == d["schedule"]


@pytest.mark.parametrize("content,extra,message", [
    (None, [], "cannot read"),
    ('{"cluster": {}}', [], "not a run's spec"),
    ("SPEC", ["--brokers", "5", "--seed", "2"], "drop --brokers, --seed"),
    ("SPEC", ["--schedule", "x.json"], "drop --schedule"),
])
def test_a_bad_spec_is_refused_in_one_line(tmp_path, capsys, content, extra, message):
    path = tmp_path / "spec.json"
    if content is not None:
        path.write_text(json.dumps(_spec_json()) if content == "SPEC" else content)
    assert cli("run", "--spec", str(path), *extra) == EXIT_REFUSED
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


class RefusingCluster:
    """A cluster of no nodes whose target cannot expire ZooKeeper sessions:
    enough for a Run to refuse before it starts anything."""
    backend, system, has_zookeeper = "docker", "testing", False

    def __init__(self):
        from harness.backends.base import ClusterSpec
        self.spec = ClusterSpec(brokers=0)

    def refuses(self, fault, target=None):
        return f"the testing target cannot run {fault}" if fault == "zk-expire" else None

    def nodes(self):
        return []

    brokers = nodes


def test_a_run_refuses_what_its_target_cannot_do_before_starting_it(tmp_path):
    from faults.injectors.base import FaultError
    from faults.nemesis import Schedule, Step
    from harness.run import Run
    with Run(tmp_path / "run", RefusingCluster()) as run:
        with pytest.raises(FaultError, match="the testing target cannot run zk-expire"):
            run.inject("zk-expire", "controller")
        schedule = Schedule(seed=1, duration_s=5.0, quiet_s=1.0,
                            steps=[Step(1.0, "kill", 1.0, "broker-1", {}),
                                   Step(2.0, "zk-expire", 1.0, "controller", {})])
        with pytest.raises(FaultError, match="cannot run zk-expire"):
            run.start_nemesis(schedule)
        assert not run.nemeses and not run.injected


def test_a_tansu_run_draws_only_what_tansu_can_do(capsys):
    """--target tansu: roles tansu cannot resolve are replaced by one it
    can (random), faults it cannot run are refused with its reason."""
    assert cli("run", "--target", "tansu", "--replication-factor", "1", "--faults",
               "kill,pause,partition-isolate", "--duration", "120", "--seed", "1",
               "--print-schedule", "--json") == EXIT_OK
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert {s["fault"] for s in steps} == {"kill", "pause", "partition-isolate"}
    assert {s["target"] for s in steps} == {"random"}
    for argv, message in [
        (["--faults", "zk-expire"], "the tansu target cannot run zk-expire: tansu has no ZooKeeper"),
        (["--faults", "kill", "--target", "tansu", "kill=leader"], "'leader': tansu's Metadata"),
        (["--faults", "kill", "--backend", "local"], "drop --backend"),
        (["--broker-config", "min.insync.replicas=2"], "configures the built-in broker"),
    ]:
        base = ["run", "--target", "tansu", "--replication-factor", "1", "--print-schedule"]
        assert cli(*base, *argv) == EXIT_REFUSED
        assert message in capsys.readouterr().err, argv
    assert cli("run", "--target", "tansu", "--print-schedule") == EXIT_REFUSED
    assert "use --replication-factor 1" in capsys.readouterr().err
