"""The reaper's Spark part: a checker JVM whose Python driver was killed is
killed at the next command; one whose driver lives is left alone.
(Containers, networks and local clusters: tests/harness/backends.)"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from contracts.deadline import wait_until
from harness.reaper import reap_checker_jvms
from reports.spark_checker import DRIVER_MARK

REPO = Path(__file__).resolve().parents[2]


def _marked(driver_pid: int) -> list[int]:
    """Processes carrying the checker mark for `driver_pid`."""
    mark = f"{DRIVER_MARK}{driver_pid}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def _sleeper(mark_pid: int) -> subprocess.Popen:
    """A process carrying the mark of `mark_pid` (the reaper reads only the
    command line and the parent)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                             f"{DRIVER_MARK}{mark_pid}"])


def test_marked_process_is_reaped_only_when_its_driver_is_not_its_parent():
    ours = _sleeper(os.getpid())          # its parent is the marked pid: alive
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = _sleeper(dead.pid)           # the marked driver is gone
    try:
        removed = reap_checker_jvms()
        assert f"process spark-checker-jvm ({orphan.pid})" in removed
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert ours.poll() is None, "a checker JVM whose driver lives was killed"
        assert not any(str(ours.pid) in r for r in removed)
    finally:
        for p in (ours, orphan):
            p.kill()
            p.wait()


def test_checker_jvm_of_a_killed_driver_is_gone_after_the_reaper():
    """A real driver: get_spark's JVM carries the mark and is the driver's
    child; after SIGKILL of the driver, nothing with its mark is left once
    the reaper has run (an idle JVM may also exit by itself: either is fine,
    a lingering one is not)."""
    code = ("from reports.spark_checker import get_spark; get_spark(); "
            "print('up', flush=True); import time; time.sleep(300)")
    driver = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert driver.stdout.readline().strip() == "up", "the Spark driver did not start"
        jvms = _marked(driver.pid)
        assert len(jvms) == 1, f"expected one marked JVM for driver {driver.pid}, found {jvms}"
        with open(f"/proc/{jvms[0]}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[1] == str(driver.pid)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        reap_checker_jvms()
        assert wait_until(lambda: not _marked(driver.pid), 30), \
            f"checker JVM {jvms} still running after its driver was killed and the reaper ran"
    finally:
        driver.kill()
        driver.wait()
