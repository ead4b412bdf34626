"""The results warehouse and the trends page: rows of a checked run (pure),
then real Spark: two nights of a campaign loaded, a run never loaded twice,
the tables queried with Spark SQL, the page written."""
import json
import random
from pathlib import Path

from reports_histgen import INJECTIONS, HistoryBuilder, SimulatedRun, run_json, write_run

from reports.trends import collect, write_trends
from reports.warehouse import config_name, find_runs, load, register, rows_of

SAFE = {"min.insync.replicas": 2, "unclean.leader.election.enable": False,
        "replication.truncation": "leader-epoch"}
S = 1_000_000_000


def test_rows_of_a_checked_run():
    summary = {"run": "r1", "verdict": "invalid", "fatal": ["lost"],
               "anomaly_counts": {"lost": 1, "duplicate": 2}, "events": 10, "duration_ns": 30 * S,
               "counts": {"acknowledged": 7},
               "anomalies": {"lost": [{"topic": "t", "partition": 0, "value": 5, "offset": 3,
                                       "time": 12 * S}],
                             "duplicate": [{"topic": "t", "partition": 1, "value": 9,
                                            "offsets": [4, 6], "time": 20 * S}] * 2},
               "fault_windows": [{"fault": "kill", "targets": ["broker-1"], "start": 5 * S,
                                  "stop": 15 * S, "took_effect": True,
                                  "ops": {"send": {"ok": 8, "fail": 1, "info": 1}}},
                                 {"fault": "final-heal", "start": 25 * S, "stop": 26 * S}],
               "timeline": [{"second": s, "send_ok": 3, "send_p99_ns": 2_000_000}
                            for s in (1, 10, 20)]}
    meta = {"run": "r1", "seed": 4, "faults": ["kill"],
            "cluster": {"brokers": 3, "broker_config": SAFE}}
    rows = rows_of(Path("/runs/r1"), summary, meta, "2026-11-24", {"campaign": "c", "cell": "x"})
    (run,) = rows["runs"]
    assert run["config"] == "min-isr=2 unclean=off truncation=leader-epoch"
    assert run["verdict"] == "invalid" and run["fatal"] == ["lost"] and run["seconds"] == 30
    assert (run["campaign"], run["cell"], run["seed"]) == ("c", "x", 4)
    assert [(a["type"], a["fatal"], a["offset"], a["time_s"]) for a in rows["anomalies"]] == [
        ("lost", True, 3, 12.0), ("duplicate", False, 4, 20.0), ("duplicate", False, 4, 20.0)]
    (fault,) = rows["faults"]       # the final heal is not a fault of the run
    assert (fault["fault"], fault["start_s"], fault["stop_s"], fault["send_fail"]) == ("kill", 5, 15, 1)
    assert [r["faults"] for r in rows["seconds"]] == [[], ["kill"], []]
    assert rows["seconds"][0]["send_p99_ms"] == 2.0


def test_config_names_say_what_decides_the_guarantees():
    assert config_name({}) == "min-isr=1 unclean=on truncation=hw"
    assert config_name(SAFE) == "min-isr=2 unclean=off truncation=leader-epoch"
    # as `chaoslog run --broker-config KEY=VALUE` records them: strings
    assert config_name({"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                        "replication.truncation": "leader-epoch"}) == (
        "min-isr=2 unclean=off truncation=leader-epoch")
    assert config_name({"unclean.leader.election.enable": "true"}).startswith(
        "min-isr=1 unclean=on")


def _valid(root, name, config):
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.poll(1, [(0, 1)], hw=1, final=True)
    return write_run(root / name, b.events,
                     run_json(run=name, faults=["kill"], cluster={
                         "brokers": 3, "replication_factor": 3, "broker_config": config}))


def _invalid(root, name, seed):
    sim = SimulatedRun(random.Random(seed), inject=list(INJECTIONS), n_ops=80).simulate()
    return write_run(root / name, sim.events, run_json(run=name, seed=seed,
                                                         faults=["partition", "kill"]))


def _campaign(root, runs):
    root.mkdir(parents=True, exist_ok=True)
    (root / "campaign.json").write_text(json.dumps({"name": "nightly", "runs": [
        {"index": i, "label": label, "run_dir": str(d), "status": "done"}
        for i, (label, d) in enumerate(runs)]}))
    return root


def test_two_nights_in_the_warehouse_and_the_trends_page(spark, tmp_path):
    runs = tmp_path / "runs"
    night1 = _campaign(tmp_path / "c1", [("fixed × kills", _valid(runs, "a", SAFE)),
                                         ("loose × kills", _valid(runs, "b", {}))])
    wh = tmp_path / "wh"
    done = load(spark, [night1], wh, "2026-11-23")
    assert (done["loaded"], done["skipped"], done["failed"]) == (2, 0, [])
    assert load(spark, [night1], wh, "2026-11-23")["skipped"] == 2   # never loaded twice
    night2 = _campaign(tmp_path / "c2", [("loose × kills", _invalid(runs, "c", 3)),
                                         ("loose × kills", _valid(runs, "d", {}))])
    assert load(spark, [night2], wh, "2026-11-24")["loaded"] == 2

    assert set(register(spark, wh)) == {"runs", "anomalies", "faults", "seconds"}
    got = {(r.night, r.run, r.verdict, r.cell) for r in spark.sql(
        "SELECT night, run, verdict, cell FROM runs").collect()}
    assert got == {("2026-11-23", "a", "valid", "fixed × kills"),
                   ("2026-11-23", "b", "valid", "loose × kills"),
                   ("2026-11-24", "c", "invalid", "loose × kills"),
                   ("2026-11-24", "d", "valid", "loose × kills")}
    fatal_c = spark.sql("SELECT fatal FROM runs WHERE run = 'c'").first().fatal
    instances = spark.sql("SELECT DISTINCT type FROM anomalies WHERE run = 'c' AND fatal").collect()
    assert fatal_c and {r.type for r in instances} == set(fatal_c)

    data = collect(spark, wh)
    new = {(r["config"], r["type"]) for r in data["new"]}
    assert new == {("min-isr=1 unclean=on truncation=hw", t) for t in fatal_c}
    assert [r["cell"] for r in data["flakes"]] == ["loose × kills"]
    page = write_trends(spark, wh, tmp_path / "trends.html").read_text()
    assert "New since the night before" in page and "<svg" in page
    assert all(t in page for t in fatal_c)


def test_find_runs_in_campaigns_run_dirs_and_parents(tmp_path):
    a = _valid(tmp_path / "runs", "a", {})
    c = _campaign(tmp_path / "c", [("cell", a)])
    assert find_runs([c]) == [(a, {"campaign": "nightly", "cell": "cell"})]
    assert find_runs([a]) == [(a, {})] and find_runs([tmp_path / "runs"]) == [(a, {})]
