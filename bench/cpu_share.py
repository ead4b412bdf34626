"""How much of the machine's CPUs a command keeps busy, from /proc/stat.

    .venv/bin/python bench/cpu_share.py -- .venv/bin/pytest suites/test_suite_pressure.py -k ...

Busy is every jiffy but idle and iowait, over all CPUs, between the
command's start and end. Why it matters: `make test` runs its sessions in
two lanes (scripts/lanes.py) because a suite run keeps about half of a
2-core box busy (bench/results/cpu-share-2026-11-29.txt).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time


def _jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs so far."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]   # idle, iowait
    total = sum(fields[:8])        # user nice system idle iowait irq softirq steal
    return total - idle, total


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: cpu_share.py -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    b0, t0 = _jiffies()
    start = time.monotonic()
    rc = subprocess.call(argv)
    b1, t1 = _jiffies()
    print(f"cpu busy: {100 * (b1 - b0) / max(1, t1 - t0):.0f}% of {os.cpu_count()} CPUs "
          f"for {time.monotonic() - start:.0f} s; exit {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
