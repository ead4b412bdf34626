"""`chaoslog fuzz`: a cluster of its own, generated requests against every
broker (harness/fuzz.py), then every replica's files checked; a JSON report.

    chaoslog fuzz --cases 100000 --seed 1 --out fuzz.json
    chaoslog fuzz --seed 1 --first 4711 --cases 1      # replay one case

Exit codes (reports/exit_codes.py): 0 nothing found, 1 findings or bad
replica files.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from cluster import admin
from cluster.protocol.sasl import SECURITY_PROTOCOLS
from harness import fuzz
from harness.backends import BACKENDS, make_cluster
from harness.backends.base import RUNNING, ClusterSpec
from harness.cluster_cli import positive_int
from reports.exit_codes import EXIT_INVALID, EXIT_OK

# The fixed configuration, with small segments so that rolls happen too, and
# no delay before a new group's first rebalance: each JoinGroup case joins a
# group of its own and would wait it out.
BROKER_CONFIG = {"min.insync.replicas": 2, "unclean.leader.election.enable": False,
                 "replication.truncation": "leader-epoch", "log.segment.bytes": 64 * 1024,
                 "group.initial.rebalance.delay.ms": 0}
TOPICS = {"fuzz-a": (3, 3), "fuzz-b": (1, 2)}   # name: (partitions, replication factor)


def add_parser(sub) -> None:
    p = sub.add_parser("fuzz", help="attack a cluster's wire protocol with generated requests",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=positive_int, default=10000, help="how many (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--first", type=int, default=0, metavar="I",
                   help="start at case I (with --cases 1: replay one case of a report)")
    p.add_argument("--brokers", type=positive_int, default=3)
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="where the brokers run (default %(default)s: processes, lightest)")
    p.add_argument("--check-every", type=positive_int, default=200, metavar="N",
                   help="check every broker's health every N cases")
    p.add_argument("--security", choices=SECURITY_PROTOCOLS, default="PLAINTEXT",
                   help="the brokers' listener; with SASL the cases attack authentication "
                        "(docs/design.md#security)")
    p.add_argument("--out", type=Path, default=Path("fuzz.json"), help="the JSON report")
    p.set_defaults(func=cmd_fuzz)


def read_target(zk, cluster) -> fuzz.Target:
    nodes = {n.broker_id: n for n in cluster.brokers()}
    brokers = [fuzz.Broker(b["id"], nodes[b["id"]].host, nodes[b["id"]].port, b["start_epoch"])
               for b in admin.brokers(zk) if b["id"] in nodes]
    info = admin.controller_info(zk)
    topics = {t: len(admin.describe_topic(zk, t)["partitions"]) for t in TOPICS}
    security = cluster.client_security
    credentials = (security.username, security.password()) if security and security.sasl else None
    return fuzz.Target(brokers, info["id"], info["epoch"], topics, security, credentials)


def cmd_fuzz(args) -> int:
    spec = ClusterSpec(name=f"fuzz-{int(time.time())}", brokers=args.brokers,
                       broker_config=BROKER_CONFIG, security=args.security)
    cluster = make_cluster(spec, args.backend)
    print(f"fuzz: starting {args.brokers} brokers on the {cluster.backend} backend", file=sys.stderr)
    try:
        cluster.start()
        zk = admin.connect(cluster.zookeeper_connect)
        try:
            for name, (parts, rf) in TOPICS.items():
                admin.create_topic(zk, name, parts, min(rf, args.brokers))
                admin.wait_for_leaders(zk, name, 60)
            target = read_target(zk, cluster)
        finally:
            zk.stop()
            zk.close()

        def gone() -> list[str]:
            return [n.name for n in cluster.brokers() if n.state != RUNNING]

        def pids() -> dict[str, int]:
            return {n.name: pid for n in cluster.brokers() if (pid := cluster.host_pid(n.name))}

        def progress(r: fuzz.Report) -> None:
            rate = r.cases / max(time.monotonic() - t0, 1e-6)
            print(f"fuzz: {r.cases}/{args.cases} cases, {len(r.findings)} findings, {rate:.0f}/s",
                  file=sys.stderr)

        t0 = time.monotonic()
        report = fuzz.run(target, args.seed, args.cases, first=args.first,
                          check_every=args.check_every, alive=gone, pids=pids, progress=progress)
        time.sleep(2)   # appends in flight reach the files
        violations: list[str] = []
        for n in cluster.brokers():
            violations += [f"{n.name}: {v}" for v in fuzz.check_replica_files(cluster.log_dir(n.name))]
        report.log_check = {"brokers": len(cluster.brokers()), "violations": violations}
    finally:
        cluster.destroy()
    fuzz.write_report(report, args.out)
    summary = report.to_json()
    print(f"fuzz: {summary['cases']} cases in {summary['seconds']} s (seed {args.seed}): "
          f"outcomes {summary['outcomes']}, {len(summary['findings'])} findings, "
          f"{summary['crashes']} crashes, {summary['accepted']} accepted without a credential, "
          f"{len(violations)} bad log entries; report {args.out}")
    for f in summary["findings"][:10]:
        print(f"  finding: {f}")
    return EXIT_OK if not summary["findings"] and not violations else EXIT_INVALID
