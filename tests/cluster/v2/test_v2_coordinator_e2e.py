"""Brokers in coordination=v2 (docs/design.md#v2): real broker processes and
a real ZooKeeper, no controller. Leaders come from the lock election, clients
see them through Metadata, and a killed leader's acknowledged writes survive
its replacement."""
from __future__ import annotations

import time

import pytest

from cluster import admin, modes, zkpaths
from cluster.v2.election import current_lock
from cluster.zkpaths import LeaderAndIsr
from server.broker_cluster import AckedProducer, BrokerProcess, wait_until

FIXED = {"coordination": "v2", "min.insync.replicas": 2,
         "unclean.leader.election.enable": False, "replication.truncation": "leader-epoch",
         "controlled.shutdown.enable": False, "v2.metadata.refresh.ms": 200}
T = "v2t"
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    made = {i: BrokerProcess(i, zk_hosts, tmp_path, **FIXED).start() for i in (1, 2, 3)}
    yield made
    for b in made.values():
        b.kill()


def leaders(zk):
    return {p: (lock.broker if (lock := current_lock(zk, T, p)) else None) for p in ASSIGNMENT}


def all_led(zk) -> bool:
    """Every partition of T has a leader: usually its preferred replica, but
    under load another may win after the preferred replica's head start
    (docs/design.md#v2-election); where that is not what a test is about."""
    return None not in leaders(zk).values()


def state(zk, p) -> LeaderAndIsr:
    data, stat = zk.get(zkpaths.leader_and_isr_path(T, p))
    return LeaderAndIsr.decode(data, stat.version)


def isr(zk, p) -> tuple[int, ...]:
    """The ISR as written; () before the first leader wrote one."""
    return state(zk, p).isr if zk.exists(zkpaths.leader_and_isr_path(T, p)) else ()


def client_leaders(bootstrap: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(T, timeout=10)
    return {p: pm.leader for p, pm in md.topics[T].partitions.items()}


def led_as_locked(bootstrap: str, zk, n: int) -> bool:
    """Clients see partitions 0..n-1 of T, each led by the broker its lock
    names. Usually the preferred replica; under load another may win the
    election after the preferred replica's head start (docs/design.md#v2-broker)."""
    locked = {p: lock.broker for p in range(n) if (lock := current_lock(zk, T, p))}
    return len(locked) == n and client_leaders(bootstrap) == locked


def read_partition(bootstrap: str, partition: int, count: int) -> list[bytes]:
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "v2-check",
                     "enable.auto.commit": False, "log_level": 0})
    c.assign([ck.TopicPartition(T, partition, 0)])
    got: list[bytes] = []
    try:
        def enough():
            for m in c.consume(500, 1.0):
                if not m.error():
                    got.append(m.value())
            return len(got) >= count
        wait_until(enough, 60, f"{count} records read back")
    finally:
        c.close()
    return got


def test_v2_brokers_elect_preferred_leaders_and_fail_over_without_losing_acks(brokers, zk):
    for b in brokers.values():
        b.wait_registered(zk)
    admin.create_topic(zk, T, 3, 3, replica_assignment=ASSIGNMENT)
    # The preferred replica leads each partition, and clients are told so.
    wait_until(lambda: leaders(zk) == {0: 1, 1: 2, 2: 3}, 30, "preferred leaders")
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    wait_until(lambda: client_leaders(bootstrap) == {0: 1, 1: 2, 2: 3}, 30,
               "Metadata naming the leaders")
    wait_until(lambda: len(state(zk, 0).isr) == 3, 30, "followers of partition 0 in the ISR")

    with AckedProducer(bootstrap, T, b"v%06d", **{"enable.idempotence": True}) as producer:
        wait_until(lambda: len(producer.acked) >= 200, 30, "writes acknowledged")
        brokers[1].kill()                                   # the leader of partition 0
        before = len(producer.acked)
        wait_until(lambda: leaders(zk)[0] in (2, 3), 30, "a new leader of partition 0")
        wait_until(lambda: len(producer.acked) >= before + 200, 60,
                   "writes acknowledged by the new leader")
    new = state(zk, 0)
    assert new.leader in (2, 3) and new.leader_epoch == 1 and 1 not in new.isr
    assert new.controller_epoch == -1          # no controller wrote it
    acked = producer.acked
    survivors = ",".join(b.bootstrap for i, b in brokers.items() if i != 1)
    read = read_partition(survivors, 0, len(acked))
    assert not set(acked) - set(read), f"acknowledged writes lost: {len(set(acked) - set(read))}"
    assert len(read) == len(set(read)), "a value read twice (the producer is idempotent)"

    # The old leader comes back as a follower of the new one and rejoins the ISR.
    brokers[1].start().wait_registered(zk)
    wait_until(lambda: 1 in state(zk, 0).isr, 60, "broker 1 back in the ISR of partition 0")
    assert leaders(zk)[0] == new.leader


def test_a_v2_broker_closes_a_replica_its_queue_asks_it_to_close(brokers, zk):
    """A partition moved off broker 3 (its assignment no longer names it) and
    a close-replica in broker 3's queue: the broker stops and deletes its
    replica, takes the request off the queue, and keeps its others."""
    from cluster.v2.state_queue import CLOSE_REPLICA, StateChange, StateChangeQueue
    for b in brokers.values():
        b.wait_registered(zk)
    admin.create_topic(zk, T, 3, 3, replica_assignment=ASSIGNMENT)
    wait_until(lambda: leaders(zk) == {0: 1, 1: 2, 2: 3}, 30, "preferred leaders")
    replica_dir = brokers[3].log_dir / f"{T}-1"
    wait_until(lambda: all((brokers[3].log_dir / f"{T}-{p}").exists() for p in ASSIGNMENT), 30,
               "broker 3's replicas (a follower's once it waited out the preferred replica)")
    data, stat = zk.get(zkpaths.topic_path(T))
    moved = zkpaths.TopicAssignment.decode(data)
    moved.partitions[1] = (2, 1)
    zk.set(zkpaths.topic_path(T), moved.encode(), version=stat.version)
    StateChangeQueue(zk, 3).put(StateChange(CLOSE_REPLICA, T, 1, 0, "broker-2"))
    wait_until(lambda: not replica_dir.exists(), 30, "the queued close-replica carried out")
    wait_until(lambda: StateChangeQueue(zk, 3).pending() == [], 10, "the request taken")
    assert (brokers[3].log_dir / f"{T}-0").exists() and (brokers[3].log_dir / f"{T}-2").exists()


def test_v2_admin_creates_a_topic_and_deletes_it_while_a_broker_is_down(brokers, zk):
    """The V2 admin commands: create through the queues; delete with broker 3
    down: the others drop their replicas at once, broker 3 when it is back
    and drains its queue."""
    from cluster.v2 import admin as v2admin
    from cluster.v2.state_queue import StateChangeQueue
    for b in brokers.values():
        b.wait_registered(zk)
    v2admin.create_topic(zk, T, {p: list(r) for p, r in ASSIGNMENT.items()})
    wait_until(lambda: all_led(zk), 30, "every partition led")
    assert not zk.exists(zkpaths.partitions_reassigned_path(T))     # unmarked
    dirs = {b: [brokers[b].log_dir / f"{T}-{p}" for p in ASSIGNMENT] for b in brokers}
    wait_until(lambda: all(d.exists() for ds in dirs.values() for d in ds), 30,
               "every replica on disk")

    brokers[3].kill()
    wait_until(lambda: not zk.exists(zkpaths.broker_path(3)), 30, "broker 3's session gone")
    assert v2admin.delete_topic(zk, T) == [3]        # its close-replicas wait in its queue
    assert not zk.exists(zkpaths.topic_path(T))
    wait_until(lambda: not any(d.exists() for b in (1, 2) for d in dirs[b]), 30,
               "the live brokers' replicas deleted")
    assert all(d.exists() for d in dirs[3])
    assert len(StateChangeQueue(zk, 3).pending()) == 3

    brokers[3].start().wait_registered(zk)
    assert not any(d.exists() for d in dirs[3]), "registered before draining its queue"
    assert StateChangeQueue(zk, 3).pending() == []


def test_a_v2_leader_names_itself_in_its_metadata_before_the_next_cluster_read(
        zk_hosts, tmp_path, zk):
    """The whole cluster is read only every 60 s here (docs/design.md#v2-broker,
    "Metadata"): a broker that wins a partition's lock writes that into the
    metadata it gives clients at once, at startup and after a failover.
    Whichever wins first: under load the other replica may win after the
    preferred one's head start (docs/design.md#v2-election), and preference
    is not what this is about."""
    admin.create_topic(zk, T, 1, 2, replica_assignment={0: [1, 2]})
    slow = dict(FIXED, **{"v2.metadata.refresh.ms": 60000})
    made = {i: BrokerProcess(i, zk_hosts, tmp_path, **slow).start() for i in (1, 2)}
    try:
        first = wait_until(lambda: leaders(zk)[0], 30, "a leader of partition 0")
        other = 2 if first == 1 else 1
        wait_until(lambda: client_leaders(made[first].bootstrap).get(0) == first, 20,
                   f"broker {first}'s Metadata naming itself")
        wait_until(lambda: set(state(zk, 0).isr) == {1, 2}, 30, f"broker {other} in the ISR")
        made[first].kill()
        wait_until(lambda: leaders(zk)[0] == other, 30, f"broker {other} leads")
        wait_until(lambda: client_leaders(made[other].bootstrap).get(0) == other, 20,
                   f"broker {other}'s Metadata naming itself")
    finally:
        for b in made.values():
            b.kill()


def test_v2_partitions_added_through_the_kafka_api_and_removed_by_the_admin_command(brokers, zk):
    """CreatePartitions on a V2 broker runs the V2 add (docs/design.md#v2-admin):
    the new partitions get leaders clients see; removing one deletes its
    replicas and drops it from the metadata."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    from cluster.v2 import admin as v2admin
    for b in brokers.values():
        b.wait_registered(zk)
    v2admin.create_topic(zk, T, {0: [1, 2, 3]})
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    wait_until(lambda: led_as_locked(bootstrap, zk, 1), 30, "partition 0 led")
    client = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    client.create_partitions([NewPartitions(T, 3, replica_assignment=[[2, 3, 1], [3, 1, 2]])]
                             )[T].result(60)
    wait_until(lambda: led_as_locked(bootstrap, zk, 3), 30, "the new partitions led")
    assert [p["replicas"] for p in admin.describe_topic(zk, T)["partitions"]] == [
        [1, 2, 3], [2, 3, 1], [3, 1, 2]]
    dirs = {b: brokers[b].log_dir / f"{T}-2" for b in brokers}
    wait_until(lambda: all(d.exists() for d in dirs.values()), 30, "partition 2 on every broker")

    assert v2admin.remove_partitions(zk, T, [2]) == []
    wait_until(lambda: not any(d.exists() for d in dirs.values()), 30,
               "partition 2's replicas deleted")
    wait_until(lambda: set(client_leaders(bootstrap)) == {0, 1}, 30,
               "partition 2 gone from the metadata")
    assert not zk.exists(zkpaths.partition_path(T, 2))


def test_a_v2_replica_closed_while_its_partition_elects_stays_closed(brokers, zk):
    """Found by bench/compare_modes.py: a topic is deleted while the survivors
    of its dead leader elect. Broker 2 is frozen, so the delete waits for it
    while broker 1, which took its close-replica, wakes from the preferred
    replica's head start with the topic still there: it must not elect or
    follow and make the replica again (it would fetch a deleted topic for ever)."""
    import os
    import signal
    import threading

    from cluster.v2 import admin as v2admin
    for b in brokers.values():
        b.wait_registered(zk)
    v2admin.create_topic(zk, T, {p: list(r) for p, r in ASSIGNMENT.items()})
    wait_until(lambda: leaders(zk) == {0: 1, 1: 2, 2: 3}, 30, "preferred leaders")
    wait_until(lambda: all(len(state(zk, p).isr) == 3 for p in ASSIGNMENT), 30, "full ISRs")
    brokers[3].kill()
    wait_until(lambda: not zk.exists(zkpaths.broker_path(3)), 30, "broker 3's session gone",
               interval=0.01)
    os.kill(brokers[2].proc.pid, signal.SIGSTOP)
    try:
        deleting = threading.Thread(target=v2admin.delete_topic, args=(zk, T), daemon=True)
        deleting.start()
        replica = brokers[1].log_dir / f"{T}-2"
        wait_until(lambda: not replica.exists(), 10, "broker 1 closing its replica of partition 2")
        time.sleep(2)                   # past the head start: broker 1 may elect now
        assert zk.exists(zkpaths.topic_path(T)), "the delete did not wait for broker 2"
        assert not replica.exists(), "broker 1 made its closed replica again"
    finally:
        os.kill(brokers[2].proc.pid, signal.SIGCONT)
    deleting.join(40)
    assert not zk.exists(zkpaths.topic_path(T))
    dirs = [brokers[b].log_dir / f"{T}-{p}" for b in (1, 2) for p in ASSIGNMENT]
    wait_until(lambda: not any(d.exists() for d in dirs), 30, "the live replicas deleted")
    assert leaders(zk) == {0: None, 1: None, 2: None}


def test_v2_reassignment_moves_a_partition_off_its_leader_without_losing_acks(brokers, zk):
    """docs/design.md#v2-reassignment, through `chaoslog admin`: partition 0
    on [1, 2] moved to [3, 2] under acks=all writes. Its leader, broker 1,
    starts broker 3's replica at a new epoch, waits for it in the ISR,
    writes the assignment, closes its own replica and resigns; broker 3,
    the preferred replica, leads. Nothing acknowledged is lost."""
    for b in brokers.values():
        b.wait_registered(zk)
    admin.create_topic(zk, T, 1, 2, replica_assignment={0: [1, 2]})
    wait_until(lambda: isr(zk, 0) == (1, 2) and leaders(zk)[0] == 1, 30,
               "broker 1 leads, broker 2 in sync")
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    with AckedProducer(bootstrap, T, b"r%06d", **{"enable.idempotence": True}) as producer:
        wait_until(lambda: len(producer.acked) >= 300, 30, "writes acknowledged")
        result = admin.reassign(zk, {(T, 0): [3, 2]}, wait=True, timeout=60, mode=modes.of("v2"))
        assert result["done"], result
        before = len(producer.acked)
        wait_until(lambda: leaders(zk)[0] == 3, 30, "broker 3, the preferred replica, leads")
        wait_until(lambda: len(producer.acked) >= before + 300, 60,
                   "writes acknowledged after the move")
    assert zkpaths.TopicAssignment.decode(zk.get(zkpaths.topic_path(T))[0]).partitions[0] == (3, 2)
    assert not zk.exists(zkpaths.partitions_reassigned_path(T, 0))
    wait_until(lambda: set(state(zk, 0).isr) == {2, 3}, 30, "the ISR is the new replicas")
    wait_until(lambda: not (brokers[1].log_dir / f"{T}-0").exists(), 30,
               "broker 1's replica closed")
    acked = producer.acked
    read = read_partition(",".join(brokers[b].bootstrap for b in (2, 3)), 0, len(acked))
    assert not set(acked) - set(read), f"acknowledged writes lost: {len(set(acked) - set(read))}"


def test_v2_reassignment_refusals_leave_nothing_marked(brokers, zk):
    for b in (1, 2):
        brokers[b].wait_registered(zk)
    brokers[3].kill()
    wait_until(lambda: not zk.exists(zkpaths.broker_path(3)), 30, "broker 3's session gone")
    admin.create_topic(zk, T, 1, 2, replica_assignment={0: [1, 2]})
    with pytest.raises(admin.AdminError, match=r"brokers \[3\] are not registered"):
        admin.reassign(zk, {(T, 0): [3, 2]}, mode=modes.of("v2"))
    with pytest.raises(admin.AdminError, match="has no partition 5"):
        admin.reassign(zk, {(T, 5): [1, 2]}, mode=modes.of("v2"))
    assert not zk.exists(zkpaths.partitions_reassigned_path(T, 0))
    # Already on the requested replicas: done at once, nothing marked.
    assert admin.reassign(zk, {(T, 0): [1, 2]}, wait=True, timeout=5, mode=modes.of("v2"))["done"]
    assert not zk.exists(zkpaths.partitions_reassigned_path(T, 0))


def test_v2_preferred_election_moves_leadership_back_to_the_preferred_replica(brokers, zk):
    """The preferred replica of partition 0, broker 1, is killed and comes
    back: broker 2 or 3 still leads. `chaoslog admin --coordination v2
    preferred-election` asks the leader to resign; broker 1 leads again and
    the request is removed."""
    for b in brokers.values():
        b.wait_registered(zk)
    admin.create_topic(zk, T, 1, 3, replica_assignment={0: [1, 2, 3]})
    wait_until(lambda: leaders(zk)[0] == 1 and len(isr(zk, 0)) == 3, 30,
               "broker 1 leads a full ISR")
    brokers[1].kill()
    wait_until(lambda: leaders(zk)[0] in (2, 3), 30, "broker 2 or 3 leads")
    brokers[1].start().wait_registered(zk)
    wait_until(lambda: 1 in state(zk, 0).isr, 60, "broker 1 back in the ISR")
    assert leaders(zk)[0] in (2, 3), "broker 1 took the lead back by itself"
    assert admin.preferred_election(zk, T, mode=modes.of("v2"), timeout=30) == [(T, 0)]
    assert leaders(zk)[0] == 1
    assert not zk.exists(zkpaths.PREFERRED_REPLICA_ELECTION)
