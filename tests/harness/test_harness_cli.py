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
