"""The fault catalogue: every fault chaoslog can inject, by name.

Each entry says which family it belongs to, which roles a schedule may aim it
at, what the cluster must offer for it to work, and how a schedule draws its
parameters. `make(name, ctx, target, **params)` builds the injector.

Names are what `--faults`, `chaoslog fault NAME`, nemesis events' `fault`
field and the checker's fault windows use.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from faults.injectors.admin import AddPartitions, ElectPreferred, MoveLeader, Reassign, RecreateTopic
from faults.injectors.base import FaultContext, FaultError, Injector
from faults.injectors.disk import BadOffset, BitFlip, LoseUnfsynced, TruncateTail
from faults.injectors.link import LinkToxic
from faults.injectors.partition import Partition
from faults.injectors.process import Bounce, Kill, Pause, Stop
from faults.injectors.zookeeper import ExpireSession

__all__ = ["CATALOGUE", "FaultKind", "FaultContext", "FaultError", "Injector",
           "make", "kind", "roles_for", "unsupported"]

NO_PARAMS: Callable[[random.Random], dict[str, Any]] = lambda rng: {}


@dataclass(frozen=True)
class FaultKind:
    name: str
    family: str                        # process | partition | link | zookeeper | disk | admin
    build: Callable[..., Injector]
    roles: tuple[str | None, ...]      # a schedule picks one; None = no target
    needs: tuple[str, ...] = ()        # "net" (iptables or proxy), "proxy", "zk-ensemble"
    draw: Callable[[random.Random], dict[str, Any]] = field(default=NO_PARAMS)
    about: str = ""
    # The least time a step of this fault needs to do its work (a bounce
    # round waits for a session to expire and a broker to come back).
    min_duration_s: Callable[[dict[str, Any]], float] = field(default=lambda params: 0.0)


def _k(name, family, build, roles, needs=(), draw=NO_PARAMS, about="", min_s=None):
    return FaultKind(name, family, build, tuple(roles), tuple(needs), draw, about,
                     min_s or (lambda params: 0.0))


# A bounce round: session timeout (6 s by default) + restart + registration.
BOUNCE_ROUND_S = 12.0
# A reassignment: new replicas start, catch up, join the ISR; then an election.
ADMIN_OPERATION_S = 15.0


BROKER_ROLES = ("leader", "controller", "follower", "random")

CATALOGUE: dict[str, FaultKind] = {k.name: k for k in [
    _k("kill", "process", Kill, BROKER_ROLES, about="SIGKILL, restart on heal"),
    _k("stop", "process", Stop, BROKER_ROLES, about="SIGTERM (controlled shutdown), restart on heal"),
    _k("pause", "process", Pause, BROKER_ROLES, about="freeze (SIGSTOP / docker pause), resume on heal"),
    _k("hard-bounce", "process", lambda ctx, t, **p: Bounce(ctx, t, hard=True, **p),
       ("leader", "controller"), draw=lambda r: {"times": r.randint(2, 4)},
       about="SIGKILL, wait for the session to expire, restart; N rounds",
       min_s=lambda p: BOUNCE_ROUND_S * int(p.get("times", 3))),
    _k("clean-bounce", "process", lambda ctx, t, **p: Bounce(ctx, t, hard=False, **p),
       ("leader", "controller"), draw=lambda r: {"times": r.randint(2, 4)},
       about="SIGTERM, restart; N rounds",
       min_s=lambda p: BOUNCE_ROUND_S / 2 * int(p.get("times", 3))),
    _k("partition-isolate", "partition", lambda ctx, t, **p: Partition(ctx, t, shape="isolate", **p),
       ("leader", "controller", "random"), ("net",), about="one node cut off from all nodes"),
    _k("partition-halves", "partition", lambda ctx, t, **p: Partition(ctx, t, shape="halves", **p),
       (None,), ("net",), about="random minority / majority"),
    _k("partition-ring", "partition", lambda ctx, t, **p: Partition(ctx, t, shape="ring", **p),
       (None,), ("net",), about="majorities ring"),
    _k("partition-bridge", "partition", lambda ctx, t, **p: Partition(ctx, t, shape="bridge", **p),
       (None,), ("net",), about="two halves joined by one node"),
    _k("partition-one-way", "partition", lambda ctx, t, **p: Partition(ctx, t, shape="one-way", **p),
       ("leader", "random"), ("net",), draw=lambda r: {"direction": r.choice(["in", "out"])},
       about="the target stops hearing the other brokers (direction=out: they stop hearing it)"),
    _k("partition-zk", "partition", lambda ctx, t, **p: Partition(ctx, t, shape="zk", **p),
       ("leader", "controller", "random"), ("net",), about="a broker cut off from ZooKeeper only"),
    _k("partition-clients", "partition", lambda ctx, t, **p: Partition(ctx, t, shape="clients", **p),
       ("leader", "random"), ("net",), about="the clients cut off from one broker"),
    _k("latency", "link", lambda ctx, t, **p: LinkToxic(ctx, t, fault="latency", **p),
       ("leader", "random", None), ("proxy",),
       draw=lambda r: {"latency": r.choice([50, 200, 1000]), "jitter": r.choice([0, 50, 200])},
       about="latency with jitter on the target's links"),
    _k("bandwidth", "link", lambda ctx, t, **p: LinkToxic(ctx, t, fault="bandwidth", **p),
       ("leader", "random", None), ("proxy",), draw=lambda r: {"rate": r.choice([8, 64, 512])},
       about="bandwidth limit (KB/s)"),
    _k("slicer", "link", lambda ctx, t, **p: LinkToxic(ctx, t, fault="slicer", **p),
       ("leader", "random", None), ("proxy",), about="data cut into small delayed slices"),
    _k("reset-peer", "link", lambda ctx, t, **p: LinkToxic(ctx, t, fault="reset-peer", **p),
       ("leader", "random"), ("proxy",), about="connections reset (RST) after a delay"),
    _k("link-timeout", "link", lambda ctx, t, **p: LinkToxic(ctx, t, fault="link-timeout", **p),
       ("leader", "random"), ("proxy",), about="data stops, connection closed after a timeout"),
    _k("zk-expire", "zookeeper", ExpireSession, ("leader", "controller", "random"),
       about="expire a broker's ZooKeeper session"),
    _k("zk-pause", "zookeeper", lambda ctx, t, **p: _renamed(Pause(ctx, t, **p), "zk-pause"),
       ("zk-leader", "zk-follower"), about="freeze a ZooKeeper member (or the single server)"),
    _k("zk-kill", "zookeeper", lambda ctx, t, **p: _renamed(Kill(ctx, t, **p), "zk-kill"),
       ("zk-leader", "zk-follower"), about="SIGKILL a ZooKeeper member, restart on heal"),
    _k("truncate-tail", "disk", TruncateTail, ("leader", "follower"),
       draw=lambda r: {"bytes": r.randint(1, 512)}, about="cut the tail of a replica's active segment"),
    _k("bitflip", "disk", BitFlip, ("leader", "follower"),
       draw=lambda r: {"flips": r.randint(1, 4)}, about="flip bits near the end of a replica's active segment"),
    _k("bad-offset", "disk", BadOffset, ("leader", "follower"),
       draw=lambda r: {"by": r.randint(1, 1000)},
       about="shift the base offset of the last batch of a replica's active segment (outside the CRC)"),
    _k("lose-unfsynced", "disk", LoseUnfsynced, ("leader", "random", "all"),
       about="kill, then cut replicas back to their recovery point (power loss)"),
    _k("elect-preferred", "admin", ElectPreferred, (None,),
       about="preferred replica election of every partition (leaders move back)"),
    _k("move-leader", "admin", MoveLeader, (None,),
       about="a partition's leadership moves to an in-sync follower (reorder, then elect)",
       min_s=lambda p: ADMIN_OPERATION_S),
    _k("reassign", "admin", Reassign, (None,),
       draw=lambda r: {"how": r.choice(Reassign.HOWS)},
       about="a partition's replicas change: how=move one to a spare broker, grow by one, "
             "or shrink by a follower",
       min_s=lambda p: ADMIN_OPERATION_S),
    _k("add-partitions", "admin", AddPartitions, (None,),
       about="one of the run's topics gets one more partition",
       min_s=lambda p: ADMIN_OPERATION_S),
    _k("recreate-topic", "admin", RecreateTopic, (None,),
       about="one of the run's topics deleted and created again on the same replicas",
       min_s=lambda p: ADMIN_OPERATION_S),
]}


def _renamed(inj: Injector, name: str) -> Injector:
    inj.fault = name
    return inj


def kind(name: str) -> FaultKind:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise FaultError(f"unknown fault {name!r}; faults are {', '.join(CATALOGUE)}") from None


def unsupported(name: str, *, backend: str, proxied: bool, zookeepers: int) -> str | None:
    """Why fault `name` cannot run on such a cluster, or None if it can."""
    k = kind(name)
    if "proxy" in k.needs and not proxied:
        return f"{name} needs links through the proxy (a proxied cluster)"
    if "net" in k.needs and not proxied and backend != "docker":
        return f"{name} needs the docker backend (iptables) or a proxied cluster"
    if "zk-ensemble" in k.needs and zookeepers < 3:
        return f"{name} needs a 3-node ZooKeeper ensemble (--zookeepers 3)"
    return None


def roles_for(name: str, *, brokers: int, zookeepers: int, replication_factor: int) -> list[str | None]:
    """The roles of fault `name` that can exist on such a cluster."""
    out = []
    for role in kind(name).roles:
        if role == "zk-follower" and zookeepers < 3:
            continue
        if role in ("follower", "out-of-isr") and replication_factor < 2:
            continue
        if role == "controller" and brokers < 1:
            continue
        out.append(role)
    return out


def make(name: str, ctx: FaultContext, target: str | None = None, **params: Any) -> Injector:
    return kind(name).build(ctx, target, **params)
