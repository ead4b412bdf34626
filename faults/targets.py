"""Who a fault hits, by role, resolved at the moment of the fault.

A schedule names roles ("the leader of t/0", "the controller"), not nodes:
which broker leads changes during a run, and a fault aimed at "the leader" must
hit whoever leads when the fault starts. Resolution reads the ZooKeeper
layout (docs/design.md#zk-layout, cluster.zkpaths): /controller, /brokers/ids,
/brokers/topics/T (assigned replicas) and /brokers/topics/T/P/leaderAndISR;
on a target without ZooKeeper (a cluster that does not declare
ZooKeeperAccess, contracts/abilities.py), the brokers' Metadata answers
instead (`MetadataRoles`, through KafkaMetadata). ZooKeeper's own leader
comes from the cluster (ZooKeeperAccess.zookeeper_mode).

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
from contracts.abilities import Cluster, KafkaMetadata, ZooKeeperAccess, can

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

    def __init__(self, cluster: Cluster, zk: Any | Callable[[], Any], rng: random.Random,
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
        self._roles: ZooKeeperRoles | MetadataRoles | None = None

    @property
    def zk(self) -> Any:
        if callable(self._zk):  # a factory (a kazoo client is not callable)
            self._zk = self._zk()
        return self._zk

    # -- names ---------------------------------------------------------------
    def broker_names(self) -> list[str]:
        return sorted((n for n in self.cluster.spec.node_names() if n.startswith("broker-")),
                      key=_node_key)

    def zk_names(self) -> list[str]:
        return sorted((n for n in self.cluster.spec.node_names() if n.startswith("zk-")),
                      key=_node_key)

    # -- role reads ------------------------------------------------------------
    @property
    def roles(self) -> "ZooKeeperRoles | MetadataRoles":
        """Where roles are read: ZooKeeper when the cluster keeps its metadata
        there (the built-in clusters), else the brokers' Metadata answers."""
        if self._roles is None:
            if can(self.cluster, ZooKeeperAccess):
                self._roles = ZooKeeperRoles(lambda: self.zk)
            else:
                self._roles = MetadataRoles(self.cluster)
        return self._roles

    def controller(self) -> int:
        return self.roles.controller()

    def live_brokers(self) -> list[int]:
        return self.roles.live_brokers()

    def partition_roles(self, topic: str, partition: int) -> "PartitionRoles":
        return self.roles.partition(topic, partition)

    def assigned_replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        return self.roles.assigned(topic, partition)

    def coordinator(self, group: str) -> int:
        return self.roles.coordinator(group)

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
            roles = self.partition_roles(topic, partition)
            if t.role == "leader":
                if roles.leader == NO_LEADER:
                    raise TargetError(f"{topic}/{partition} has no leader right now")
                return [_broker(roles.leader)]
            if t.role == "follower":
                pool = [b for b in roles.isr if b != roles.leader]
                if not pool:
                    raise TargetError(f"{topic}/{partition}: the ISR {list(roles.isr)} has no follower")
            else:
                assigned = self.assigned_replicas(topic, partition)
                pool = [b for b in assigned if b not in roles.isr]
                if not pool:
                    raise TargetError(f"{topic}/{partition}: every replica is in the ISR {list(roles.isr)}")
            return [_broker(self.rng.choice(sorted(pool)))]
        if t.role == "random":
            return [self.rng.choice(brokers)]
        if t.role == "live":
            live = self.live_brokers()
            if not live:
                raise TargetError("no broker is live")
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


NO_LEADER = zkpaths.NO_LEADER


@dataclass(frozen=True)
class PartitionRoles:
    """Who leads one partition right now, and who is in its ISR."""
    leader: int                     # NO_LEADER when none
    isr: tuple[int, ...]


class ZooKeeperRoles:
    """Roles as the controller writes them (docs/design.md#zk-layout):
    /controller, /brokers/ids, /brokers/topics/T and its leaderAndISR nodes.
    `zk` returns a started kazoo client."""

    def __init__(self, zk: Callable[[], Any]):
        self._zk = zk

    def _get(self, path: str, what: str) -> tuple[bytes, Any]:
        try:
            return self._zk().get(path)
        except Exception as e:  # NoNodeError and connection trouble alike
            raise TargetError(f"{what} ({type(e).__name__})") from None

    def controller(self) -> int:
        data, _ = self._get(zkpaths.CONTROLLER, "no controller right now")
        d = zkpaths.loads(data) or {}
        if "brokerid" not in d:
            raise TargetError("no controller right now")
        return int(d["brokerid"])

    def live_brokers(self) -> list[int]:
        try:
            return sorted(int(c) for c in self._zk().get_children(zkpaths.BROKER_IDS))
        except Exception as e:
            raise TargetError(f"cannot list live brokers ({type(e).__name__})") from None

    def partition(self, topic: str, partition: int) -> PartitionRoles:
        try:
            lai = zkpaths.read_leader_and_isr(self._zk(), topic, partition)
        except Exception as e:  # NoNodeError and connection trouble alike
            raise TargetError(f"no leaderAndISR for {topic}/{partition} "
                              f"({type(e).__name__})") from None
        return PartitionRoles(lai.leader, tuple(lai.isr))

    def assigned(self, topic: str, partition: int) -> tuple[int, ...]:
        """The assigned replicas, the preferred leader first."""
        data, _ = self._get(zkpaths.topic_path(topic), f"no topic {topic!r}")
        replicas = zkpaths.TopicAssignment.decode(data).partitions.get(partition)
        if not replicas:
            raise TargetError(f"topic {topic!r} has no partition {partition}")
        return tuple(replicas)

    def coordinator(self, group: str) -> int:
        """The leader of the offsets partition the group maps to, as the
        brokers map it (over the partition count the topic has in ZooKeeper)."""
        data, _ = self._get(zkpaths.topic_path(GROUP_METADATA_TOPIC),
                            f"no {GROUP_METADATA_TOPIC} topic yet, so no coordinator of "
                            f"group {group!r}")
        count = len(zkpaths.TopicAssignment.decode(data).partitions)
        if not count:
            raise TargetError(f"{GROUP_METADATA_TOPIC} has no partitions")
        partition = partition_for(group, count)
        leader = self.partition(GROUP_METADATA_TOPIC, partition).leader
        if leader == NO_LEADER:
            raise TargetError(f"group {group!r}: {GROUP_METADATA_TOPIC}/{partition} has no "
                              f"leader right now")
        return leader


class MetadataRoles:
    """Roles as a Kafka client sees them, for a target without ZooKeeper:
    the brokers' Metadata answer (live brokers, controller, leader, ISR,
    replicas) and FindCoordinator, asked through the cluster
    (`kafka_metadata`, `group_coordinator` of contracts.abilities.KafkaMetadata)."""

    def __init__(self, cluster: KafkaMetadata):
        self.cluster = cluster

    def _metadata(self, topics: list[str] | None = None) -> Any:
        try:
            return self.cluster.kafka_metadata(topics)
        except Exception as e:  # noqa: BLE001 - no broker answers: nobody holds the role
            raise TargetError(f"cannot read the cluster's Metadata: {e}") from None

    def controller(self) -> int:
        md = self._metadata([])
        if md.controller is None or md.controller < 0:
            raise TargetError("the brokers' Metadata names no controller")
        return int(md.controller)

    def live_brokers(self) -> list[int]:
        return sorted(self._metadata([]).brokers)

    def _partition(self, topic: str, partition: int) -> Any:
        p = self._metadata([topic]).partitions.get((topic, partition))
        if p is None:
            raise TargetError(f"the brokers' Metadata has no partition {topic}/{partition}")
        return p

    def partition(self, topic: str, partition: int) -> PartitionRoles:
        p = self._partition(topic, partition)
        return PartitionRoles(p.leader if p.leader >= 0 else NO_LEADER, tuple(p.isr))

    def assigned(self, topic: str, partition: int) -> tuple[int, ...]:
        return tuple(self._partition(topic, partition).replicas)

    def coordinator(self, group: str) -> int:
        try:
            return int(self.cluster.group_coordinator(group))
        except Exception as e:  # noqa: BLE001
            raise TargetError(f"no coordinator of group {group!r} right now: {e}") from None


def _broker(broker_id: int) -> str:
    return f"broker-{broker_id}"


def _node_key(name: str) -> tuple[str, int]:
    kind, _, num = name.rpartition("-")
    return kind, int(num) if num.isdigit() else 0
