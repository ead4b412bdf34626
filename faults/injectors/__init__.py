"""The fault catalogue: every fault chaoslog can inject, by name.

Each entry says which family it belongs to, which roles a schedule may aim it
at, which injector class does it (and so what the cluster must offer: the
class's NEEDS, contracts/abilities.py), and how a schedule draws its
parameters. `make(name, ctx, target, **params)` builds the injector.

Names are what `--faults`, `chaoslog fault NAME`, nemesis events' `fault`
field and the checker's fault windows use.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Collection

from contracts.abilities import NETWORK, Need, NodeNetwork, ProxiedLinks, missing
from faults.injectors.admin import AddPartitions, ElectPreferred, MoveLeader, Reassign, RecreateTopic
from faults.injectors.base import FaultContext, FaultError, Injector, refusal
from faults.injectors.disk import BadOffset, BitFlip, LoseUnfsynced, TruncateTail
from faults.injectors.link import LinkToxic
from faults.injectors.partition import Partition
from faults.injectors.process import Bounce, Kill, Pause, Stop
from faults.injectors.zookeeper import ExpireSession, KillMember, PauseMember

__all__ = ["CATALOGUE", "FaultKind", "FaultContext", "FaultError", "Injector",
           "make", "kind", "roles_for", "unsupported", "lacking", "why_not"]

NO_PARAMS: Callable[[random.Random], dict[str, Any]] = lambda rng: {}

# A run's words for the network needs (`chaoslog run` sets the cluster up by them).
NEED_WORDS = {ProxiedLinks: "proxy", NETWORK: "net"}


@dataclass(frozen=True)
class FaultKind:
    name: str
    family: str                        # process | partition | link | zookeeper | disk | admin
    injector: type[Injector]           # its NEEDS say what the cluster must offer
    roles: tuple[str | None, ...]      # a schedule picks one; None = no target
    fixed: dict[str, Any] = field(default_factory=dict)  # parameters the name implies
    draw: Callable[[random.Random], dict[str, Any]] = field(default=NO_PARAMS)
    about: str = ""
    # The least time a step of this fault needs to do its work (a bounce
    # round waits for a session to expire and a broker to come back).
    min_duration_s: Callable[[dict[str, Any]], float] = field(default=lambda params: 0.0)

    def build(self, ctx: FaultContext, target: str | None = None, **params: Any) -> Injector:
        return self.injector(ctx, target, **self.fixed, **params)

    @property
    def needs(self) -> tuple[str, ...]:
        """The network its injector needs, in a run's words: "net" (iptables
        or the proxy), "proxy" (links through the proxy)."""
        return tuple(NEED_WORDS[n] for n in self.injector.NEEDS if n in NEED_WORDS)


def _k(name, family, injector, roles, draw=NO_PARAMS, about="", min_s=None, **fixed):
    return FaultKind(name, family, injector, tuple(roles), fixed, draw, about,
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
    _k("hard-bounce", "process", Bounce, ("leader", "controller"), hard=True,
       draw=lambda r: {"times": r.randint(2, 4)},
       about="SIGKILL, wait for the session to expire, restart; N rounds",
       min_s=lambda p: BOUNCE_ROUND_S * int(p.get("times", 3))),
    _k("clean-bounce", "process", Bounce, ("leader", "controller"), hard=False,
       draw=lambda r: {"times": r.randint(2, 4)},
       about="SIGTERM, restart; N rounds",
       min_s=lambda p: BOUNCE_ROUND_S / 2 * int(p.get("times", 3))),
    _k("partition-isolate", "partition", Partition, ("leader", "controller", "random"),
       shape="isolate", about="one node cut off from all nodes"),
    _k("partition-halves", "partition", Partition, (None,), shape="halves",
       about="random minority / majority"),
    _k("partition-ring", "partition", Partition, (None,), shape="ring", about="majorities ring"),
    _k("partition-bridge", "partition", Partition, (None,), shape="bridge",
       about="two halves joined by one node"),
    _k("partition-one-way", "partition", Partition, ("leader", "random"), shape="one-way",
       draw=lambda r: {"direction": r.choice(["in", "out"])},
       about="the target stops hearing the other brokers (direction=out: they stop hearing it)"),
    _k("partition-zk", "partition", Partition, ("leader", "controller", "random"), shape="zk",
       about="a broker cut off from ZooKeeper only"),
    _k("partition-clients", "partition", Partition, ("leader", "random"), shape="clients",
       about="the clients cut off from one broker"),
    _k("latency", "link", LinkToxic, ("leader", "random", None), fault="latency",
       draw=lambda r: {"latency": r.choice([50, 200, 1000]), "jitter": r.choice([0, 50, 200])},
       about="latency with jitter on the target's links"),
    _k("bandwidth", "link", LinkToxic, ("leader", "random", None), fault="bandwidth",
       draw=lambda r: {"rate": r.choice([8, 64, 512])}, about="bandwidth limit (KB/s)"),
    _k("slicer", "link", LinkToxic, ("leader", "random", None), fault="slicer",
       about="data cut into small delayed slices"),
    _k("reset-peer", "link", LinkToxic, ("leader", "random"), fault="reset-peer",
       about="connections reset (RST) after a delay"),
    _k("link-timeout", "link", LinkToxic, ("leader", "random"), fault="link-timeout",
       about="data stops, connection closed after a timeout"),
    _k("zk-expire", "zookeeper", ExpireSession, ("leader", "controller", "random"),
       about="expire a broker's ZooKeeper session"),
    _k("zk-pause", "zookeeper", PauseMember, ("zk-leader", "zk-follower"),
       about="freeze a ZooKeeper member (or the single server)"),
    _k("zk-kill", "zookeeper", KillMember, ("zk-leader", "zk-follower"),
       about="SIGKILL a ZooKeeper member, restart on heal"),
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


def kind(name: str) -> FaultKind:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise FaultError(f"unknown fault {name!r}; faults are {', '.join(CATALOGUE)}") from None


def lacking(name: str, abilities: Collection[type]) -> list[Need]:
    """The needs of fault `name` (its injector's NEEDS) that a cluster
    declaring `abilities` does not meet."""
    return missing(kind(name).injector.NEEDS, abilities)


def why_not(name: str, abilities: Collection[type]) -> str | None:
    """Why fault `name` cannot run on a cluster declaring `abilities`, or None."""
    return refusal(name, kind(name).injector.NEEDS, abilities)


def unsupported(name: str, *, backend: str, proxied: bool, zookeepers: int) -> str | None:
    """Why fault `name` cannot run on a built-in cluster of this shape, judged
    before the cluster exists, or None. Such a cluster has every ability but
    the network ones, which follow from its backend (docker: iptables) and
    `proxied`; no fault needs more than one ZooKeeper node."""
    offered = ({NodeNetwork} if backend == "docker" else set()) | ({ProxiedLinks} if proxied else set())
    network = [n for n in kind(name).injector.NEEDS if n in NEED_WORDS]
    return refusal(name, network, offered)


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
