"""The `coordinator:GROUP` target: the leader of the offsets partition a
consumer group maps to (docs/design.md#groups), read from ZooKeeper when the
fault starts. Against a fake ZooKeeper (pure logic)."""
import random
from types import SimpleNamespace

import pytest

from cluster import zkpaths
from cluster.server.offsets_topic import GROUP_METADATA_TOPIC
from contracts.abilities import KafkaMetadata, ZooKeeperAccess
from faults.targets import Resolver, Target, TargetError

OFFSETS = GROUP_METADATA_TOPIC


class FakeZK:
    def __init__(self, data):
        self.data = dict(data)

    def get(self, path):
        if path not in self.data:
            raise KeyError(path)
        return self.data[path], SimpleNamespace(version=1)

    def get_children(self, path):
        pre = path.rstrip("/") + "/"
        return sorted({p[len(pre):].split("/")[0] for p in self.data if p.startswith(pre)})


def resolver(partitions: int = 10, leaders: dict[int, int] | None = None) -> Resolver:
    """Offsets partition p led by broker p % 3 + 1 unless `leaders` says otherwise."""
    data = {zkpaths.topic_path(OFFSETS): zkpaths.TopicAssignment(
        {p: (1, 2, 3) for p in range(partitions)}).encode()}
    for p in range(partitions):
        leader = (leaders or {}).get(p, p % 3 + 1)
        data[zkpaths.leader_and_isr_path(OFFSETS, p)] = zkpaths.LeaderAndIsr(
            leader, 1, (1, 2, 3), 1).encode()
    cluster = SimpleNamespace(abilities=frozenset({ZooKeeperAccess}), spec=SimpleNamespace(
        node_names=lambda: ["zk-1", "broker-1", "broker-2", "broker-3"]))
    return Resolver(cluster, FakeZK(data), random.Random(0))


def test_parse_and_print():
    t = Target.parse("coordinator:chaoslog-run:x/0")
    assert (t.role, t.group, str(t)) == ("coordinator", "chaoslog-run:x/0",
                                         "coordinator:chaoslog-run:x/0")
    for bad in ("coordinator", "coordinator:"):
        with pytest.raises(TargetError, match="coordinator:GROUP"):
            Target.parse(bad)


@pytest.mark.parametrize("group, partition", [
    ("a" * 20, 8),                  # String.hashCode 1542361408
    ("chaoslog-😀-grüße", 6),       # -715177066, over UTF-16 code units (a surrogate pair)
    ("polygenelubricants", 0),      # Integer.MIN_VALUE: Kafka's Utils.abs makes it 0
])
def test_the_coordinator_is_the_leader_of_the_group_s_offsets_partition(group, partition):
    r = resolver(leaders={partition: 2, **{p: 3 for p in range(10) if p != partition}})
    assert r.resolve(f"coordinator:{group}") == ["broker-2"]


def test_the_partition_count_comes_from_zookeeper():
    # with 4 partitions "a"*20 (hash 1542361408) maps to partition 0
    r = resolver(partitions=4, leaders={0: 1, 1: 2, 2: 2, 3: 2})
    assert r.resolve("coordinator:" + "a" * 20) == ["broker-1"]


def test_no_offsets_topic_or_no_leader_is_a_role_nobody_holds():
    r = resolver()
    del r.zk.data[zkpaths.topic_path(OFFSETS)]
    with pytest.raises(TargetError, match="no __consumer_offsets topic"):
        r.resolve("coordinator:g")
    r = resolver(leaders={8: zkpaths.NO_LEADER})
    with pytest.raises(TargetError, match="no leader"):
        r.resolve("coordinator:" + "a" * 20)


# -- a target without ZooKeeper: roles from the brokers' Metadata ----------------------------

def metadata_cluster(leader: int, isr: list[int], controller: int | None = 2):
    """A cluster without ZooKeeper whose Metadata says t/0 is led by `leader`
    with `isr` of replicas [1, 2, 3]; broker 3 coordinates every group."""
    md = SimpleNamespace(brokers={1: ("h", 1), 2: ("h", 2), 3: ("h", 3)}, controller=controller,
                         partitions={("t", 0): SimpleNamespace(leader=leader, isr=isr,
                                                               replicas=[1, 2, 3], error=0)})
    return SimpleNamespace(
        abilities=frozenset({KafkaMetadata}), kafka_metadata=lambda topics=None: md,
        group_coordinator=lambda group: 3,
        spec=SimpleNamespace(node_names=lambda: ["broker-1", "broker-2", "broker-3"]))


def test_roles_come_from_metadata_where_there_is_no_zookeeper():
    r = Resolver(metadata_cluster(leader=1, isr=[1, 3]), None, random.Random(0), ("t", 0))
    assert r.resolve("leader") == ["broker-1"]
    assert r.resolve("follower") == ["broker-3"]
    assert r.resolve("out-of-isr") == ["broker-2"]
    assert r.resolve("controller") == ["broker-2"]
    assert r.resolve("coordinator:g") == ["broker-3"]
    assert r.resolve("live") in (["broker-1"], ["broker-2"], ["broker-3"])
    with pytest.raises(TargetError, match="no partition t/7"):
        r.resolve("leader:t/7")
    leaderless = Resolver(metadata_cluster(leader=-1, isr=[2], controller=None), None,
                          random.Random(0), ("t", 0))
    with pytest.raises(TargetError, match="t/0 has no leader right now"):
        leaderless.resolve("leader")
    with pytest.raises(TargetError, match="names no controller"):
        leaderless.resolve("controller")
