"""`chaoslog demo`: the short chaos run of the README's quickstart.

A preset RunSpec (harness/run.py): three brokers and ZooKeeper (in
containers when a Docker engine answers), a topic of 3 partitions with
replication factor 3 and the fixed configuration (min ISR 2, no unclean
election), producers and a consumer, the leader of a partition killed and
restarted, final reads, the Spark analysis, a summary and the path of the
report.
"""
from __future__ import annotations

import sys
from pathlib import Path

from harness.backends.base import ClusterSpec
from harness.run import Draw, Refused, RunSpec
from harness.workload import WorkloadSpec
from reports.exit_codes import EXIT_REFUSED


def preset(duration_s: float = 30.0, seed: int = 1, backend: str | None = None,
           out: str | None = None) -> RunSpec:
    """The demo's run, as data."""
    return RunSpec(
        cluster=ClusterSpec(brokers=3, zookeepers=1,
                            broker_config={"min.insync.replicas": 2,
                                           "unclean.leader.election.enable": False}),
        backend=backend, replication_factor=3, workload=WorkloadSpec({"t": 3}, rate=200),
        schedule=Draw(faults=["kill"], targets={"kill": "leader"}, seed=seed,
                      duration_s=duration_s, interval_s=(6, 8), fault_duration_s=(8, 10)),
        quiet_s=5, out=Path(out) if out else None)


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="a short chaos run: 3 brokers, a killed leader, analysis, report")
    p.add_argument("--backend", choices=("docker", "local"),
                   help="default: docker when an engine answers, else local")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of workload and faults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="run directory (default runs/RUN_ID)")
    p.set_defaults(func=run)


def run(args) -> int:
    from harness.run_cli import run_and_report
    try:
        spec = preset(args.duration, args.seed, args.backend, args.out).validate()
    except Refused as e:
        print(f"chaoslog demo: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    return run_and_report(spec)
