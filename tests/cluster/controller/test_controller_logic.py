"""Pure logic: leader selectors, replica assignment, state machine legality,
the request batch. Fakes allowed here only."""
from collections import Counter

import pytest
from hypothesis import given, strategies as st

from cluster.controller import leader_selectors as sel
from cluster.controller.assignment import AssignmentError, assign_replicas
from cluster.controller.context import ControllerContext, ReassignmentContext
from cluster.controller.partition_state_machine import PartitionState, PartitionStateMachine
from cluster.controller.replica_state_machine import ReplicaState, ReplicaStateMachine
from cluster.controller.request_batch import LEADER_DURING_DELETE, RequestBatch
from cluster.protocol import control
from cluster.zkpaths import BrokerRegistration, LeaderAndIsr


def lai(leader, isr, epoch=5):
    return LeaderAndIsr(leader, epoch, tuple(isr), 1, 3)


# -- selectors -------------------------------------------------------------------
def test_controller_offline_selector_prefers_live_isr_in_ar_order():
    c = sel.offline_leader([3, 1, 2], lai(1, [1, 2, 3]), live={2, 3}, unclean_enabled=True)
    assert c.leader == 3 and c.isr == (2, 3) and not c.unclean and set(c.recipients) == {2, 3}


def test_controller_offline_selector_unclean_and_clean():
    cur = lai(1, [1])
    c = sel.offline_leader([1, 2], cur, live={2}, unclean_enabled=True)
    assert (c.leader, c.isr, c.unclean) == (2, (2,), True)
    c = sel.offline_leader([1, 2], cur, live={2}, unclean_enabled=False)
    assert (c.leader, c.isr) == (-1, (1,))
    c = sel.offline_leader([1, 2], cur, live=set(), unclean_enabled=True)
    assert c.leader == -1 and c.isr == (1,)


def test_controller_reassigned_preferred_and_shutdown_selectors():
    assert sel.reassigned_leader([3, 4], lai(1, [1, 3, 4]), {1, 3, 4}).leader == 3
    with pytest.raises(sel.NoLeaderError):
        sel.reassigned_leader([3, 4], lai(1, [1]), {1, 3, 4})
    assert sel.preferred_leader([2, 1], lai(1, [1, 2]), {1, 2}).leader == 2
    with pytest.raises(sel.NoLeaderError):
        sel.preferred_leader([2, 1], lai(1, [1]), {1, 2})  # not in sync
    with pytest.raises(sel.NoLeaderError):
        sel.preferred_leader([1, 2], lai(1, [1, 2]), {1, 2})  # already leads
    c = sel.controlled_shutdown_leader([1, 2, 3], lai(1, [1, 2, 3]), {2, 3}, {1})
    assert c.leader == 2 and c.isr == (2, 3) and 1 not in c.recipients
    with pytest.raises(sel.NoLeaderError):
        sel.controlled_shutdown_leader([1, 2], lai(1, [1]), {2}, {1})
    assert sel.init_leader([3, 1, 2], {1, 2}).leader == 1
    with pytest.raises(sel.NoLeaderError):
        sel.init_leader([3], {1})


# -- assignment ------------------------------------------------------------------
@given(st.integers(1, 8), st.integers(1, 40), st.data())
def test_controller_assignment_properties(n, partitions, data):
    rf = data.draw(st.integers(1, n))
    brokers = list(range(10, 10 + n))
    a = assign_replicas(brokers, partitions, rf, start_index=data.draw(st.integers(0, n - 1)),
                        replica_shift=data.draw(st.integers(0, n - 1)))
    assert sorted(a) == list(range(partitions))
    for r in a.values():
        assert len(r) == rf and len(set(r)) == rf and set(r) <= set(brokers)
    # preferred replicas spread evenly (round robin)
    counts = Counter(r[0] for r in a.values())
    assert max(counts.values()) - min(counts.get(b, 0) for b in brokers) <= 1


def test_controller_assignment_like_kafka():
    # Kafka's AdminUtils with startIndex 0 and shift 0 over brokers 0..4
    a = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0)
    assert a[0] == [0, 1, 2] and a[4] == [4, 0, 1]
    assert a[5] == [0, 2, 3]  # the shift grows after n partitions
    with pytest.raises(AssignmentError):
        assign_replicas([1, 2], 1, 3)


# -- state machines ----------------------------------------------------------------
class FakeLog:
    def __init__(self):
        self.records = []

    def record(self, kind, topic=None, partition=None, **kw):
        self.records.append((kind, topic, partition, kw.get("from_state"), kw.get("to_state")))


class Parts:
    """What the state machines are handed, for pure transitions (no ZooKeeper)."""

    def __init__(self):
        self.ctx = ControllerContext(1, epoch=7)
        for b in (1, 2, 3):
            self.ctx.live_brokers[b] = BrokerRegistration(b, "h", 9000 + b, 1)
        self.sclog = FakeLog()
        self.batch = RequestBatch(self.ctx)

    def psm(self):
        return PartitionStateMachine(1, self.ctx, None, self.batch, self.sclog,
                                     default_selector=None)

    def rsm(self):
        return ReplicaStateMachine(1, self.ctx, None, self.batch, self.sclog)


def test_controller_partition_state_machine_illegal_transitions_change_nothing(caplog):
    c = Parts()
    psm = c.psm()
    tp = ("t", 0)
    done, failed = psm.handle([tp], PartitionState.OFFLINE)  # NonExistent -> Offline: illegal
    assert not done and tp in failed and psm.state(tp) is PartitionState.NON_EXISTENT
    assert "illegal partition state change" in caplog.text
    assert not c.sclog.records
    psm.handle([tp], PartitionState.NEW)
    assert psm.state(tp) is PartitionState.NEW
    psm.handle([tp], PartitionState.NON_EXISTENT)  # New -> NonExistent: illegal
    assert psm.state(tp) is PartitionState.NEW
    psm.handle([tp], PartitionState.OFFLINE)
    psm.handle([tp], PartitionState.NON_EXISTENT)
    assert psm.state(tp) is PartitionState.NON_EXISTENT
    assert [r[3:] for r in c.sclog.records] == [
        ("NonExistentPartition", "NewPartition"), ("NewPartition", "OfflinePartition"),
        ("OfflinePartition", "NonExistentPartition")]


def test_controller_replica_state_machine_transitions():
    c = Parts()
    rsm = c.rsm()
    tp = ("t", 0)
    c.ctx.set_assignment(tp, (1, 2))
    c.ctx.leaders[tp] = lai(1, [1, 2])
    assert not rsm.handle([(tp, 2)], ReplicaState.ONLINE)  # NonExistent -> Online: illegal
    assert not rsm.handle([(tp, 2)], ReplicaState.NON_EXISTENT)  # not Offline first
    rsm.handle([(tp, 2)], ReplicaState.NEW)
    assert c.batch.leader_and_isr[2][tp].leader == 1  # told to follow
    rsm.handle([(tp, 2)], ReplicaState.ONLINE)
    rsm.handle([(tp, 2)], ReplicaState.OFFLINE, remove_from_isr=False)
    assert tp in c.batch.stop_replica[(2, False)]
    rsm.handle([(tp, 2)], ReplicaState.OFFLINE, remove_from_isr=False)  # Offline -> Offline ok
    rsm.handle([(tp, 2)], ReplicaState.NON_EXISTENT)
    assert tp in c.batch.stop_replica[(2, True)]
    assert rsm.state((tp, 2)) is ReplicaState.NON_EXISTENT


def test_controller_a_new_replica_whose_broker_was_down_is_told_to_follow_when_it_starts():
    """A reassignment resumed by a new controller makes a down broker's
    replica New: the LeaderAndIsr cannot reach it. When the broker starts
    (New -> Online) it must get one, or it never fetches and the
    reassignment never completes (the guarantees suite found this)."""
    c = Parts()
    rsm = c.rsm()
    tp = ("t", 0)
    c.ctx.set_assignment(tp, (1,))
    c.ctx.leaders[tp] = lai(1, [1])
    del c.ctx.live_brokers[3]
    rsm.handle([(tp, 3)], ReplicaState.NEW)
    assert 3 not in c.batch.leader_and_isr
    c.ctx.live_brokers[3] = BrokerRegistration(3, "h", 9003, 2)
    rsm.handle([(tp, 3)], ReplicaState.ONLINE)
    assert c.batch.leader_and_isr[3][tp].leader == 1


# -- request batch ---------------------------------------------------------------
def test_controller_request_batch_one_request_per_broker_and_kind():
    ctx = Parts().ctx
    b = RequestBatch(ctx)
    for p in range(100):
        tp = ("t", p)
        ctx.set_assignment(tp, (1, 2))
        ctx.leaders[tp] = lai(1 + p % 2, [1, 2])
        b.add_leader_and_isr([1, 2, 9], tp, ctx.leaders[tp], (1, 2))  # 9 is not live
    b.add_stop_replica([3], ("t", 0), delete=False)
    b.add_stop_replica([3], ("gone", 0), delete=True)
    b.add_update_metadata(None, [("gone", 0)], deleted=True)
    reqs = b.build(1, 7)
    kinds = Counter((broker, type(r).__name__) for broker, r in reqs)
    assert all(v == 1 for k, v in kinds.items() if k[1] != "StopReplicaRequest")
    assert {k for k in kinds} == {(1, "LeaderAndIsrRequest"), (2, "LeaderAndIsrRequest"),
                                 (1, "UpdateMetadataRequest"), (2, "UpdateMetadataRequest"),
                                 (3, "UpdateMetadataRequest"), (3, "StopReplicaRequest")}
    # order per broker: LeaderAndIsr, UpdateMetadata, StopReplica
    order = [type(r).__name__ for broker, r in reqs if broker == 1]
    assert order == ["LeaderAndIsrRequest", "UpdateMetadataRequest"]
    lai1 = next(r for broker, r in reqs if broker == 1 and isinstance(r, control.LeaderAndIsrRequest))
    assert len(lai1.partition_states) == 100 and lai1.controller_epoch == 7
    assert {e.id for e in lai1.live_leaders} == {1, 2}
    um = next(r for broker, r in reqs if broker == 3 and isinstance(r, control.UpdateMetadataRequest))
    assert any(s.topic == "gone" and s.leader == LEADER_DURING_DELETE for s in um.partition_states)
    assert [e.id for e in um.live_brokers] == [1, 2, 3]
    # every request survives the wire format
    for _, r in reqs:
        assert control.decode_request(control.encode_request(r, 1, "c")[4:])[1] == r


def test_controller_replicas_for_request_during_reassignment():
    ctx = ControllerContext(1)
    ctx.set_assignment(("t", 0), (1, 2))
    assert ctx.replicas_for_request(("t", 0)) == (1, 2)
    ctx.reassigning[("t", 0)] = ReassignmentContext((2, 3))
    assert ctx.replicas_for_request(("t", 0)) == (2, 3, 1)
    ctx.reassigning[("t", 0)].last_step = 4
    assert ctx.replicas_for_request(("t", 0)) == (2, 3)
