"""scripts/lanes.py: `make test`'s lanes, with real shell commands."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts import lanes

LANES = Path(lanes.__file__)


def test_a_failed_command_fails_the_run_and_the_rest_still_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = lanes.run([["echo first; exit 3", "echo second"], ["echo beside"]])
    out = capsys.readouterr().out
    assert rc == 1
    # Every command ran, the one after the failure too; every log printed,
    # the failed one last.
    logs = out[out.index("=" * 30):]
    assert logs.index("second") < logs.index("first") and logs.index("beside") < logs.index("first")
    assert "FAILED (exit 3)" in out and out.count("passed") >= 2
    assert (tmp_path / "build/lanes/lane1-2.log").read_text() == "second\n"


def test_every_command_passing_passes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert lanes.run([["true"], ["true", "true"]]) == 0
    assert "FAILED" not in capsys.readouterr().out


def test_where_a_lane_stands_is_pytest_s_last_progress_mark(tmp_path):
    log = tmp_path / "l.log"
    assert lanes._percent(log) == "under way"
    log.write_bytes(b"tests/a.py ....   [  7%]\ntests/b.py ..\n[ 45%]\ntests/c.py .")
    assert lanes._percent(log) == "45%"


def test_ctrl_c_reaches_every_running_command_and_fails_the_run(tmp_path):
    """The commands run in sessions of their own (the terminal's Ctrl-C
    reaches lanes.py only): lanes.py passes SIGINT on, so that pytest
    tears its clusters down."""
    got = tmp_path / "got"
    trap = f'trap "echo int >> {got}; exit 130" INT; sleep 60 & wait'
    p = subprocess.Popen([sys.executable, str(LANES), "--lane", trap, "echo never",
                          "--lane", trap], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(list((tmp_path / "build/lanes").glob("*.log"))) < 2:
        assert time.monotonic() < deadline, "the lanes did not start"
        time.sleep(0.1)
    time.sleep(0.5)   # (the shells set their traps)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 1
    assert got.read_text() == "int\nint\n"
    assert "never" in out and "not run" in out   # the next command of the lane was not started
    assert not (tmp_path / "build/lanes/lane1-2.log").exists()


def test_a_lane_is_required(capsys):
    with pytest.raises(SystemExit) as e:
        lanes.main([])
    assert e.value.code == 2
    assert "--lane" in capsys.readouterr().err
