"""The one interface every fault has, and the context it works in.

An injector is built for one fault occurrence: `start()` resolves its targets
(a role means whoever holds it *now*), records a nemesis `start` event and
breaks something; `stop()` (alias `heal()`) repairs it and records `stop`.
Recording lives here rather than in the nemesis so that a fault applied by
hand (`chaoslog fault`) or from a pytest fixture leaves the same trace as one
from a schedule.

Each injector says which abilities of contracts/abilities.py it needs
(`NEEDS`); start() refuses a cluster that does not declare them, before
anything is resolved or recorded. Undoing everything, whoever did it, is
faults/heal.py's job.
"""
from __future__ import annotations

import abc
import random
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Collection

from contracts.abilities import (NETWORK, Cluster, KafkaMetadata, Need, NodeFiles, NodeNetwork,
                                 PauseResume, ProcessControl, ProxiedLinks, Recorder,
                                 ZooKeeperAccess, can, missing)
from contracts.deadline import wait_until
from faults.targets import Resolver, Target


class FaultError(RuntimeError):
    """A fault that cannot be applied to this cluster (missing ability,
    bad parameter); the message says why."""


# What a refusal says a fault needs, by need: "{fault} needs {WANTED[need]}".
WANTED: dict[Need, str] = {
    ProcessControl: "nodes it can kill, stop and start",
    PauseResume: "nodes it can pause and resume",
    NETWORK: "the docker backend (iptables) or a proxied cluster",
    NodeNetwork: "the docker backend (iptables)",
    ProxiedLinks: "links through the proxy (a proxied cluster)",
    ZooKeeperAccess: "a ZooKeeper the harness reads (the built-in broker's layout)",
    NodeFiles: "the brokers' files on this machine",
    KafkaMetadata: "brokers that answer Kafka Metadata",
}


def refusal(fault: str, needs: Collection[Need], abilities: Collection[type]) -> str | None:
    """Why `fault`, which needs `needs`, cannot run on a cluster that
    declares `abilities`: its first need they do not meet; None if none."""
    lacking = missing(needs, abilities)
    return f"{fault} needs {WANTED[lacking[0]]}" if lacking else None


@dataclass
class FaultContext:
    """What an injector may use. `cluster` declares its abilities
    (contracts/abilities.py); `recorder` is a harness.history.HistoryRecorder
    or None; `observe` writes a line of the run's observations.jsonl
    (`observe(kind, **fields)`, stamped with the history's clock), None
    outside a run."""
    cluster: Cluster
    resolver: Resolver
    rng: random.Random
    recorder: Recorder | None = None
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr))
    mechanism: str = "auto"        # partitions: iptables | proxy | auto
    wait_timeout: float = 60.0     # for "broker left/rejoined ZooKeeper" waits
    observe: Callable[..., Any] | None = None

    @property
    def default_partition(self) -> tuple[str, int] | None:
        return self.resolver.default_partition

    @property
    def coordination(self) -> str:
        """`controller` or `v2` (docs/design.md#v2): who carries admin
        operations out, the controller or each partition's leader. A
        cluster without a ZooKeeper the harness reads has no such mode."""
        if can(self.cluster, ZooKeeperAccess):
            return self.cluster.coordination
        return "controller"

    @classmethod
    def create(cls, cluster: Cluster, zk: Any, *, seed: int | None,
               recorder: Recorder | None = None,
               log: Callable[[str], None] = lambda msg: None,
               partition: tuple[str, int] | None = None, mechanism: str = "auto",
               topics: set[str] | None = None,
               observe: Callable[..., Any] | None = None) -> "FaultContext":
        """The one way to make a context: role choices draw from their own
        stream of the seed (apart from the schedule's draws), so a seeded run
        makes the same choices against the same cluster state; seed None
        draws them at random. `topics`: the run's topics, which admin
        operations act on (None: every topic)."""
        rng = random.Random(None if seed is None else seed * 2 + 1)
        resolver = Resolver(cluster, zk, rng, partition)
        resolver.topics = set(topics) if topics is not None else None
        return cls(cluster, resolver, rng, recorder=recorder, log=log, mechanism=mechanism,
                   observe=observe)


class Injector(abc.ABC):
    """One fault occurrence. Subclasses implement _start/_stop, declare the
    abilities they use in NEEDS, and may override _resolve and detail()."""

    fault: str = "?"
    # The abilities of contracts/abilities.py this fault uses (each one, or
    # any of a tuple); start() checks them, so _start and _stop may rely on them.
    NEEDS: tuple[Need, ...] = ()

    def __init__(self, ctx: FaultContext, target: str | None = None, **params: Any):
        self.ctx = ctx
        self.target = Target.parse(target) if target else None
        self.params = params
        self.targets: list[str] = []
        self.active = False
        self.notes: list[str] = []
        self._lock = threading.Lock()

    # -- the interface -------------------------------------------------------
    def start(self, admit: Callable[["Injector"], str | None] | None = None) -> None:
        """Resolve the targets and break something. `admit` (a nemesis that
        runs faults side by side) sees the resolved injector first and may
        refuse it with a reason: a FaultError, nothing recorded. So is a
        cluster that does not declare what NEEDS asks for."""
        why = refusal(self.fault, self.NEEDS, self.ctx.cluster.abilities)
        if why:
            raise FaultError(why)
        with self._lock:
            if self.active:
                raise FaultError(f"{self.fault} is already active")
            self.targets = self._resolve()
            why = admit(self) if admit is not None else None
            if why:
                raise FaultError(why)
            self._record("start")
            self.active = True
        try:
            self._start()
        except BaseException as e:
            self.notes.append(f"start failed: {e}")
            self.stop()
            raise

    def stop(self) -> None:
        with self._lock:
            if not self.active:
                return
            try:
                self._stop()
            except BaseException as e:
                self.notes.append(f"heal failed: {e}")
                raise
            finally:
                self.active = False
                self._record("stop")

    heal = stop

    def describe(self) -> dict[str, Any]:
        return {"fault": self.fault, "targets": list(self.targets), "detail": self.detail()}

    def detail(self) -> str:
        parts = [f"target={self.target}"] if self.target else []
        parts += [f"{k}={v}" for k, v in sorted(self.params.items())]
        parts += self.notes
        return "; ".join(parts)

    # -- for subclasses ------------------------------------------------------
    def _resolve(self) -> list[str]:
        if self.target is None:
            raise FaultError(f"{self.fault} needs a target")
        return self.ctx.resolver.resolve(self.target)

    @abc.abstractmethod
    def _start(self) -> None: ...

    @abc.abstractmethod
    def _stop(self) -> None: ...

    def _record(self, phase: str) -> None:
        rec = self.ctx.recorder
        if rec is not None and not rec.closed:
            rec.nemesis(self.fault, phase, self.targets, self.detail() or None)
        self.ctx.log(f"nemesis: {self.fault} {phase} {','.join(self.targets) or '-'}"
                     + (f" ({self.detail()})" if self.detail() else ""))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.fault} targets={self.targets} active={self.active}>"


# -- waiting for registrations ----------------------------------------------------
# A broker is "registered" when the cluster counts it as live: its
# /brokers/ids/N node in ZooKeeper (ZooKeeperAccess), or, on a target without
# one, what the cluster says (KafkaMetadata.broker_live: it answers, and
# Metadata lists it).

def registration(ctx: FaultContext, name: str) -> int | None:
    """The ZooKeeper session that holds the broker's /brokers/ids/N, or None
    (also on a target without ZooKeeper, which has no sessions to tell apart)."""
    from cluster.zkpaths import broker_path
    if not _has_zookeeper(ctx):
        return None
    stat = ctx.resolver.zk.exists(broker_path(_broker_id(name)))
    return None if stat is None else stat.ephemeralOwner


def broker_registered(ctx: FaultContext, name: str, not_by: int | None = None) -> bool:
    """Registered, and (with `not_by`) by another session than that one: a
    killed broker's registration outlives it until its session expires, so
    "registered again" must mean a new session."""
    if not _has_zookeeper(ctx):
        return bool(ctx.cluster.broker_live(name))
    owner = registration(ctx, name)
    return owner is not None and (not_by is None or owner != not_by)


def _has_zookeeper(ctx: FaultContext) -> bool:
    return can(ctx.cluster, ZooKeeperAccess)


def _broker_id(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def wait_registered(ctx: FaultContext, name: str, not_by: int | None = None) -> bool:
    """Until the broker is registered (by another session than `not_by`);
    False after ctx.wait_timeout. A ZooKeeper hiccup counts as "not yet"."""
    return bool(wait_until(lambda: broker_registered(ctx, name, not_by), ctx.wait_timeout,
                           retry_on=(Exception,)))


def wait_unregistered(ctx: FaultContext, name: str) -> bool:
    """Until the broker's registration is gone (its session expired)."""
    def gone() -> bool:
        if _has_zookeeper(ctx):
            return registration(ctx, name) is None
        return _broker_id(name) not in ctx.resolver.live_brokers()
    return bool(wait_until(gone, ctx.wait_timeout, retry_on=(Exception,)))


def is_broker(name: str) -> bool:
    return name.startswith("broker-")
