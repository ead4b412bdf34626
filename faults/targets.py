"""Who a fault hits, by role, resolved from ZooKeeper at the moment of the fault.

A schedule names roles ("the leader of t/0", "the controller"), not nodes:
which broker leads changes during a run, and a fault aimed at "the leader" must
hit whoever leads when the fault starts. Resolution reads the ZooKeeper
layout (docs/design.md#zk-layout, cluster.zkpaths): /controller, /brokers/ids,
/brokers/topics/T (assigned replicas) and /brokers/topics/T/P/leaderAndISR.
ZooKeeper's own leader comes from the cluster (Cluster.zookeeper_mode).

Target syntax (one string):
  controller                    the broker in /controller
  coordinator:GROUP             the coordinator of consumer group GROUP: the leader of the
                                __consumer_offsets partition the group maps to
  leader[:T/P]                  the leader of partition T/P (default partition if omitted)
  follower[:T/P]                a follower in the ISR of T/P
  out-of-isr[:T/P]              an assigned replica of T/P that is not in its ISR
  random                        one broker
  minority | majority | all     (n-1)//2, n//2+1 or all brokers
  live                          one broker registered in /brokers/ids
  zk-leader | zk-follower       a ZooKeeper ensemble member by its mode
  zk-random | zk-all
  broker-2, zk-1, ...           a node by name
Choices among several candidates use the caller's random.Random, so a seeded
schedule makes the same choices against the same cluster state.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from cluster import zkpaths
from cluster.server.offsets_topic import GROUP_METADATA_TOPIC, partition_for

ROLES = ("controller", "leader", "follower", "out-of-isr", "random", "minority", "majority",
         "all", "live", "zk-leader", "zk-follower", "zk-random", "zk-all", "coordinator")
PARTITION_ROLES = ("leader", "follower", "out-of-isr")
GROUP_ROLE = "coordinator"          # takes :GROUP (docs/design.md#groups)


class TargetError(ValueError):
    """A target that does not exist, or a role nobody holds right now."""


@dataclass(frozen=True)
class Target:
    role: str                       # one of ROLES, or "node"
    node: str | None = None         # for role "node"
    topic: str | None = None
    partition: int | None = None
    group: str | None = None        # for role "coordinator"

    @classmethod
    def parse(cls, text: str) -> "Target":
        text = text.strip()
        role, _, rest = text.partition(":")
        if role == GROUP_ROLE:
            if not rest:
                raise TargetError(f"target {text!r}: expected {GROUP_ROLE}:GROUP")
            return cls(role, group=rest)
        if role in ROLES:
            if not rest:
                return cls(role)
            if role not in PARTITION_ROLES:
                raise TargetError(f"target {text!r}: only {', '.join(PARTITION_ROLES)} take :TOPIC/PARTITION")
            topic, sep, part = rest.rpartition("/")
            if not sep or not topic or not part.isdigit():
                raise TargetError(f"target {text!r}: expected {role}:TOPIC/PARTITION")
            return cls(role, topic=topic, partition=int(part))
        if (text.startswith("broker-") or text.startswith("zk-")) and text.rsplit("-", 1)[1].isdigit():
            return cls("node", node=text)
        raise TargetError(f"unknown target {text!r}; targets are {', '.join(ROLES)} "
                          f"or a node name such as broker-1")

    def __str__(self) -> str:
        if self.role == "node":
            return self.node or "?"
        if self.role == GROUP_ROLE:
            return f"{self.role}:{self.group}"
        if self.topic is not None:
            return f"{self.role}:{self.topic}/{self.partition}"
        return self.role

    def check_against(self, node_names: list[str]) -> None:
        """Refuse a node name that is not in the cluster (before anything starts)."""
        if self.role == "node" and self.node not in node_names:
            raise TargetError(f"no node {self.node!r}; nodes are {', '.join(node_names)}")
        if self.role.startswith("zk-") and not any(n.startswith("zk-") for n in node_names):
            raise TargetError(f"target {self}: the cluster has no ZooKeeper nodes")


def qualify(target: str | None, partition: tuple[str, int] | None) -> str | None:
    """`target` with `partition` filled in when it is a partition role that
    names none ("leader" -> "leader:t/0"); anything else unchanged."""
    if target is None or partition is None:
        return target
    t = Target.parse(target)
    if t.role in PARTITION_ROLES and t.topic is None:
        return str(Target(t.role, topic=partition[0], partition=partition[1]))
    return target


class Resolver:
    """Turns Targets into node names against a live cluster.

    `zk` is a started kazoo client (or a factory returning one, called lazily
    so that purely node-named targets never touch ZooKeeper).
    """

    def __init__(self, cluster: Any, zk: Any | Callable[[], Any], rng: random.Random,
                 default_partition: tuple[str, int] | None = None):
        self.cluster = cluster
        self._zk = zk
        self.rng = rng
        self.default_partition = default_partition
        # The run's topics: what admin operations may act on (None: every
        # topic). A cluster shared by several runs holds the others' too.
        self.topics: set[str] | None = None
        # The run's consumer groups (recreate-topic leaves the topics they read alone).
        self.groups: set[str] = set()

    @property
    def zk(self) -> Any:
        if callable(self._zk) and not hasattr(self._zk, "get_children"):
            self._zk = self._zk()
        return self._zk

    # -- names ---------------------------------------------------------------
    def broker_names(self) -> list[str]:
        return sorted((n for n in self.cluster.spec.node_names() if n.startswith("broker-")),
                      key=_node_key)

    def zk_names(self) -> list[str]:
        return sorted((n for n in self.cluster.spec.node_names() if n.startswith("zk-")),
                      key=_node_key)

    # -- ZooKeeper reads -----------------------------------------------------
    def controller(self) -> int:
        try:
            data, _ = self.zk.get(zkpaths.CONTROLLER)
        except Exception as e:  # NoNodeError and connection trouble alike
            raise TargetError(f"no controller right now ({type(e).__name__})") from None
        d = zkpaths.loads(data) or {}
        if "brokerid" not in d:
            raise TargetError("no controller right now")
        return int(d["brokerid"])

    def live_brokers(self) -> list[int]:
        try:
            return sorted(int(c) for c in self.zk.get_children(zkpaths.BROKER_IDS))
        except Exception as e:
            raise TargetError(f"cannot list live brokers ({type(e).__name__})") from None

    def leader_and_isr(self, topic: str, partition: int) -> zkpaths.LeaderAndIsr:
        try:
            data, stat = self.zk.get(zkpaths.leader_and_isr_path(topic, partition))
        except Exception as e:
            raise TargetError(f"no leaderAndISR for {topic}/{partition} ({type(e).__name__})") from None
        return zkpaths.LeaderAndIsr.decode(data, stat.version)

    def assigned_replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        try:
            data, _ = self.zk.get(zkpaths.topic_path(topic))
        except Exception as e:
            raise TargetError(f"no topic {topic!r} ({type(e).__name__})") from None
        replicas = zkpaths.TopicAssignment.decode(data).partitions.get(partition)
        if not replicas:
            raise TargetError(f"topic {topic!r} has no partition {partition}")
        return replicas

    def coordinator(self, group: str) -> int:
        """The broker coordinating consumer group `group`: the leader of the
        offsets partition the group maps to, as the brokers map it (over the
        partition count the topic has in ZooKeeper)."""
        try:
            data, _ = self.zk.get(zkpaths.topic_path(GROUP_METADATA_TOPIC))
        except Exception as e:
            raise TargetError(f"no {GROUP_METADATA_TOPIC} topic yet, so no coordinator of group "
                              f"{group!r} ({type(e).__name__})") from None
        count = len(zkpaths.TopicAssignment.decode(data).partitions)
        if not count:
            raise TargetError(f"{GROUP_METADATA_TOPIC} has no partitions")
        partition = partition_for(group, count)
        lai = self.leader_and_isr(GROUP_METADATA_TOPIC, partition)
        if lai.leader == zkpaths.NO_LEADER:
            raise TargetError(f"group {group!r}: {GROUP_METADATA_TOPIC}/{partition} has no "
                              f"leader right now")
        return lai.leader

    def zk_modes(self) -> dict[str, str | None]:
        return {name: self.cluster.zookeeper_mode(name) for name in self.zk_names()}

    # -- resolution ----------------------------------------------------------
    def resolve(self, target: Target | str) -> list[str]:
        """Node names the target denotes now; raises TargetError if none."""
        t = Target.parse(target) if isinstance(target, str) else target
        brokers = self.broker_names()
        if t.role == "node":
            t.check_against(self.cluster.spec.node_names())
            return [t.node]
        if t.role == "controller":
            return [_broker(self.controller())]
        if t.role == GROUP_ROLE:
            return [_broker(self.coordinator(str(t.group)))]
        if t.role in PARTITION_ROLES:
            topic, partition = self._partition(t)
            lai = self.leader_and_isr(topic, partition)
            if t.role == "leader":
                if lai.leader == zkpaths.NO_LEADER:
                    raise TargetError(f"{topic}/{partition} has no leader right now")
                return [_broker(lai.leader)]
            if t.role == "follower":
                pool = [b for b in lai.isr if b != lai.leader]
                if not pool:
                    raise TargetError(f"{topic}/{partition}: the ISR {list(lai.isr)} has no follower")
            else:
                pool = [b for b in self.assigned_replicas(topic, partition) if b not in lai.isr]
                if not pool:
                    raise TargetError(f"{topic}/{partition}: every replica is in the ISR {list(lai.isr)}")
            return [_broker(self.rng.choice(sorted(pool)))]
        if t.role == "random":
            return [self.rng.choice(brokers)]
        if t.role == "live":
            live = self.live_brokers()
            if not live:
                raise TargetError("no broker is registered in ZooKeeper")
            return [_broker(self.rng.choice(live))]
        if t.role in ("minority", "majority"):
            n = len(brokers)
            k = (n - 1) // 2 if t.role == "minority" else n // 2 + 1
            if k < 1:
                raise TargetError(f"{n} broker(s) have no {t.role}")
            return sorted(self.rng.sample(brokers, k), key=_node_key)
        if t.role == "all":
            return brokers
        zks = self.zk_names()
        if not zks:
            raise TargetError(f"target {t}: the cluster has no ZooKeeper nodes")
        if t.role == "zk-all":
            return zks
        if t.role == "zk-random":
            return [self.rng.choice(zks)]
        modes = self.zk_modes()
        if t.role == "zk-leader":
            lead = [n for n, m in modes.items() if m in ("leader", "standalone")]
            if not lead:
                raise TargetError(f"no ZooKeeper leader answers srvr right now: {modes}")
            return lead[:1]
        followers = [n for n, m in modes.items() if m == "follower"]
        if not followers:
            raise TargetError(f"no ZooKeeper follower right now: {modes}")
        return [self.rng.choice(followers)]

    def _partition(self, t: Target) -> tuple[str, int]:
        if t.topic is not None:
            return t.topic, int(t.partition)
        if self.default_partition is None:
            raise TargetError(f"target {t} needs a partition: {t.role}:TOPIC/PARTITION")
        return self.default_partition


def _broker(broker_id: int) -> str:
    return f"broker-{broker_id}"


def _node_key(name: str) -> tuple[str, int]:
    kind, _, num = name.rpartition("-")
    return kind, int(num) if num.isdigit() else 0
