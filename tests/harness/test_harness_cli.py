"""`chaoslog` itself: the commands that start clusters first remove what a
killed earlier chaoslog process left behind; the others touch nothing."""
from __future__ import annotations

import pytest

import harness.reaper as reaper
from harness.cli import main


@pytest.fixture
def reaped(monkeypatch):
    calls = []

    def fake():
        calls.append(1)
        return ["container chaoslog-run-x-broker-1", "network chaoslog-run-x"]
    monkeypatch.setattr(reaper, "reap_orphans", fake)
    return calls


def test_a_command_that_starts_clusters_reaps_first(reaped, tmp_path, capsys):
    assert main(["shrink", str(tmp_path / "no-such-run")]) != 0
    err = capsys.readouterr().err
    assert reaped == [1]
    assert ("removed what a killed earlier run left: container chaoslog-run-x-broker-1, "
            "network chaoslog-run-x") in err
    assert "no-such-run" in err        # and the command itself went on to refuse


def test_other_commands_reap_nothing(reaped, tmp_path, capsys):
    main(["analyze", "--checker", "reference", str(tmp_path / "no-such-run")])
    main(["cluster", "status", "--name", "no-such-cluster"])
    assert reaped == []


def test_a_cluster_error_is_refused_and_a_crash_is_an_error_not_a_finding(monkeypatch, capsys):
    """reports/exit_codes.py: 2 for what ClusterError says is wrong, 4 (with
    the traceback) for a bug, never 1, which means anomalies found."""
    import harness.cluster_cli as cluster_cli
    from reports.exit_codes import EXIT_ERROR, EXIT_REFUSED
    assert main(["cluster", "status", "--name", "no-such-cluster"]) == EXIT_REFUSED
    assert "no cluster named 'no-such-cluster' is up" in capsys.readouterr().err

    def crash(args):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(cluster_cli, "cmd_status", crash)
    assert main(["cluster", "status"]) == EXIT_ERROR
    assert "ZeroDivisionError: a bug" in capsys.readouterr().err
