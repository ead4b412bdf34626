"""Run test commands in lanes side by side: how `make test` fits CI's 45 minutes.

Why: the suites are bound by the wall clock (runs of fixed length, faults
held for seconds) and use about half of the 2-core box (bench/cpu_share.py:
a pressure run kept 51 % of both cores busy, catalogue runs 33 %;
bench/results/cpu-share-2026-11-29.txt). One after another, CI's tiers took 56 minutes. Two lanes of about
equal length keep both cores busy without overloading them: each lane
runs its commands one after another, the lanes run at once.

Each command's output goes to its own log (build/lanes/); a line per lane
every minute says where each stands, and when all are done every log is
printed whole, the failed ones last. The exit status is 0 only if every
command of every lane passed. Ctrl-C (or SIGTERM) is passed on as SIGINT,
so that pytest tears its clusters down; whatever is left after
STOP_GRACE_S is killed (and the next session's reaper removes its
containers: harness/reaper.py).

    python scripts/lanes.py --lane 'CMD' 'CMD' --lane 'CMD' ...
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

LOG_DIR = Path("build/lanes")
PROGRESS_EVERY_S = 60.0
STOP_GRACE_S = 120.0
_PERCENT = re.compile(rb"\[\s*(\d+)%\]")


@dataclass
class Command:
    line: str
    log: Path
    rc: int | None = None
    seconds: float = 0.0


@dataclass
class Lane:
    name: str
    commands: list[Command]
    current: subprocess.Popen | None = None
    stopping: bool = False

    def run(self) -> None:
        """The commands one after another; a failed one does not stop the
        next (CI shows every failure of a run)."""
        for cmd in self.commands:
            if self.stopping:
                return
            t0 = time.monotonic()
            with open(cmd.log, "wb") as out:
                self.current = subprocess.Popen(cmd.line, shell=True, stdout=out,
                                                stderr=subprocess.STDOUT, start_new_session=True)
                if self.stopping:   # (a Ctrl-C while it started)
                    self.interrupt()
                cmd.rc = self.current.wait()
            cmd.seconds = time.monotonic() - t0
            _say(f"[{self.name}] {'passed' if cmd.rc == 0 else f'FAILED (exit {cmd.rc})'} "
                 f"in {_mmss(cmd.seconds)}: {cmd.line}")

    def where(self) -> str:
        running = [c for c in self.commands if c.rc is None]
        if not running:
            return "done"
        cmd = running[0]
        done = len(self.commands) - len(running)
        return f"{done + 1}/{len(self.commands)} {_percent(cmd.log)}: {cmd.line}"

    def interrupt(self) -> None:
        self.stopping = True
        if self.current is not None and self.current.poll() is None:
            os.killpg(self.current.pid, signal.SIGINT)

    def kill(self) -> None:
        if self.current is not None and self.current.poll() is None:
            os.killpg(self.current.pid, signal.SIGKILL)


def _percent(log: Path) -> str:
    """pytest's last progress mark in `log` ("[ 45%]": 45 % of its tests
    done), else "under way" (pytest marks a file's line when it ends)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            found = _PERCENT.findall(f.read())
    except OSError:
        found = []
    return f"{int(found[-1])}%" if found else "under way"


def _mmss(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def _say(line: str) -> None:
    print(line, flush=True)


def _lanes(groups: list[list[str]]) -> list[Lane]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    lanes = []
    for i, lines in enumerate(groups, 1):
        name = f"lane {i}"
        lanes.append(Lane(name, [Command(line, LOG_DIR / f"lane{i}-{j}.log")
                                 for j, line in enumerate(lines, 1)]))
    return lanes


def run(groups: list[list[str]]) -> int:
    lanes = _lanes(groups)
    t0 = time.monotonic()
    threads = [threading.Thread(target=lane.run, name=lane.name) for lane in lanes]

    def stop(signum, _frame):
        _say(f"{signal.Signals(signum).name}: stopping every lane (pytest tears its clusters down)")
        for lane in lanes:
            lane.interrupt()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    for lane in lanes:
        _say(f"[{lane.name}] " + " ; then ".join(c.line for c in lane.commands))
    _say(f"logs in {LOG_DIR}/; a line per lane every {PROGRESS_EVERY_S:.0f} s, every log at the end")
    for t in threads:
        t.start()
    deadline, next_line = None, time.monotonic() + PROGRESS_EVERY_S
    while any(t.is_alive() for t in threads):
        time.sleep(1.0)
        if any(lane.stopping for lane in lanes):
            deadline = deadline or time.monotonic() + STOP_GRACE_S
            if time.monotonic() > deadline:
                for lane in lanes:
                    lane.kill()
        elif time.monotonic() >= next_line and any(t.is_alive() for t in threads):
            next_line += PROGRESS_EVERY_S
            _say(f"[{_mmss(time.monotonic() - t0)}] "
                 + " | ".join(f"{lane.name}: {lane.where()}" for lane in lanes))
    for t in threads:
        t.join()

    commands = [c for lane in lanes for c in lane.commands]
    for c in sorted(commands, key=lambda c: c.rc not in (0, None)):
        if c.rc is None:
            continue
        _say(f"\n{'=' * 30} {c.line} (exit {c.rc}, {_mmss(c.seconds)}) {'=' * 30}")
        sys.stdout.flush()
        try:
            sys.stdout.buffer.write(c.log.read_bytes())
        except OSError as e:
            _say(f"(its log is gone: {e})")
        sys.stdout.buffer.flush()
    _say("")
    for c in commands:
        status = "not run" if c.rc is None else ("passed" if c.rc == 0 else f"FAILED (exit {c.rc})")
        _say(f"{status:>16}  {_mmss(c.seconds):>6}  {c.line}")
    _say(f"all lanes: {_mmss(time.monotonic() - t0)}")
    return 0 if all(c.rc == 0 for c in commands) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lane", action="append", nargs="+", metavar="CMD", required=True,
                   help="shell commands run one after another in one lane (repeat for each lane)")
    return run(p.parse_args(argv).lane)


if __name__ == "__main__":
    sys.exit(main())
