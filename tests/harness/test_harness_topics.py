"""harness/topics.py against a real cluster (3 broker processes and a
ZooKeeper, the local backend): topics are created through the AdminClient,
placed as asked, and a refusal is an error that names the topic and why."""
import os

import pytest

from cluster import admin
from harness.topics import TopicError, create_topics


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from harness.backends.base import ClusterError, ClusterSpec
    from harness.backends.local import LocalCluster

    try:
        c = LocalCluster(ClusterSpec(name=f"topics{os.getpid()}", brokers=3),
                         base_dir=tmp_path_factory.mktemp("cluster"))
    except ClusterError as e:  # raised before anything starts: Java or ZooKeeper's jars missing
        pytest.skip(f"the local backend cannot run here: {e}")
    c.start()
    yield c
    c.destroy()


@pytest.fixture(scope="module")
def zk(cluster):
    from kazoo.client import KazooClient
    z = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
    z.start(timeout=30)
    yield z
    z.stop()
    z.close()


def test_topics_by_count_and_by_assignment(cluster, zk):
    create_topics(cluster.bootstrap_servers, {"by-count": 3, "placed": 2}, 2,
                  {"placed": {0: [3, 1], 1: [1, 3]}})
    counted = admin.wait_for_leaders(zk, "by-count", timeout=30)["partitions"]
    assert [len(p["replicas"]) for p in counted] == [2, 2, 2]
    placed = admin.wait_for_leaders(zk, "placed", timeout=30)["partitions"]
    assert [p["replicas"] for p in placed] == [[3, 1], [1, 3]]


def test_a_refused_topic_names_itself_and_the_reason(cluster, zk):
    with pytest.raises(TopicError, match=r"'too-many-replicas' refused: INVALID_REPLICATION_FACTOR"):
        create_topics(cluster.bootstrap_servers, {"too-many-replicas": 1}, 4, timeout_s=30)
    assert "too-many-replicas" not in admin.list_topics(zk)


def test_a_topic_that_already_exists_is_refused(cluster):
    create_topics(cluster.bootstrap_servers, {"twice": 1}, 1)
    with pytest.raises(TopicError, match=r"'twice' refused: TOPIC_ALREADY_EXISTS"):
        create_topics(cluster.bootstrap_servers, {"twice": 1}, 1, timeout_s=30)
