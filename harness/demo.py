"""`chaoslog demo`: the short chaos run of the README's quickstart.

A preset of `chaoslog run`: three brokers and ZooKeeper (in containers when a
Docker engine answers), a topic of 3 partitions with replication factor 3 and
the fixed configuration (min ISR 2, no unclean election), producers and a
consumer, the leader of a partition killed and restarted, final reads, the
Spark analysis, a summary and the path of the report.
"""
from __future__ import annotations

import argparse

PRESET = [
    "--brokers", "3", "--zookeepers", "1", "--partitions", "3", "--replication-factor", "3",
    "--broker-config", "min.insync.replicas=2", "unclean.leader.election.enable=false",
    "--acks", "all", "--rate", "200",
    "--faults", "kill", "--target", "kill=leader",
    "--interval", "6,8", "--fault-duration", "8,10", "--quiet", "5",
]


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="a short chaos run: 3 brokers, a killed leader, analysis, report")
    p.add_argument("--backend", choices=("docker", "local"),
                   help="default: docker when an engine answers, else local")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of workload and faults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="run directory (default runs/RUN_ID)")
    p.set_defaults(func=run)


def run_argv(args) -> list[str]:
    argv = [*PRESET, "--duration", str(args.duration), "--seed", str(args.seed)]
    if args.backend:
        argv += ["--backend", args.backend]
    if args.out:
        argv += ["--out", args.out]
    return argv


def run(args) -> int:
    from harness import run_cli
    parser = argparse.ArgumentParser(prog="chaoslog")
    run_cli.add_parser(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(["run", *run_argv(args)])
    return ns.func(ns)
