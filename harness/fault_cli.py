"""`chaoslog fault` and `chaoslog heal`: one fault by hand against a cluster
from `chaoslog cluster up`.

Active faults are written to a state file so that `chaoslog heal` in another
process knows what it is undoing; heal itself is stateless (faults.heal), so
it also repairs faults whose process died.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from cluster import zkpaths
from contracts.deadline import wait_until
from faults import injectors
from faults.heal import final_heal
from faults.injectors.base import FaultContext, FaultError
from faults.targets import Target, TargetError
from harness.backends import attach
from harness.host import chaoslog_home
from harness.run import Refused, log_line
from harness.run_cli import kv_list, param_value
from reports.exit_codes import EXIT_OK, EXIT_REFUSED


def add_parser(sub: Any) -> None:
    p = sub.add_parser("fault", help="apply one fault to a cluster from `chaoslog cluster up`")
    p.add_argument("fault", help="fault name (chaoslog run --list-faults)")
    p.add_argument("--target", help="role or node: leader[:T/P], controller, follower, random, broker-2, ...")
    p.add_argument("--name", default="chaoslog", help="cluster name")
    p.add_argument("--param", nargs="*", metavar="KEY=VALUE", default=[])
    p.add_argument("--partition", default=None, help="default TOPIC/PARTITION for partition roles")
    p.add_argument("--mechanism", choices=("auto", "iptables", "proxy"), default="auto")
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=cmd_fault)
    p = sub.add_parser("heal", help="heal every fault on a cluster from `chaoslog cluster up`")
    p.add_argument("--name", default="chaoslog", help="cluster name")
    p.set_defaults(func=cmd_heal)


# -- the state file of active faults ----------------------------------------------------------

def fault_state_path(name: str) -> Path:
    return chaoslog_home() / "faults" / f"{name}.json"


def _load_state(name: str) -> list[dict[str, Any]]:
    try:
        return json.loads(fault_state_path(name).read_text())
    except (FileNotFoundError, ValueError):
        return []


def _save_state(name: str, active: list[dict[str, Any]]) -> None:
    p = fault_state_path(name)
    p.parent.mkdir(parents=True, exist_ok=True)
    if not active:
        p.unlink(missing_ok=True)
        return
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(active, indent=1))
    tmp.replace(p)


def _default_partition(zk: Any, partition: str | None) -> tuple[str, int] | None:
    """--partition, else the first topic's partition 0, else none."""
    if partition:
        t, _, p = partition.rpartition("/")
        return t, int(p)
    try:
        topics = sorted(zk.get_children(zkpaths.TOPICS))
    except Exception:  # noqa: BLE001 - no topics yet, or ZooKeeper trouble
        return None
    return (topics[0], 0) if topics else None


def _connect(cluster: Any) -> Any:
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
    zk.start(timeout=15)
    return zk


# -- the commands --------------------------------------------------------------------------------

def cmd_fault(a: argparse.Namespace) -> int:
    try:
        kind = injectors.kind(a.fault)
        params = {k: param_value(v) for k, v in kv_list(a.param, "--param").items()}
        if a.target:
            Target.parse(a.target)
        if a.partition and not a.partition.rpartition("/")[2].isdigit():
            raise Refused(f"--partition {a.partition!r}: expected TOPIC/PARTITION")
    except (FaultError, TargetError, Refused) as e:
        print(f"chaoslog fault: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    cluster = attach(a.name)
    why = injectors.unsupported(a.fault, backend=cluster.backend, proxied=bool(cluster.spec.proxied),
                                zookeepers=cluster.spec.zookeepers)
    if why:
        print(f"chaoslog fault: error: {why}", file=sys.stderr)
        return EXIT_REFUSED
    target = a.target or next((r for r in kind.roles if r), None)
    zk = _connect(cluster)
    try:
        ctx = FaultContext.create(cluster, zk, seed=a.seed, log=log_line,
                                  partition=_default_partition(zk, a.partition),
                                  mechanism=a.mechanism)
        try:
            inj = injectors.make(a.fault, ctx, target, **params)
            if a.target and inj.target:
                inj.target.check_against(cluster.spec.node_names())
            inj.start()
        except (FaultError, TargetError) as e:
            print(f"chaoslog fault: error: {e}", file=sys.stderr)
            return EXIT_REFUSED
        if hasattr(inj, "done"):  # a bounce: it runs its rounds, then it is over
            wait_until(inj.done, float("inf"))
            inj.stop()
        d = inj.describe()
        if inj.active:
            _save_state(a.name, [*_load_state(a.name), {**d, "params": params,
                                                        "started_at": time.time()}])
            print(f"{d['fault']} on {', '.join(d['targets'])}: active; undo with "
                  f"`chaoslog heal --name {a.name}`")
        else:
            print(f"{d['fault']} on {', '.join(d['targets'])}: done ({d['detail']})")
        return EXIT_OK
    finally:
        zk.stop()
        zk.close()


def cmd_heal(a: argparse.Namespace) -> int:
    cluster = attach(a.name)
    before = _load_state(a.name)
    try:
        zk = _connect(cluster)
    except Exception:  # noqa: BLE001 - ZooKeeper itself may be what is broken
        zk = None
    try:
        ctx = FaultContext.create(cluster, zk, seed=0)
        done = final_heal(ctx, wait_registered_brokers=zk is not None)
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
    _save_state(a.name, [])
    for f in before:
        print(f"healed {f['fault']} on {', '.join(f['targets'])}")
    for line in done:
        print(line)
    if not before and not done:
        print("nothing to heal")
    return EXIT_OK
