"""The V2 admin commands: create and delete topics, add and remove
partitions (docs/design.md#v2-admin); reassign partitions and ask for
preferred leaders, which the partitions' leaders carry out
(docs/design.md#v2-reassignment).

Without a controller, an admin command tells the brokers itself, through
their state-change queues (cluster/v2/state_queue.py), and marks the
partitions it is changing under /brokers/partitions_reassigned so that a
broker reading the assignment meanwhile does not act on a half-made change:

  create: mark each partition with its replicas, queue start-replica to
          each replica, wait until the live ones took theirs, write the
          assignment, unmark;
  delete: mark each partition with [] (deleted), queue close-replica to each
          replica, wait until the live ones took theirs, remove the topic,
          unmark. A broker that is down finds its close-replica in its queue
          when it comes back.
  add and remove partitions: the same, for some partitions of a topic; the
          assignment is rewritten at the version read, so a change made
          meanwhile fails the command instead of being overwritten.

Blocking kazoo calls.
"""
from __future__ import annotations

import json

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from cluster import zkpaths
from cluster.v2.election import reassigning_to
from cluster.v2.state_queue import (CLOSE_REPLICA, NO_EPOCH, START_REPLICA, StateChange,
                                    StateChangeQueue)
from cluster.zkpaths import TopicAssignment
from contracts.deadline import wait_until

SENDER = "admin"


class V2AdminError(Exception):
    """The command could not be carried out; the message says why and what to do."""


def create_topic(zk: KazooClient, topic: str, assignment: dict[int, list[int]],
                 timeout_s: float = 30.0) -> None:
    """Create `topic` with `assignment` (partition -> replicas, the first
    preferred). A failed earlier attempt is cleaned up first; if a live
    replica does not take its start-replica within `timeout_s` the command
    fails and its marks stay for the next attempt to clean up."""
    if zk.exists(zkpaths.topic_path(topic)):
        raise V2AdminError(f"topic {topic!r} already exists")
    clean_failed_creation(zk, topic)
    for p, replicas in sorted(assignment.items()):
        _mark(zk, topic, p, replicas)
    queued = _queue_to_replicas(zk, topic, assignment, START_REPLICA)
    left = _wait_taken(zk, queued, timeout_s, live_only=False)
    if left:
        raise V2AdminError(
            f"creating {topic!r}: brokers {sorted(left)} did not take their start-replica "
            f"within {timeout_s:g} s; start them and create the topic again (the next attempt "
            "cleans this one up)")
    try:
        zk.create(zkpaths.topic_path(topic), TopicAssignment(
            {p: tuple(r) for p, r in assignment.items()}, zkpaths.new_topic_id()).encode())
    except NodeExistsError:
        raise V2AdminError(f"topic {topic!r} was created meanwhile by someone else") from None
    _unmark(zk, topic)


def clean_failed_creation(zk: KazooClient, topic: str) -> None:
    """The seed's cleanup of a creation that stopped half-way: close the
    replicas its marks name and remove the marks. A mark of a partition
    that exists is not a failed creation: refuse."""
    for p in sorted(_marked(zk, topic)):
        if zk.exists(zkpaths.topic_path(topic)):
            raise V2AdminError(f"topic {topic!r} exists with live partitions")
        replicas = json.loads(zk.get(zkpaths.partitions_reassigned_path(topic, p))[0] or b"[]")
        _queue_to_replicas(zk, topic, {p: replicas}, CLOSE_REPLICA)
    _unmark(zk, topic)


def delete_topic(zk: KazooClient, topic: str, timeout_s: float = 30.0) -> list[int]:
    """Delete `topic`. Returns the brokers that were down and still hold
    their close-replica in their queues (they act on it when they return).
    Choice (docs/design.md#v2-admin): the command queues the close-replicas
    itself, so a partition whose leader is down is deleted too; it waits
    for the live replicas only."""
    try:
        assignment = TopicAssignment.decode(zk.get(zkpaths.topic_path(topic))[0])
    except NoNodeError:
        raise V2AdminError(f"topic {topic!r} does not exist") from None
    parts = {p: list(r) for p, r in assignment.partitions.items()}
    queued = _close_marked(zk, topic, parts, timeout_s,
                           f"deleting {topic!r}", "the topic stays marked: run the delete again")
    zk.delete(zkpaths.topic_path(topic), recursive=True)
    _unmark(zk, topic)
    return sorted({b for b, names in queued.items() if _still_queued(zk, b, names)})


def add_partitions(zk: KazooClient, topic: str, new: dict[int, list[int]],
                   timeout_s: float = 30.0) -> None:
    """Add partitions `new` (partition -> replicas) to `topic`. If a replica
    does not take its start-replica within `timeout_s` the command undoes
    itself (close-replica to the new replicas, marks removed) and fails."""
    current, version = _read_assignment(zk, topic)
    clash = sorted(set(new) & set(current.partitions))
    if clash:
        raise V2AdminError(f"topic {topic!r} already has partitions {clash}")
    for p, replicas in sorted(new.items()):
        _mark(zk, topic, p, replicas)
    queued = _queue_to_replicas(zk, topic, new, START_REPLICA)
    left = _wait_taken(zk, queued, timeout_s, live_only=False)
    try:
        if left:
            raise V2AdminError(
                f"adding partitions to {topic!r}: brokers {sorted(left)} did not take their "
                f"start-replica within {timeout_s:g} s; start them and add the partitions again")
        grown = {**current.partitions, **{p: tuple(r) for p, r in new.items()}}
        _write_assignment(zk, topic, TopicAssignment(grown, current.topic_id), version)
    except V2AdminError:
        _queue_to_replicas(zk, topic, new, CLOSE_REPLICA)       # undo
        _unmark(zk, topic)
        raise
    _unmark(zk, topic)


def remove_partitions(zk: KazooClient, topic: str, partitions: list[int],
                      timeout_s: float = 30.0) -> list[int]:
    """Remove `partitions` of `topic` (not all of them: delete the topic).
    Returns the brokers that were down and hold their close-replica in their
    queues, as delete_topic."""
    current, version = _read_assignment(zk, topic)
    missing = sorted(set(partitions) - set(current.partitions))
    if missing:
        raise V2AdminError(f"topic {topic!r} has no partitions {missing}")
    if set(partitions) >= set(current.partitions):
        raise V2AdminError(f"that would remove every partition of {topic!r}: delete the topic")
    gone = {p: list(current.partitions[p]) for p in sorted(set(partitions))}
    queued = _close_marked(zk, topic, gone, timeout_s, f"removing partitions of {topic!r}",
                           "the partitions stay marked: run it again")
    kept = {p: r for p, r in current.partitions.items() if p not in gone}
    # On failure the marks stay: no broker starts the closed replicas again.
    _write_assignment(zk, topic, TopicAssignment(kept, current.topic_id), version)
    for p in gone:
        zk.delete(zkpaths.partition_path(topic, p), recursive=True)
    _unmark(zk, topic)
    return sorted({b for b, names in queued.items() if _still_queued(zk, b, names)})


# -- helpers ------------------------------------------------------------------------------------

def _close_marked(zk: KazooClient, topic: str, parts: dict[int, list[int]], timeout_s: float,
                  doing: str, then: str) -> dict[int, set[str]]:
    """Mark `parts` deleted ([]), queue close-replica to their replicas and
    wait for the live ones; broker -> the names of its requests."""
    for p in sorted(parts):
        _mark(zk, topic, p, [])
    queued = _queue_to_replicas(zk, topic, parts, CLOSE_REPLICA)
    left = _wait_taken(zk, queued, timeout_s, live_only=True)
    if left:
        raise V2AdminError(f"{doing}: live brokers {sorted(left)} did not take their "
                           f"close-replica within {timeout_s:g} s; {then}")
    return queued


def _read_assignment(zk: KazooClient, topic: str) -> tuple[TopicAssignment, int]:
    try:
        data, stat = zk.get(zkpaths.topic_path(topic))
    except NoNodeError:
        raise V2AdminError(f"topic {topic!r} does not exist") from None
    return TopicAssignment.decode(data), stat.version


def _write_assignment(zk: KazooClient, topic: str, assignment: TopicAssignment,
                      version: int) -> None:
    try:
        zk.set(zkpaths.topic_path(topic), assignment.encode(), version=version)
    except (BadVersionError, NoNodeError):
        raise V2AdminError(f"topic {topic!r} changed while the command ran; run it again") \
            from None


def _mark(zk: KazooClient, topic: str, partition: int, replicas: list[int]) -> None:
    path = zkpaths.partitions_reassigned_path(topic, partition)
    zk.ensure_path(zkpaths.partitions_reassigned_path(topic))
    data = json.dumps(list(replicas)).encode()
    try:
        zk.create(path, data)
    except NodeExistsError:
        zk.set(path, data)


def _marked(zk: KazooClient, topic: str) -> list[int]:
    try:
        return [int(p) for p in zk.get_children(zkpaths.partitions_reassigned_path(topic))]
    except NoNodeError:
        return []


def _unmark(zk: KazooClient, topic: str) -> None:
    try:
        zk.delete(zkpaths.partitions_reassigned_path(topic), recursive=True)
    except NoNodeError:
        pass


def _queue_to_replicas(zk: KazooClient, topic: str, assignment: dict[int, list[int]],
                       op: str) -> dict[int, set[str]]:
    """Queue `op` for every replica; broker -> the names of its requests."""
    queued: dict[int, set[str]] = {}
    for p, replicas in sorted(assignment.items()):
        for b in replicas:
            name = StateChangeQueue(zk, b).put(StateChange(op, topic, p, NO_EPOCH, SENDER))
            queued.setdefault(b, set()).add(name)
    return queued


def _still_queued(zk: KazooClient, broker: int, names: set[str]) -> bool:
    try:
        return bool(names & set(zk.get_children(zkpaths.state_queue_path(broker))))
    except NoNodeError:
        return False


def _wait_taken(zk: KazooClient, queued: dict[int, set[str]], timeout_s: float,
                live_only: bool) -> set[int]:
    """Wait until the brokers took their requests (`live_only`: the
    registered ones); the brokers that did not."""
    def left() -> set[int]:
        live = {int(b) for b in zk.get_children(zkpaths.BROKER_IDS)}
        return {b for b, names in queued.items()
                if (b in live or not live_only) and _still_queued(zk, b, names)}
    wait_until(lambda: not left(), timeout_s, 0.1)
    return left()


# -- reassignment and preferred election: carried out by the leaders --------------------------

def reassign(zk: KazooClient, plan: dict[tuple[str, int], list[int]],
             timeout_s: float = 0.0) -> set[tuple[str, int]]:
    """Move partitions to new replicas (docs/design.md#v2-reassignment):
    mark each with its new replicas; its leader carries the move out.
    Refused, with nothing marked, if a partition is missing, a new replica
    is not registered, or a partition is already being changed. A partition
    already on its new replicas is done at once. Waits up to `timeout_s`
    and returns the partitions still moving."""
    live = _registered(zk)
    moving = {}
    for (t, p), replicas in sorted(plan.items()):
        ar = _read_assignment(zk, t)[0].partitions.get(p)
        if ar is None:
            raise V2AdminError(f"topic {t!r} has no partition {p}")
        dead = sorted(set(replicas) - live)
        if dead:
            raise V2AdminError(f"{t}-{p}: brokers {dead} are not registered; start them first")
        mark = reassigning_to(zk, t, p)
        if mark is not None and mark != ar:
            raise V2AdminError(f"{t}-{p} is already being changed (to {list(mark)}); "
                               "wait until that is done")
        if tuple(replicas) != ar:
            moving[(t, p)] = list(replicas)
    for (t, p), replicas in sorted(moving.items()):
        _mark(zk, t, p, replicas)

    def left() -> set[tuple[str, int]]:
        return {tp for tp in moving if still_moving(zk, *tp)}
    if timeout_s > 0:
        wait_until(lambda: not left(), timeout_s, 0.2)
    return left()


def preferred_election(zk: KazooClient, partitions: list[tuple[str, int]],
                       timeout_s: float = 30.0) -> list[tuple[str, int]]:
    """Ask the leaders of `partitions` to resign for their preferred replica
    where it is registered and in the ISR (docs/design.md#v2-reassignment),
    wait up to `timeout_s` until those partitions are led by it, remove the
    request. Returns the partitions whose preferred replica could lead and
    does not."""
    ask_preferred(zk, partitions)
    try:
        wait_until(lambda: not preferred_pending(zk, partitions), timeout_s, 0.2)
        return preferred_pending(zk, partitions)
    finally:
        end_preferred(zk)


def ask_preferred(zk: KazooClient, partitions: list[tuple[str, int]]) -> None:
    """Write /admin/preferred_replica_election, which every broker reads; a
    request left by a command that died is replaced."""
    data = zkpaths.encode_partition_list(partitions)
    try:
        zk.create(zkpaths.PREFERRED_REPLICA_ELECTION, data, makepath=True)
    except NodeExistsError:
        zk.set(zkpaths.PREFERRED_REPLICA_ELECTION, data)


def preferred_pending(zk: KazooClient, partitions: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The partitions whose preferred replica is registered and in the ISR
    but does not lead."""
    live = _registered(zk)
    out = []
    for t, p in partitions:
        try:
            ar = _read_assignment(zk, t)[0].partitions.get(p, ())
            state = zkpaths.read_leader_and_isr(zk, t, p)
        except (V2AdminError, NoNodeError):
            continue                 # deleted meanwhile
        if ar and ar[0] in live and ar[0] in state.isr and state.leader != ar[0]:
            out.append((t, p))
    return out


def end_preferred(zk: KazooClient) -> None:
    try:
        zk.delete(zkpaths.PREFERRED_REPLICA_ELECTION)
    except NoNodeError:
        pass


def still_moving(zk: KazooClient, topic: str, partition: int) -> bool:
    """Whether a move of the partition is marked and not done."""
    mark = reassigning_to(zk, topic, partition)
    if mark is None:
        return False
    try:
        return mark != _read_assignment(zk, topic)[0].partitions.get(partition)
    except V2AdminError:
        return False                 # the topic is gone


def _registered(zk: KazooClient) -> set[int]:
    return {int(b) for b in zk.get_children(zkpaths.BROKER_IDS)}
