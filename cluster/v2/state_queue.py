"""One broker's state-change queue in coordination V2 (docs/design.md#v2-state-queue).

In V2 there is no controller to send a broker requests over the network. A
partition's leader, or an admin command, puts a request into the broker's
queue in ZooKeeper instead: persistent sequential children of
/brokers/state/<id>. A request put while the broker is down waits there, so
a broker that comes back still closes the replicas of topics deleted
meanwhile. The broker takes its requests in order, acts on one, then
removes it; acting twice on one request must be harmless (a broker that dies
in between acts on it again after its restart).

Blocking kazoo calls: call from a thread (the broker: its ZooKeeper executor).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.zkpaths import dumps, state_queue_path

START_REPLICA = "start-replica"
CLOSE_REPLICA = "close-replica"
OPS = (START_REPLICA, CLOSE_REPLICA)
# The epoch of a request an admin command puts: it has no leader epoch.
NO_EPOCH = -1
DEFAULT_MAX_REQUESTS = 1000
_PREFIX = "request-"


class StateQueueFull(Exception):
    """The queue is full even after shrinking: its broker has been away long
    and many partitions were closed meanwhile."""


@dataclass(frozen=True)
class StateChange:
    """One request: start or close the replica of topic-partition on the
    queue's broker, sent at leader epoch `epoch` (NO_EPOCH: by an admin
    command) by `sender` ("broker-N" or "admin")."""
    op: str
    topic: str
    partition: int
    epoch: int
    sender: str

    def encode(self) -> bytes:
        d = asdict(self)
        d["from"] = d.pop("sender")
        return dumps(d)

    @classmethod
    def decode(cls, data: bytes) -> "StateChange":
        """The request in `data`; ValueError says what is wrong with it."""
        try:
            d = json.loads(data.decode())
            change = cls(str(d["op"]), str(d["topic"]), int(d["partition"]), int(d["epoch"]),
                         str(d["from"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a state-change request ({e!r}): {data[:200]!r}") from None
        if change.op not in OPS:
            raise ValueError(f"unknown state change {change.op!r}: {data[:200]!r}")
        return change


def acts_on(change: StateChange, leader_epoch: int | None) -> bool:
    """Whether the broker acts on `change`, given the partition's current
    leader epoch (None: the partition has no leader). A close-replica always:
    deletions must reach brokers that were down. A start-replica only for a
    partition without a leader (a new one) or from the current leader: one
    queued by an earlier leader is stale."""
    if change.op == CLOSE_REPLICA:
        return True
    return leader_epoch is None or change.epoch == leader_epoch


@dataclass(frozen=True)
class Pending:
    """A request in the queue: its znode name and the request, or, for a
    znode that holds no valid request, the reason (`change` is None)."""
    name: str
    change: StateChange | None
    problem: str = ""


class StateChangeQueue:
    def __init__(self, zk: KazooClient, broker_id: int,
                 max_requests: int = DEFAULT_MAX_REQUESTS):
        self.zk = zk
        self.broker_id = broker_id
        self.max_requests = max_requests
        self.path = state_queue_path(broker_id)

    def create(self) -> None:
        """The queue's znode, if it is not there yet (broker startup, admin)."""
        self.zk.ensure_path(self.path)

    def put(self, change: StateChange) -> str:
        """Append `change`; its znode name. A full queue is shrunk first; if
        it is still full, StateQueueFull and nothing is written. Two senders
        putting at once may both see room for one: the bound is soft by the
        number of concurrent senders."""
        if len(self._names()) >= self.max_requests:
            self.shrink()
            if len(self._names()) >= self.max_requests:
                raise StateQueueFull(
                    f"state-change queue of broker {self.broker_id} holds {self.max_requests} "
                    f"requests after shrinking; {change.op} of {change.topic}-{change.partition} "
                    "not queued")
        self.zk.ensure_path(self.path)
        created = self.zk.create(f"{self.path}/{_PREFIX}", change.encode(), sequence=True)
        return created.rsplit("/", 1)[1]

    def pending(self) -> list[Pending]:
        """Every request in the queue, oldest first."""
        out = []
        for name in self._names():
            try:
                data, _ = self.zk.get(f"{self.path}/{name}")
            except NoNodeError:
                continue                      # taken meanwhile
            try:
                out.append(Pending(name, StateChange.decode(data)))
            except ValueError as e:
                out.append(Pending(name, None, str(e)))
        return out

    def remove(self, name: str) -> None:
        try:
            self.zk.delete(f"{self.path}/{name}")
        except NoNodeError:
            pass

    def drain(self, act: Callable[[Pending], None]) -> int:
        """Hand each request to `act` in order and remove it once `act`
        returned; a request `act` raised on stays, and so do the ones after
        it (order matters: a start after a close of one partition). How many
        were taken."""
        taken = 0
        for request in self.pending():
            act(request)
            self.remove(request.name)
            taken += 1
        return taken

    def shrink(self) -> int:
        """Keep, of each partition's requests, only the close-replica with the
        newest epoch (the seed's rule: starts are found again in the
        assignment at startup). How many requests were removed."""
        requests = self.pending()
        keep: dict[tuple[str, int], Pending] = {}
        for r in requests:
            if r.change is not None and r.change.op == CLOSE_REPLICA:
                tp = (r.change.topic, r.change.partition)
                if tp not in keep or r.change.epoch >= keep[tp].change.epoch:
                    keep[tp] = r
        kept = {r.name for r in keep.values()}
        removed = 0
        for r in requests:
            if r.name not in kept:
                self.remove(r.name)
                removed += 1
        return removed

    def _names(self) -> list[str]:
        try:
            names = self.zk.get_children(self.path)
        except NoNodeError:
            return []
        return sorted(n for n in names if n.startswith(_PREFIX))
