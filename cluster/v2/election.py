"""Partition leader election in coordination V2 (docs/design.md#v2-election).

No controller picks leaders: when a partition has none, each of its replicas
tries to take the ephemeral lock /brokers/topics/T/P/leader, and the one that
creates it leads. The winner then raises the leader epoch in the
partition's leaderAndISR znode, conditionally on the version it read, so a
deposed leader's later ISR write fails (docs/design.md#isr, fencing).

Who may try: a replica in the assignment (AR), and in the ISR, or any replica
of a partition that has no ISR yet (a new one). With unclean election
enabled, also a replica outside the ISR once no ISR member is registered.
A replica other than the preferred one waits before it tries, so the
preferred replica normally wins; the caller waits (the broker's V2
component: on its event loop, not on the ZooKeeper thread).

Blocking kazoo calls: call from a thread.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from cluster import zkpaths
from cluster.zkpaths import V2_CONTROLLER_EPOCH, LeaderAndIsr, LeaderLock, loads

def current_lock(zk: KazooClient, topic: str, partition: int) -> LeaderLock | None:
    try:
        data, _ = zk.get(zkpaths.leader_lock_path(topic, partition))
    except NoNodeError:
        return None
    return LeaderLock.decode(data)


def read_state(zk: KazooClient, topic: str, partition: int) -> LeaderAndIsr | None:
    """The partition's leaderAndISR as written, with its version; None if none."""
    try:
        data, stat = zk.get(zkpaths.leader_and_isr_path(topic, partition))
    except NoNodeError:
        return None
    return LeaderAndIsr.decode(data, stat.version)


def reassigning_to(zk: KazooClient, topic: str, partition: int) -> tuple[int, ...] | None:
    """The partition's mark under /brokers/partitions_reassigned: the
    replicas an admin command is moving it to ((): deleting it); None if
    unmarked."""
    try:
        data, _ = zk.get(zkpaths.partitions_reassigned_path(topic, partition))
    except NoNodeError:
        return None
    return tuple(loads(data) or ())


def replica_set(assigned: tuple[int, ...], moving_to: tuple[int, ...] | None) -> tuple[int, ...]:
    """A partition's replicas: AR, and while a reassignment runs the new
    ones of RAR after them (AR + RAR, as Kafka's controller:
    docs/design.md#v2-reassignment)."""
    return tuple(assigned) + tuple(b for b in moving_to or () if b not in assigned)


def eligible(broker_id: int, replicas: tuple[int, ...], state: LeaderAndIsr | None,
             live: set[int], unclean: bool) -> bool:
    """Whether `broker_id` may try to lead (see the module's docstring)."""
    if broker_id not in replicas:
        return False
    if state is None or not state.isr:
        return True
    if broker_id in state.isr:
        return True
    return unclean and not (set(state.isr) & live)


def new_state(broker_id: int, state: LeaderAndIsr | None, live: set[int],
              replicas: tuple[int, ...] = ()) -> LeaderAndIsr:
    """The leaderAndISR the winner writes: the next epoch, and an ISR of
    itself and the registered members of the old one that are still
    replicas (a dead member would only hold up commits until it is dropped
    as lagging; a replica moved away by a reassignment is gone for good).
    `replicas` empty: any replica."""
    if state is None:
        return LeaderAndIsr(broker_id, 0, (broker_id,), V2_CONTROLLER_EPOCH)
    isr = (broker_id,) + tuple(b for b in state.isr if b != broker_id and b in live
                               and (not replicas or b in replicas))
    return LeaderAndIsr(broker_id, state.leader_epoch + 1, isr, V2_CONTROLLER_EPOCH,
                        state.zk_version)


class Election:
    """One broker's elections."""

    def __init__(self, zk: KazooClient, broker_id: int, *, unclean: bool):
        self.zk = zk
        self.broker_id = broker_id
        self.unclean = unclean

    def elect(self, topic: str, partition: int) -> LeaderAndIsr | None:
        """Try to lead topic-partition: the state written on a win; None when
        another replica leads, or this one may not try."""
        replicas = self._replicas(topic, partition)
        if current_lock(self.zk, topic, partition) is not None:
            return None
        state = read_state(self.zk, topic, partition)
        live = self._live()
        if not eligible(self.broker_id, replicas, state, live, self.unclean):
            return None
        epoch = 0 if state is None else state.leader_epoch + 1
        try:
            self.zk.ensure_path(zkpaths.partition_path(topic, partition))
            self.zk.create(zkpaths.leader_lock_path(topic, partition),
                           LeaderLock(self.broker_id, epoch).encode(), ephemeral=True)
        except NodeExistsError:
            return None
        except NoNodeError:
            return None                        # the partition was deleted meanwhile
        return self._write_state(topic, partition, state, live, replicas)

    def finish(self, topic: str, partition: int, epoch: int) -> LeaderAndIsr | None:
        """Complete an election of this broker's session whose lock (at
        `epoch`) was created but whose state was never written: ZooKeeper
        applied the create and the answer was lost with the connection
        (kazoo's ConnectionLoss). The lock alone leads nothing: without this
        the partition stays leaderless while the session lives, and the
        next leader reuses the epoch. None when the state moved past that
        epoch, or this broker may no longer lead: it then gives the lock up."""
        replicas = self._replicas(topic, partition)
        state = read_state(self.zk, topic, partition)
        live = self._live()
        if ((0 if state is None else state.leader_epoch + 1) != epoch
                or not eligible(self.broker_id, replicas, state, live, self.unclean)):
            return None
        return self._write_state(topic, partition, state, live, replicas)

    def bump(self, topic: str, partition: int,
             isr: tuple[int, ...] | None = None) -> LeaderAndIsr | None:
        """As the leader, start a new leader epoch with ISR `isr` (None: the
        ISR as written); a reassignment hands its followers a new replica
        set this way (docs/design.md#v2-reassignment). Writes leaderAndISR
        at the version read, then the lock's epoch, which the followers
        watch. None if this broker does not hold the lock or the write lost
        a race (try again)."""
        lock = current_lock(self.zk, topic, partition)
        state = read_state(self.zk, topic, partition)
        if lock is None or lock.broker != self.broker_id or state is None:
            return None
        new = LeaderAndIsr(self.broker_id, state.leader_epoch + 1,
                           state.isr if isr is None else isr, V2_CONTROLLER_EPOCH)
        try:
            version = self.zk.set(zkpaths.leader_and_isr_path(topic, partition), new.encode(),
                                  version=state.zk_version).version
        except (BadVersionError, NoNodeError):
            return None
        self._set_lock_epoch(topic, partition, state)
        return dataclasses.replace(new, zk_version=version)

    def resign(self, topic: str, partition: int) -> None:
        """Give the lock up (preferred election, reassignment, shutdown): the
        replicas then elect again."""
        lock = current_lock(self.zk, topic, partition)
        if lock is not None and lock.broker == self.broker_id:
            try:
                self.zk.delete(zkpaths.leader_lock_path(topic, partition))
            except NoNodeError:
                pass

    def _write_state(self, topic: str, partition: int, state: LeaderAndIsr | None,
                     live: set[int], replicas: tuple[int, ...]) -> LeaderAndIsr:
        """Holding the lock, write the new epoch. Only a deposed leader's ISR
        change can race this write; on a version conflict read again and
        build on what it wrote."""
        path = zkpaths.leader_and_isr_path(topic, partition)
        while True:
            new = new_state(self.broker_id, state, live, replicas)
            try:
                if state is None:
                    self.zk.create(path, new.encode())
                    version = 0
                else:
                    version = self.zk.set(path, new.encode(), version=state.zk_version).version
                return dataclasses.replace(new, zk_version=version)
            except (BadVersionError, NodeExistsError):
                state = read_state(self.zk, topic, partition)
                self._set_lock_epoch(topic, partition, state)

    def _set_lock_epoch(self, topic: str, partition: int, state: LeaderAndIsr | None) -> None:
        epoch = 0 if state is None else state.leader_epoch + 1
        self.zk.set(zkpaths.leader_lock_path(topic, partition),
                    LeaderLock(self.broker_id, epoch).encode())

    def _replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        try:
            data, _ = self.zk.get(zkpaths.topic_path(topic))
        except NoNodeError:
            return ()
        assigned = zkpaths.TopicAssignment.decode(data).partitions.get(partition, ())
        return replica_set(assigned, reassigning_to(self.zk, topic, partition))

    def _live(self) -> set[int]:
        try:
            return {int(b) for b in self.zk.get_children(zkpaths.BROKER_IDS)}
        except NoNodeError:
            return set()
