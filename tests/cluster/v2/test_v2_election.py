"""V2 leader election against a real ZooKeeper (docs/design.md#v2-election)."""
from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError

from cluster import zkpaths
from cluster.v2.election import Election, current_lock, eligible, new_state, replica_set
from cluster.zkpaths import LeaderAndIsr, LeaderLock, TopicAssignment

T = "t"


@pytest.fixture
def sessions(zk_hosts):
    """sessions(broker_id) -> a ZooKeeper session of its own in which the
    broker is registered (closing it is the broker dying)."""
    made = []

    def make(broker_id: int) -> KazooClient:
        c = KazooClient(zk_hosts)
        c.start(timeout=10)
        c.ensure_path(zkpaths.BROKER_IDS)
        c.create(zkpaths.broker_path(broker_id), b"{}", ephemeral=True)
        made.append(c)
        return c
    yield make
    for c in made:
        c.stop()
        c.close()


def assign(zk, replicas=(1, 2, 3), partition=0):
    zk.ensure_path(zkpaths.TOPICS)
    zk.create(zkpaths.topic_path(T), TopicAssignment({partition: tuple(replicas)}).encode())


def election(zk, broker_id, unclean=False):
    return Election(zk, broker_id, unclean=unclean)


def read_state(zk, partition=0):
    data, stat = zk.get(zkpaths.leader_and_isr_path(T, partition))
    return LeaderAndIsr.decode(data, stat.version)


def test_the_first_to_try_leads_a_new_partition(zk, sessions):
    assign(zk)
    won = election(sessions(1), 1).elect(T, 0)
    assert won == LeaderAndIsr(1, 0, (1,), -1, 0)
    assert read_state(zk) == won
    assert current_lock(zk, T, 0) == LeaderLock(1, 0)
    assert election(sessions(2), 2).elect(T, 0) is None      # taken


def test_a_dead_leaders_lock_goes_with_its_session_and_an_isr_member_takes_over(zk, sessions):
    assign(zk)
    one, two, three = sessions(1), sessions(2), sessions(3)
    election(one, 1).elect(T, 0)
    # the followers caught up: the leader wrote them into the ISR
    s = read_state(zk)
    zk.set(zkpaths.leader_and_isr_path(T, 0), LeaderAndIsr(1, 0, (1, 2, 3), -1).encode(),
           version=s.zk_version)
    one.stop()                                   # broker 1 dies
    won = election(two, 2).elect(T, 0)
    assert (won.leader, won.leader_epoch, won.isr) == (2, 1, (2, 3))
    assert current_lock(zk, T, 0) == LeaderLock(2, 1)
    assert election(three, 3).elect(T, 0) is None


def test_a_deposed_leaders_isr_write_fails_after_the_new_election(zk, sessions):
    assign(zk, replicas=(1, 2))
    one, two = sessions(1), sessions(2)
    mine = election(one, 1).elect(T, 0)
    zk.set(zkpaths.leader_and_isr_path(T, 0), LeaderAndIsr(1, 0, (1, 2), -1).encode(),
           version=mine.zk_version)
    held = read_state(zk)                        # what leader 1 holds in memory
    zk.delete(zkpaths.leader_lock_path(T, 0))   # its lock lost (session expiry)
    assert election(two, 2).elect(T, 0).leader == 2
    with pytest.raises(BadVersionError):         # leader 1 tries to shrink the ISR to itself
        one.set(zkpaths.leader_and_isr_path(T, 0), LeaderAndIsr(1, 0, (1,), -1).encode(),
                version=held.zk_version)


def test_a_replica_outside_the_isr_leads_only_with_unclean_election_and_no_isr_member_alive(
        zk, sessions):
    assign(zk, replicas=(1, 2))
    zk.ensure_path(zkpaths.partition_path(T, 0))
    zk.create(zkpaths.leader_and_isr_path(T, 0), LeaderAndIsr(1, 4, (1,), -1).encode())
    two = sessions(2)
    assert election(two, 2, unclean=False).elect(T, 0) is None
    one = sessions(1)                            # an ISR member is alive
    assert election(two, 2, unclean=True).elect(T, 0) is None
    one.stop()
    won = election(two, 2, unclean=True).elect(T, 0)
    assert (won.leader, won.leader_epoch, won.isr) == (2, 5, (2,))


def test_of_replicas_racing_for_one_partition_exactly_one_wins(zk, sessions):
    assign(zk, replicas=(1, 2, 3, 4, 5))
    clients = {b: sessions(b) for b in (1, 2, 3, 4, 5)}
    results = {}
    go = threading.Barrier(5)

    def race(b):
        go.wait()
        results[b] = election(clients[b], b).elect(T, 0)

    threads = [threading.Thread(target=race, args=(b,)) for b in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    winners = [b for b, r in results.items() if r is not None]
    assert len(results) == 5 and len(winners) == 1
    assert read_state(zk).leader == winners[0] == current_lock(zk, T, 0).broker


def test_a_broker_not_assigned_the_partition_never_leads(zk, sessions):
    assign(zk, replicas=(1, 2))
    assert election(sessions(3), 3).elect(T, 0) is None
    assert current_lock(zk, T, 0) is None


def test_resign_frees_the_lock_for_the_next_election(zk, sessions):
    assign(zk, replicas=(1, 2))
    one, two = sessions(1), sessions(2)
    election(one, 1).elect(T, 0)
    s = read_state(zk)
    zk.set(zkpaths.leader_and_isr_path(T, 0), LeaderAndIsr(1, 0, (1, 2), -1).encode(),
           version=s.zk_version)
    election(two, 2).resign(T, 0)                # not its lock: nothing happens
    assert current_lock(zk, T, 0) == LeaderLock(1, 0)
    election(one, 1).resign(T, 0)
    assert election(two, 2).elect(T, 0).leader_epoch == 1


@pytest.mark.parametrize("broker, replicas, isr, live, unclean, ok", [
    (1, (1, 2), None, set(), False, True),       # a new partition
    (3, (1, 2), None, {3}, True, False),         # not assigned
    (2, (1, 2), (1, 2), {2}, False, True),
    (2, (1, 2), (1,), {2}, False, False),
    (2, (1, 2), (1,), {2}, True, True),
    (2, (1, 2), (1,), {1, 2}, True, False),
])
def test_who_may_try(broker, replicas, isr, live, unclean, ok):
    state = None if isr is None else LeaderAndIsr(1, 3, isr, -1)
    assert eligible(broker, replicas, state, live, unclean) is ok


def test_the_new_state_drops_unregistered_isr_members_and_raises_the_epoch():
    old = LeaderAndIsr(1, 7, (1, 2, 3), -1, zk_version=4)
    assert new_state(3, old, live={2, 3}) == LeaderAndIsr(3, 8, (3, 2), -1, 4)
    assert new_state(2, None, live={2}) == LeaderAndIsr(2, 0, (2,), -1)
    # A member moved away by a reassignment is no replica any more.
    assert new_state(3, old, live={1, 2, 3}, replicas=(3, 2)) == LeaderAndIsr(3, 8, (3, 2), -1, 4)


def test_while_a_reassignment_runs_the_replicas_are_ar_then_the_new_ones():
    assert replica_set((1, 2), None) == (1, 2)
    assert replica_set((1, 2), (3, 2)) == (1, 2, 3)
    assert replica_set((1, 2), ()) == (1, 2)          # a deletion's mark adds none


def test_a_new_replica_in_the_isr_may_lead_while_the_partition_moves(zk, sessions):
    """Partition 0 moving from [1] to [2]: broker 2, in the ISR, takes over
    when broker 1's lock goes (docs/design.md#v2-reassignment)."""
    assign(zk, replicas=(1,))
    one, two = sessions(1), sessions(2)
    election(one, 1).elect(T, 0)
    s = read_state(zk)
    zk.set(zkpaths.leader_and_isr_path(T, 0), LeaderAndIsr(1, 0, (1, 2), -1).encode(),
           version=s.zk_version)
    assert election(two, 2).elect(T, 0) is None          # locked, and not a replica
    zk.create(zkpaths.partitions_reassigned_path(T, 0), b"[2]", makepath=True)
    election(one, 1).resign(T, 0)
    won = election(two, 2).elect(T, 0)
    assert won is not None and won.leader == 2 and won.leader_epoch == 1


def test_bump_raises_the_epoch_of_the_lock_holder_only(zk, sessions):
    assign(zk, replicas=(1, 2))
    one, two = sessions(1), sessions(2)
    election(one, 1).elect(T, 0)
    assert election(two, 2).bump(T, 0) is None           # not its lock
    bumped = election(one, 1).bump(T, 0, (1,))
    assert (bumped.leader, bumped.leader_epoch, bumped.isr) == (1, 1, (1,))
    assert read_state(zk) == bumped and current_lock(zk, T, 0) == LeaderLock(1, 1)


def test_readers_take_a_v2_partitions_leader_from_its_lock(zk, sessions):
    """zkpaths.read_leader_and_isr, what the harness and the admin tool read:
    a V2 leader that died leaves leaderAndISR naming it; the lock says the
    partition has no leader."""
    assign(zk, replicas=(1, 2))
    one = sessions(1)
    election(one, 1).elect(T, 0)
    assert zkpaths.read_leader_and_isr(zk, T, 0).leader == 1
    one.stop()
    assert read_state(zk).leader == 1                          # the znode as written
    assert zkpaths.read_leader_and_isr(zk, T, 0).leader == -1   # as readers take it
    election(sessions(2), 2, unclean=True).elect(T, 0)
    lai = zkpaths.read_leader_and_isr(zk, T, 0)
    assert (lai.leader, lai.leader_epoch) == (2, 1)


def test_an_election_whose_lock_create_lost_its_answer_is_finished_at_the_lock_s_epoch(
        zk, sessions):
    """Found by a V2 pressure run (seed 331): the connection dropped while
    broker 1 created the lock; ZooKeeper applied the create, kazoo raised
    ConnectionLoss, and the broker never wrote the state: the partition had
    a lock and no leader until the session ended, and the next leader took
    the same epoch. Its next look finishes the election."""
    assign(zk)
    one = sessions(1)
    one.create(zkpaths.leader_lock_path(T, 0), LeaderLock(1, 0).encode(), ephemeral=True,
               makepath=True)                     # the create whose answer was lost
    won = election(one, 1).finish(T, 0, 0)
    assert won == LeaderAndIsr(1, 0, (1,), -1, 0) and read_state(zk) == won
    assert current_lock(zk, T, 0) == LeaderLock(1, 0)


def test_an_election_cut_short_is_not_finished_past_its_epoch_or_out_of_the_isr(zk, sessions):
    assign(zk)
    one, two = sessions(1), sessions(2)
    zk.create(zkpaths.leader_and_isr_path(T, 0), LeaderAndIsr(3, 1, (2, 3), -1).encode(),
              makepath=True)
    two.create(zkpaths.leader_lock_path(T, 0), LeaderLock(2, 2).encode(), ephemeral=True)
    assert election(two, 2).finish(T, 0, 1) is None            # the state is past epoch 1
    assert election(one, 1).finish(T, 0, 2) is None            # broker 1 is out of the ISR
    won = election(two, 2).finish(T, 0, 2)
    assert (won.leader, won.leader_epoch, won.isr) == (2, 2, (2,))
