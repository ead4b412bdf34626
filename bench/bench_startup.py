"""How long a cluster takes to come up: ZooKeeper plus N brokers, until every
broker is registered in ZooKeeper, on each backend, images already built.

    .venv/bin/python bench/bench_startup.py [--brokers 3] [--rounds 3] [--backends docker,local]

Prints a table (median and max of the rounds) and writes
runs/bench/startup-<date>.json with the machine description. The rounds of
the backends are interleaved, so both see the same machine load.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.paths import RAW  # noqa: E402
from harness.backends import make_cluster  # noqa: E402
from harness.backends.base import ClusterSpec  # noqa: E402


def machine() -> dict:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    mem_kb = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")))
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def one_round(backend: str, brokers: int, zookeepers: int) -> dict:
    c = make_cluster(ClusterSpec(name=f"bench-{backend}", brokers=brokers, zookeepers=zookeepers),
                     backend)
    t0 = time.monotonic()
    try:
        c.start()
        up = time.monotonic() - t0
    finally:
        t1 = time.monotonic()
        c.destroy()
        down = time.monotonic() - t1
    return {"up_s": up, "down_s": down}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--zookeepers", type=int, default=1, choices=(1, 3))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default="docker,local")
    a = ap.parse_args()
    backends = a.backends.split(",")
    if "docker" in backends:
        from harness.images import ensure_images
        ensure_images()
    results: dict[str, list[dict]] = {b: [] for b in backends}
    for r in range(a.rounds):
        for b in backends:
            res = one_round(b, a.brokers, a.zookeepers)
            results[b].append(res)
            print(f"round {r + 1}/{a.rounds} {b:6s} up {res['up_s']:.1f}s down {res['down_s']:.1f}s",
                  file=sys.stderr)
    print(f"\n{a.brokers} brokers + {a.zookeepers} ZooKeeper, {a.rounds} rounds")
    print(f"{'backend':8s} {'up median':>10s} {'up max':>8s} {'down median':>12s}")
    summary = {}
    for b, rs in results.items():
        ups = [x["up_s"] for x in rs]
        downs = [x["down_s"] for x in rs]
        summary[b] = {"up_median_s": round(statistics.median(ups), 2), "up_max_s": round(max(ups), 2),
                      "down_median_s": round(statistics.median(downs), 2)}
        print(f"{b:8s} {summary[b]['up_median_s']:>9.1f}s {summary[b]['up_max_s']:>7.1f}s "
              f"{summary[b]['down_median_s']:>11.1f}s")
    out = RAW / f"startup-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "machine": machine(),
                               "brokers": a.brokers, "zookeepers": a.zookeepers,
                               "rounds": results, "summary": summary}, indent=1))
    print(f"\nwritten to {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
