"""The pytest fixtures (harness/fixtures.py) build RunSpecs and validate them
against their started cluster: the rules and the draws of `chaoslog run`
(pure logic: a started cluster of no nodes)."""
import argparse
from types import SimpleNamespace

import pytest

import harness.run_cli as run_cli
from faults.nemesis import Schedule, Step
from harness.backends.base import ClusterSpec
from harness.fixtures import NemesisFactory, checked
from harness.run import Draw, Refused, Run


class StartedCluster:
    """What a fixture's cluster shows a Run; it cannot expire sessions."""
    backend, system, has_zookeeper, has_state_window = "local", "chaoslog", False, False

    def __init__(self, **broker_config):
        self.spec = ClusterSpec(brokers=3, broker_config=broker_config)

    def refuses(self, fault, target=None):
        return "this cluster has no ZooKeeper session to expire" if fault == "zk-expire" else None

    def nodes(self):
        return []

    brokers = nodes


def asked(cluster, rf=None):
    return SimpleNamespace(cluster=cluster, meta={"cluster": {"replication_factor": rf}},
                           workload=None)


def test_a_fixture_s_run_is_refused_by_the_rules_of_chaoslog_run():
    run = asked(StartedCluster(**{"min.insync.replicas": 3}))
    with pytest.raises(Refused, match=r"^min.insync.replicas=3 is above --replication-factor 2"):
        checked(run, 2, None, Schedule(0, 1.0, 0.0, []))
    with pytest.raises(Refused, match="no node 'broker-7'"):
        checked(asked(StartedCluster()), 3, None, Schedule(0, 9.0, 1.0, [Step(1, "kill", 2,
                                                                              "broker-7")]))


def test_the_nemesis_fixture_draws_what_chaoslog_run_draws():
    drawn = checked(asked(StartedCluster()), 3, None,
                    Draw(faults=["kill", "pause:2"], seed=7, duration_s=60, overlap=2))
    p = argparse.ArgumentParser()
    run_cli.add_parser(p.add_subparsers())
    cli = run_cli.spec_from_args(p.parse_args([
        "run", "--backend", "local", "--faults", "kill,pause:2", "--seed", "7",
        "--duration", "60", "--overlap", "2"]))
    assert drawn.schedule.steps and drawn.schedule.to_json() == cli.schedule.to_json()


def test_the_nemesis_fixture_refuses_what_its_cluster_cannot_do_before_starting(tmp_path):
    with Run(tmp_path / "run", StartedCluster()) as run:
        with pytest.raises(Refused, match="no ZooKeeper session to expire"):
            NemesisFactory(run)(["kill", "zk-expire"], duration=30, seed=1)
        assert not run.nemeses
