"""`chaoslog admin ...` in-process: argument handling, --json output, exit codes."""
import argparse
import json

import pytest

from cluster import admin
from controller_fakes import wait_until


def run_cli(argv, capsys):
    parser = argparse.ArgumentParser(prog="chaoslog")
    admin.add_parser(parser.add_subparsers(dest="command"))
    try:
        args = parser.parse_args(argv)
        code = args.func(args)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_controller_admin_cli_commands(nodes, zk_hosts, zk, capsys):
    ns = nodes([1, 2, 3])
    wait_until(lambda: any(n.controller.is_active for n in ns), what="controller")
    zkarg = ["admin", "--zookeeper", zk_hosts]
    code, out, err = run_cli(zkarg + ["controller", "--json"], capsys)
    assert code == 0 and set(json.loads(out)) == {"id", "epoch"} and json.loads(out)["epoch"] == 1
    code, out, _ = run_cli(zkarg + ["brokers", "--json"], capsys)
    assert code == 0 and [b["id"] for b in json.loads(out)] == [1, 2, 3]
    code, out, err = run_cli(zkarg + ["topics", "create", "--topic", "c", "--partitions", "3",
                                      "--replication-factor", "2", "--wait"], capsys)
    assert code == 0, err
    code, out, _ = run_cli(zkarg + ["topics", "describe", "--topic", "c", "--json"], capsys)
    d = json.loads(out)
    assert d["topic"] == "c" and len(d["partitions"]) == 3
    assert set(d["partitions"][0]) >= {"partition", "leader", "leader_epoch", "replicas", "isr"}
    assert all(p["leader"] in p["replicas"] for p in d["partitions"])
    # --zookeeper after the subcommand works too
    code, out, _ = run_cli(["admin", "topics", "describe", "--topic", "c", "--json",
                            "--zookeeper", zk_hosts], capsys)
    assert code == 0 and json.loads(out)["topic"] == "c"
    code, out, err = run_cli(zkarg + ["topics", "add-partitions", "--topic", "c", "--partitions", "4"], capsys)
    assert code == 0, err
    wait_until(lambda: len(admin.describe_topic(zk, "c")["partitions"]) == 4, what="4 partitions")
    # Several partitions removed in one request (created one by one, the
    # controller could handle the first and delete the parent znode).
    code, out, err = run_cli(zkarg + ["topics", "remove-partitions", "--topic", "c",
                                      "--partitions", "3,1", "--json"], capsys)
    assert code == 0 and json.loads(out) == {"topic": "c", "removing": [1, 3], "down": []}, err
    wait_until(lambda: [p["partition"] for p in admin.describe_topic(zk, "c")["partitions"]]
               == [0, 2], what="partitions 1 and 3 removed")
    code, out, err = run_cli(zkarg + ["topics", "remove-partitions", "--topic", "c",
                                      "--partitions", "0,2"], capsys)
    assert code == 2 and "delete the topic instead" in err, err
    code, out, err = run_cli(zkarg + ["topics", "remove-partitions", "--topic", "c",
                                      "--partitions", "x"], capsys)
    assert code == 2 and "bad --partitions" in err, err
    code, out, _ = run_cli(zkarg + ["preferred-election", "--topic", "c"], capsys)
    assert code == 0
    code, out, _ = run_cli(zkarg + ["state-log", "--topic", "c", "--partition", "0", "--json"], capsys)
    recs = json.loads(out)
    assert recs and all(r["topic"] == "c" and r["partition"] == 0 for r in recs)
    assert set(recs[0]) >= {"time", "controller_id", "controller_epoch", "event", "kind", "topic",
                            "partition", "from", "to", "leader", "leader_epoch", "isr", "target_broker"}
    code, out, err = run_cli(zkarg + ["topics", "delete", "--topic", "c", "--wait"], capsys)
    assert code == 0, err
    assert "c" not in admin.list_topics(zk)


def test_controller_admin_cli_reassign(nodes, zk_hosts, zk, capsys, tmp_path):
    ns = nodes([1, 2, 3])
    wait_until(lambda: any(n.controller.is_active for n in ns), what="controller")
    admin.create_topic(zk, "m", 1, 2, replica_assignment={0: [1, 2]})
    admin.wait_for_leaders(zk, "m")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "m", "partition": 0, "replicas": [2, 3]}]}))
    code, out, err = run_cli(["admin", "--zookeeper", zk_hosts, "reassign", "--plan", str(plan),
                              "--wait", "--timeout", "30", "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["done"] and res["partitions"][0]["replicas"] == [2, 3]


def test_controller_admin_cli_errors(nodes, zk_hosts, zk, capsys, tmp_path):
    ns = nodes([1])
    wait_until(lambda: ns[0].controller.is_active, what="controller")
    zkarg = ["admin", "--zookeeper", zk_hosts]
    # RF above live brokers: failed request
    code, _, err = run_cli(zkarg + ["topics", "create", "--topic", "x", "--replication-factor", "3"], capsys)
    assert code == 1 and err.startswith("error:") and len(err.strip().splitlines()) == 1
    # unknown topic
    code, _, err = run_cli(zkarg + ["topics", "describe", "--topic", "nope"], capsys)
    assert code == 1 and "unknown topic" in err
    code, _, err = run_cli(zkarg + ["topics", "delete", "--topic", "nope"], capsys)
    assert code == 1
    # usage errors
    code, _, err = run_cli(zkarg + ["topics", "create", "--topic", "bad/name"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(zkarg + ["state-log", "--partition", "1"], capsys)
    assert code == 2
    code, _, err = run_cli(zkarg + ["topics", "create"], capsys)  # argparse: --topic missing
    assert code == 2
    code, _, err = run_cli(zkarg, capsys)
    assert code == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run_cli(zkarg + ["reassign", "--plan", str(bad)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    # ZooKeeper unreachable within the timeout
    code, _, err = run_cli(["admin", "--zookeeper", "127.0.0.1:1", "--zk-timeout", "1", "controller"], capsys)
    assert code == 1 and "cannot reach ZooKeeper" in err and len(err.strip().splitlines()) == 1


def test_v2_admin_cli_uses_the_v2_commands(zk_hosts, zk, capsys, tmp_path):
    """--coordination v2 (docs/design.md#v2-admin), against a ZooKeeper with
    no broker to take the queued requests."""
    from cluster import zkpaths
    from cluster.v2.state_queue import StateChangeQueue
    from cluster.zkpaths import TopicAssignment
    v2 = ["admin", "--zookeeper", zk_hosts, "--coordination", "v2"]
    zk.ensure_path(zkpaths.BROKER_IDS)
    code, _, err = run_cli(v2 + ["topics", "create", "--topic", "n", "--replica-assignment",
                                 "1:2", "--timeout", "0.3"], capsys)
    assert code == 1 and "brokers [1, 2] did not take their start-replica" in err, err
    zk.ensure_path(zkpaths.TOPICS)
    zk.create(zkpaths.topic_path("t"), TopicAssignment({0: (1, 2), 1: (2, 1)}).encode())
    code, out, err = run_cli(v2 + ["topics", "remove-partitions", "--topic", "t",
                                   "--partitions", "1", "--json"], capsys)
    assert code == 0 and json.loads(out) == {"topic": "t", "removed": [1], "down": [1, 2]}, err
    code, out, err = run_cli(v2 + ["topics", "delete", "--topic", "t"], capsys)
    assert code == 0 and "brokers [1, 2] are down" in out, err
    assert not zk.exists(zkpaths.topic_path("t"))
    got = [(p.change.op, p.change.topic, p.change.partition)
           for p in StateChangeQueue(zk, 2).pending()]
    assert got == [
        ("start-replica", "n", 0), ("close-replica", "t", 1), ("close-replica", "t", 0)], got
    zk.create(zkpaths.topic_path("u"), TopicAssignment({0: (1, 2)}).encode())
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "u", "partition": 0, "replicas": [3, 1]}]}))
    code, _, err = run_cli(v2 + ["reassign", "--plan", str(plan)], capsys)
    assert code == 1 and "u-0: brokers [1, 3] are not registered" in err, err
    assert not zk.exists(zkpaths.partitions_reassigned_path("u", 0))
    code, _, err = run_cli(v2 + ["controller"], capsys)
    assert code == 2 and "controller is not built for --coordination v2" in err, err
