"""SIGKILL `chaoslog run` at random moments; the next command must leave nothing behind.

A run killed by the OOM killer, a CI timeout or a power cut gets no chance to
clean up: its brokers, ZooKeeper, workers, proxies and networks live on. The
harness's answer is ownership (harness/reaper.py): everything it starts is
labelled with its owner process, and every command that starts clusters
first removes what a dead owner left. This measures that promise.

Each round starts a short `chaoslog run` in a session of its own, waits a
random time from zero to past the run's end (cluster start, faults, final
reads, the checker: every phase gets hit), SIGKILLs the chaoslog process
alone, starts the next command (`chaoslog shrink` of a missing directory:
it starts, reaps and refuses at once), and then counts what is still there
of a dead owner: containers and networks with chaoslog's labels, local
clusters whose processes run, and worker processes of the killed run.

    .venv/bin/python bench/kill_anywhere.py --rounds 20 --backend docker [--out FILE]

The result goes to --out, by default runs/bench/kill-anywhere-DATE.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.paths import RAW  # noqa: E402
from harness import reaper  # noqa: E402
from harness.host import state_dir  # noqa: E402

CHAOSLOG = [sys.executable, "-m", "harness.cli"]
# Command lines of what a run starts on this host: workers, Spark's JVM, and
# the local backend's ZooKeeper, brokers and proxy.
ORPHANS = (b"harness.workload.worker", b"org.apache.spark", b"QuorumPeerMain",
           b"cluster.broker", b"faults.proxy")
RUN_S = 20


def run_argv(backend: str, out: Path) -> list[str]:
    faults = "kill,pause" if backend == "local" else "kill,pause,partition-isolate"
    return [*CHAOSLOG, "run", "--backend", backend, "--duration", str(RUN_S), "--faults", faults,
            "--interval", "2,5", "--fault-duration", "3,6", "--quiet", "3", "--out", str(out)]


def leftovers() -> list[str]:
    """What of a dead owner is still there (after the next command reaped)."""
    left = []
    try:
        from harness.docker_engine import docker_client
        client = docker_client()
        for c in client.containers.list(all=True, filters={"label": reaper.PREFIX}):
            if reaper.orphaned(c.labels):
                left.append(f"container {c.name}")
        for n in client.networks.list(filters={"label": reaper.PREFIX}):
            if reaper.orphaned(n.attrs.get("Labels") or {}):
                left.append(f"network {n.name}")
    except Exception:  # noqa: BLE001 - no engine: nothing can be left there
        pass
    for path in sorted(state_dir().glob("*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if state.get("backend") == "local" and not state.get("persistent") \
                and not reaper.owner_alive(state.get("owner") or ""):
            left.append(f"local cluster state {path.name}")
    return left


def workers_of(pid: int) -> list[int]:
    """Processes a run starts (ORPHANS) whose parent is the killed run or gone
    (reparented to init): processes that outlived their run."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if any(m in cmd for m in ORPHANS) and ppid in (1, pid):
            out.append(int(d.name))
    return out


def one_round(rng: random.Random, backend: str, base: Path, index: int) -> dict:
    out = base / f"run-{index:03d}"
    t0 = time.monotonic()
    proc = subprocess.Popen(run_argv(backend, out), cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait = rng.uniform(0.0, RUN_S + 45.0)
    try:
        proc.wait(timeout=wait)
        killed_at = None          # it finished first: nothing to kill this round
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at = round(time.monotonic() - t0, 1)
    time.sleep(3)                 # stdin-watching workers notice their parent is gone
    nxt = subprocess.run([*CHAOSLOG, "shrink", str(base / "no-such-run")], cwd=ROOT,
                         capture_output=True, text=True)
    reaped = [ln for ln in nxt.stderr.splitlines() if "removed what a killed" in ln]
    left = leftovers() + [f"process {p}" for p in workers_of(proc.pid)]
    return {"round": index, "killed_at_s": killed_at, "reaped": reaped, "left": left}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--backend", choices=("docker", "local"), default="docker")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=RAW / f"kill-anywhere-{time.strftime('%Y-%m-%d')}.json")
    a = p.parse_args()
    rng = random.Random(a.seed)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="chaoslog-kill-anywhere-") as tmp:
        for i in range(a.rounds):
            r = one_round(rng, a.backend, Path(tmp), i)
            rounds.append(r)
            print(f"round {i}: killed at {r['killed_at_s']} s, "
                  f"{len(r['reaped'])} reap line(s), left: {r['left'] or 'nothing'}", flush=True)
    killed = [r for r in rounds if r["killed_at_s"] is not None]
    result = {"command": " ".join(sys.argv), "machine": f"{platform.node()} {os.cpu_count()} cpus",
              "backend": a.backend, "seed": a.seed, "rounds": rounds, "kills": len(killed),
              "rounds_with_leftovers": sum(1 for r in rounds if r["left"])}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(killed)} kills in {len(rounds)} rounds; rounds with leftovers: "
          f"{result['rounds_with_leftovers']}", flush=True)
    return 0 if result["rounds_with_leftovers"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
