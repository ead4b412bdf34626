"""`chaoslog cluster ...` and `chaoslog images`, run as a user runs them: the
console script in a subprocess, exit codes and one-line errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from harness.docker_engine import engine_available

CHAOSLOG = [sys.executable, "-m", "harness.cli"]


def chaoslog(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*CHAOSLOG, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, code, message", [
    (["cluster", "up", "--brokers", "0"], 2, "must be at least 1"),
    (["cluster", "up", "--backend", "nope"], 2, "invalid choice: 'nope'"),
    (["cluster", "up", "--zookeepers", "2"], 2, "invalid choice: 2"),
    (["cluster", "status", "--name", "never-started"], 2, "no cluster named 'never-started' is up"),
    (["cluster", "kill", "broker-1", "--name", "never-started"], 2, "no cluster named"),
    (["cluster", "up", "--name", "bad name!"], 2, "use letters, digits"),
    (["cluster", "up", "--broker-config", "novalue"], 2, "expected KEY=VALUE"),
    (["cluster", "up", "--backend", "local", "--broker-config", "no.such.key=1"], 2,
     "unknown broker config key 'no.such.key'"),
])
def test_bad_arguments_get_one_line_and_nonzero_exit(args, code, message):
    r = chaoslog(*args)
    assert r.returncode == code, r.stderr
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("backend", [
    "local",
    pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.skipif(
        not engine_available(), reason="no Docker engine answers here")]),
])
def test_cluster_up_drive_and_down(backend):
    name = f"cli-{uuid.uuid4().hex[:6]}"
    r = chaoslog("cluster", "up", "--backend", backend, "--brokers", "2", "--name", name)
    assert r.returncode == 0, r.stderr
    try:
        info = json.loads(r.stdout)
        assert set(info) >= {"bootstrap_servers", "zookeeper", "nodes"}
        assert len(info["bootstrap_servers"].split(",")) == 2
        assert set(info["nodes"]) == {"zk-1", "broker-1", "broker-2"}

        again = chaoslog("cluster", "up", "--backend", backend, "--name", name)
        assert again.returncode == 2 and "already up" in again.stderr

        bad = chaoslog("cluster", "kill", "broker-9", "--name", name)
        assert bad.returncode == 2 and "no node 'broker-9'" in bad.stderr

        for action, state in (("pause", "paused"), ("resume", "running"), ("kill", "stopped"),
                              ("start", "running"), ("stop", "stopped"), ("start", "running")):
            r = chaoslog("cluster", action, "broker-2", "--name", name)
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["state"] == state, action

        status = json.loads(chaoslog("cluster", "status", "--name", name).stdout)
        assert all(n["state"] == "running" for n in status["nodes"].values())
    finally:
        down = chaoslog("cluster", "down", "--name", name)
    assert down.returncode == 0, down.stderr
    assert chaoslog("cluster", "status", "--name", name).returncode == 2
