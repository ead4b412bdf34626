"""The ZooKeeper layout (docs/design.md#zk-layout), in one place.

Values are JSON. Where the original design was a draft we follow what Apache
Kafka 0.8 shipped and say so:

  /controller                                   ephemeral  {"brokerid", "timestamp"}      (original design)
  /controller_epoch                             persistent "N"                           (Kafka 0.8)
  /brokers/ids/[id]                             ephemeral  {"host", "port", "start_epoch"} (original design)
  /brokers/start_epochs/[id]                    persistent "N", bumped at every registration
  /brokers/topics/[topic]                       persistent {"partitions": {"0": [1, 2], ...}} (original design)
  /brokers/topics/[topic]/[p]/leaderAndISR      persistent {"leader", "leader_epoch", "isr",
                                                            "controller_epoch"}           (original design)
  /admin/reassign_partitions                    {"partitions": [{"topic", "partition", "replicas"}]}
                                                (one znode for all partitions, as KAFKA-42 / Kafka 0.8)
  /admin/partitions_add/[topic]/[p]             [broker ids]                             (original design)
  /admin/partitions_remove/[topic]/[p]          ""                                       (original design)
  /admin/delete_topics/[topic]                  ""    (Kafka 0.8.2's delete-topic marker; the
                                                       original design had no path for it)
  /admin/preferred_replica_election             {"partitions": [{"topic", "partition"}]} (Kafka 0.8)
  /isr_change_notification/isr_change_NNN       {"partitions": [{"topic", "partition"}]}
                                                (Kafka 0.9's fix for a controller that never
                                                 learns leader-made ISR changes)
  /state_change_log/entry-NNN                   [state-change records]  (docs/design.md#state-change-log;
                                                kept in ZooKeeper so any tool can read it)

Coordination V2 only (docs/design.md#v2):
  /brokers/state/[id]/request-NNNNNNNNNN        persistent sequential {"op", "topic", "partition",
                                                "epoch", "from"}  (docs/design.md#v2-state-queue)
  /brokers/topics/[topic]/[p]/leader            ephemeral  {"broker", "epoch"}: the leader lock
  /brokers/partitions_reassigned/[topic]/[p]    [broker ids]: a partition being created, or
                                                deleted ([])  (docs/design.md#v2-admin)
"""
from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_START_EPOCHS = "/brokers/start_epochs"
TOPICS = "/brokers/topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PARTITIONS_ADD = "/admin/partitions_add"
PARTITIONS_REMOVE = "/admin/partitions_remove"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = ISR_CHANGE_NOTIFICATION + "/isr_change_"
STATE_CHANGE_LOG = "/state_change_log"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"  # Kafka's path (KIP-98)
BROKER_STATE = "/brokers/state"                  # V2: the state-change queues
PARTITIONS_REASSIGNED = "/brokers/partitions_reassigned"   # V2: partitions being changed
CONFIG_USERS = "/config/users"                   # Kafka's path: SCRAM credentials

# Persistent paths created on first start (by any broker, idempotently).
PERSISTENT_PATHS = (
    BROKER_IDS, BROKER_START_EPOCHS, TOPICS, PARTITIONS_ADD, PARTITIONS_REMOVE,
    DELETE_TOPICS, ISR_CHANGE_NOTIFICATION, STATE_CHANGE_LOG, CONFIG_USERS,
)

NO_LEADER = -1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def broker_start_epoch_path(broker_id: int) -> str:
    return f"{BROKER_START_EPOCHS}/{broker_id}"


def state_queue_path(broker_id: int) -> str:
    return f"{BROKER_STATE}/{broker_id}"


def leader_lock_path(topic: str, partition: int) -> str:
    """V2: the ephemeral lock whose holder leads the partition."""
    return f"{TOPICS}/{topic}/{partition}/leader"


def partitions_reassigned_path(topic: str, partition: int | None = None) -> str:
    base = f"{PARTITIONS_REASSIGNED}/{topic}"
    return base if partition is None else f"{base}/{partition}"


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS}/{user}"


def encode_user_config(config: dict[str, str]) -> bytes:
    """A user's znode as Kafka writes it: {"version":1,"config":{MECHANISM: credential}}."""
    return dumps({"version": 1, "config": config})


def decode_user_config(data: bytes) -> dict[str, str]:
    return dict((loads(data) or {}).get("config", {}))


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/{partition}"


def leader_and_isr_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/{partition}/leaderAndISR"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def partitions_add_path(topic: str, partition: int | None = None) -> str:
    base = f"{PARTITIONS_ADD}/{topic}"
    return base if partition is None else f"{base}/{partition}"


def partitions_remove_path(topic: str, partition: int | None = None) -> str:
    base = f"{PARTITIONS_REMOVE}/{topic}"
    return base if partition is None else f"{base}/{partition}"


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def loads(data: bytes | None) -> Any:
    if not data:
        return None
    return json.loads(data.decode())


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    host: str
    port: int
    start_epoch: int

    def encode(self) -> bytes:
        return dumps({"host": self.host, "port": self.port, "start_epoch": self.start_epoch})

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> "BrokerRegistration":
        d = loads(data)
        return cls(broker_id, d["host"], int(d["port"]), int(d.get("start_epoch", 0)))


@dataclass(frozen=True)
class LeaderAndIsr:
    """The value at /brokers/topics/[t]/[p]/leaderAndISR, plus the znode version
    that conditional writes are made against ("zkVersion", docs/design.md#zk-layout)."""
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1

    def encode(self) -> bytes:
        return dumps({"leader": self.leader, "leader_epoch": self.leader_epoch,
                      "isr": list(self.isr), "controller_epoch": self.controller_epoch})

    @classmethod
    def decode(cls, data: bytes, zk_version: int = -1) -> "LeaderAndIsr":
        d = loads(data)
        return cls(int(d["leader"]), int(d["leader_epoch"]), tuple(int(b) for b in d["isr"]),
                   int(d.get("controller_epoch", 0)), zk_version)


@dataclass(frozen=True)
class TopicAssignment:
    """The value at /brokers/topics/[topic]: partition -> assigned replicas (AR).
    The first replica is the preferred replica. `topic_id` tells this topic
    from an earlier one of the same name ("" for a topic written without one;
    docs/design.md#topic-ids)."""
    partitions: dict[int, tuple[int, ...]] = field(default_factory=dict)
    topic_id: str = ""

    def encode(self) -> bytes:
        d: dict = {"partitions": {str(p): list(r) for p, r in sorted(self.partitions.items())}}
        if self.topic_id:
            d["topic_id"] = self.topic_id
        return dumps(d)

    @classmethod
    def decode(cls, data: bytes) -> "TopicAssignment":
        d = loads(data) or {}
        return cls({int(p): tuple(int(b) for b in r) for p, r in d.get("partitions", {}).items()},
                   str(d.get("topic_id") or ""))


@dataclass(frozen=True)
class LeaderLock:
    """V2: the value of a partition's leader lock (docs/design.md#v2-election)."""
    broker: int
    epoch: int

    def encode(self) -> bytes:
        return dumps({"broker": self.broker, "epoch": self.epoch})

    @classmethod
    def decode(cls, data: bytes) -> "LeaderLock":
        d = loads(data) or {}
        return cls(int(d["broker"]), int(d["epoch"]))


# leaderAndISR's controller_epoch when no controller wrote it (V2 coordination).
V2_CONTROLLER_EPOCH = -1


def read_leader_and_isr(zk: Any, topic: str, partition: int) -> LeaderAndIsr:
    """The partition's leaderAndISR as a reader should take it (kazoo's
    NoNodeError when there is none). In V2 coordination (written with
    controller_epoch -1) the leader is the holder of the leader lock, none
    (-1) while no one holds it: no controller marks a V2 partition whose
    leader died as offline (docs/design.md#v2)."""
    from kazoo.exceptions import NoNodeError
    data, stat = zk.get(leader_and_isr_path(topic, partition))
    lai = LeaderAndIsr.decode(data, stat.version)
    if lai.controller_epoch != V2_CONTROLLER_EPOCH:
        return lai
    try:
        lock = LeaderLock.decode(zk.get(leader_lock_path(topic, partition))[0])
        leader, epoch = lock.broker, max(lock.epoch, lai.leader_epoch)
    except NoNodeError:
        leader, epoch = NO_LEADER, lai.leader_epoch
    return LeaderAndIsr(leader, epoch, lai.isr, lai.controller_epoch, lai.zk_version)


def new_topic_id() -> str:
    """A fresh topic id: a random UUID in Kafka's form (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def encode_partition_list(partitions: list[tuple[str, int]]) -> bytes:
    return dumps({"partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_partition_list(data: bytes) -> list[tuple[str, int]]:
    d = loads(data) or {}
    return [(e["topic"], int(e["partition"])) for e in d.get("partitions", [])]


def encode_reassignment(plan: dict[tuple[str, int], list[int]]) -> bytes:
    return dumps({"partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                 for (t, p), r in sorted(plan.items())]})


def decode_reassignment(data: bytes) -> dict[tuple[str, int], tuple[int, ...]]:
    d = loads(data) or {}
    return {(e["topic"], int(e["partition"])): tuple(int(b) for b in e["replicas"])
            for e in d.get("partitions", [])}
