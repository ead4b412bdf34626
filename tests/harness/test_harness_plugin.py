"""The pytest plugin seen from a test suite: markers shape clusters, a failed
test's report carries every node's log, --chaoslog-keep leaves it up."""
from __future__ import annotations

import json
import re

import pytest

from harness.backends import attach, registered

pytest_plugins = ["pytester"]


def test_markers_shape_the_cluster(pytester):
    pytester.makepyfile("""
        import pytest
        from harness.zookeeper import registered_brokers

        @pytest.mark.cluster_size(2)
        @pytest.mark.broker_config(**{"min.insync.replicas": 2})
        def test_shape(cluster):
            assert registered_brokers(cluster.zookeeper_connect) == {1, 2}
            cfg = (cluster.data_dir("broker-1") / "server.properties").read_text()
            assert "min.insync.replicas=2" in cfg
    """)
    result = pytester.runpytest_subprocess("--chaoslog-backend", "local", "-q")
    result.assert_outcomes(passed=1)


def test_failed_test_report_carries_node_logs(pytester):
    pytester.makepyfile("""
        def test_fails(zookeeper):
            assert False, "on purpose"
    """)
    result = pytester.runpytest_subprocess("--chaoslog-backend", "local", "-q", "-rA")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert re.search(r"chaoslog pytest-\w+ zk-1 log", out)
    assert "binding to port" in out  # ZooKeeper's own log line, from the node's log


def test_keep_leaves_a_failed_tests_cluster_up(pytester):
    pytester.makepyfile("""
        def test_fails(zookeeper):
            print("CLUSTER", zookeeper.spec.name)
            assert False
    """)
    result = pytester.runpytest_subprocess("--chaoslog-backend", "local", "--chaoslog-keep",
                                           "-q", "-s")
    result.assert_outcomes(failed=1)
    name = re.search(r"CLUSTER (pytest-\w+)", result.stdout.str()).group(1)
    assert f"chaoslog cluster down --name {name}" in result.stdout.str()
    try:
        state = registered(name)
        assert state is not None and state["persistent"]
        cluster = attach(name)
        assert cluster.node("zk-1").state == "running"
    finally:
        attach(name).destroy()
    assert registered(name) is None


def test_passing_test_leaves_nothing(pytester):
    pytester.makepyfile("""
        def test_ok(zookeeper):
            print("CLUSTER", zookeeper.spec.name, zookeeper.base_dir)
    """)
    result = pytester.runpytest_subprocess("--chaoslog-backend", "local", "-q", "-s")
    result.assert_outcomes(passed=1)
    name, base = re.search(r"CLUSTER (pytest-\w+) (\S+)", result.stdout.str()).groups()
    assert registered(name) is None
    import os
    assert not os.path.exists(base)


def test_sigterm_ends_the_session_like_ctrl_c(pytester, tmp_path):
    """A CI timeout's SIGTERM stops the run: the running test ends and no
    later test starts (a SystemExit in the test would only have failed it)."""
    import signal
    import subprocess
    import sys
    import time

    from contracts.deadline import wait_until
    started, second = tmp_path / "started", tmp_path / "second"
    pytester.makepyfile(f"""
        import pathlib, time

        def test_first():
            pathlib.Path({str(started)!r}).touch()
            time.sleep(60)

        def test_second():
            pathlib.Path({str(second)!r}).touch()
    """)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_until(started.exists, 60, 0.05), "the first test did not start"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - t0 < 20
    assert proc.returncode == 2, out.decode()[-2000:]       # interrupted
    assert not second.exists(), "a test ran after the SIGTERM"
