"""The pure checks of the admin APIs (cluster/server/admin_apis.py): which
CreateTopics and CreatePartitions requests are refused with which of Kafka's
error codes, and what DescribeConfigs shows. The requests against real
brokers are in test_admin_apis_e2e.py."""
from __future__ import annotations

from cluster.config import BrokerConfig
from cluster.protocol import errors as E
from cluster.server.admin_apis import (SOURCE_DEFAULT, SOURCE_STATIC_BROKER, Refusal,
                                       describe_configs, plan_partitions, plan_topic)

LIVE = [1, 2, 3]
DEFAULTS = (1, 1)


def error(plan) -> int:
    return plan.error if isinstance(plan, Refusal) else E.NONE


def test_a_topic_by_count_is_assigned_round_robin():
    assert plan_topic("t", 3, 2, {}, [], LIVE, DEFAULTS) is None


def test_minus_one_means_the_broker_default():
    assert plan_topic("t", -1, -1, {}, [], LIVE, (4, 3)) is None
    assert error(plan_topic("t", -1, -1, {}, [], LIVE, (4, 5))) == E.INVALID_REPLICATION_FACTOR


def test_refusals_of_create_topics():
    assert error(plan_topic("a/b", 1, 1, {}, [], LIVE, DEFAULTS)) == E.INVALID_TOPIC_EXCEPTION
    assert error(plan_topic("..", 1, 1, {}, [], LIVE, DEFAULTS)) == E.INVALID_TOPIC_EXCEPTION
    assert error(plan_topic("t", 0, 1, {}, [], LIVE, DEFAULTS)) == E.INVALID_PARTITIONS
    assert error(plan_topic("t", 1, 0, {}, [], LIVE, DEFAULTS)) == E.INVALID_REPLICATION_FACTOR
    assert error(plan_topic("t", 1, 4, {}, [], LIVE, DEFAULTS)) == E.INVALID_REPLICATION_FACTOR
    refused = plan_topic("t", 1, 1, {}, ["retention.ms"], LIVE, DEFAULTS)
    assert error(refused) == E.INVALID_CONFIG and "retention.ms" in refused.message


def test_an_absurd_partition_count_is_refused_before_anything_is_assigned():
    # found by the protocol fuzzer: 2^31-1 partitions kept the ZooKeeper
    # thread assigning them, and the broker's other ZooKeeper work waited
    assert error(plan_topic("t", 2 ** 31 - 1, 1, {}, [], LIVE, DEFAULTS)) == E.INVALID_PARTITIONS
    assert error(plan_partitions(2 ** 31 - 1, 1, 1, None, LIVE)) == E.INVALID_PARTITIONS
    assert plan_topic("t", 10_000, 1, {}, [], LIVE, DEFAULTS) is None


def test_an_explicit_assignment_is_checked_and_kept():
    assert plan_topic("t", -1, -1, {0: [1, 2], 1: [2, 3]}, [], LIVE, DEFAULTS) == {
        0: [1, 2], 1: [2, 3]}
    bad = {
        "both a count and an assignment": ({0: [1]}, 1, -1, E.INVALID_REQUEST),
        "a gap in the partitions": ({0: [1], 2: [2]}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT),
        "a replica twice": ({0: [1, 1]}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT),
        "no replica": ({0: []}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT),
        "a broker not live": ({0: [1, 7]}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT),
        "unequal replica counts": ({0: [1, 2], 1: [3]}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT),
    }
    for why, (assignment, n, rf, code) in bad.items():
        assert error(plan_topic("t", n, rf, assignment, [], LIVE, DEFAULTS)) == code, why


def test_create_partitions():
    assert plan_partitions(4, 2, 2, None, LIVE) is None
    assert plan_partitions(4, 2, 2, [[1, 2], [3, 1]], LIVE) == {2: [1, 2], 3: [3, 1]}
    assert error(plan_partitions(2, 2, 2, None, LIVE)) == E.INVALID_PARTITIONS
    assert error(plan_partitions(1, 2, 2, None, LIVE)) == E.INVALID_PARTITIONS
    assert error(plan_partitions(3, 2, 4, None, LIVE)) == E.INVALID_REPLICATION_FACTOR
    assert error(plan_partitions(4, 2, 2, [[1, 2]], LIVE)) == E.INVALID_REPLICA_ASSIGNMENT
    assert error(plan_partitions(3, 2, 2, [[1]], LIVE)) == E.INVALID_REPLICA_ASSIGNMENT
    assert error(plan_partitions(3, 2, 2, [[1, 9]], LIVE)) == E.INVALID_REPLICA_ASSIGNMENT


def test_describe_configs_shows_the_brokers_settings_under_topic_names():
    cfg = BrokerConfig.from_dict({"min.insync.replicas": 2, "log.segment.bytes": 65536})
    entries = {e[0]: e for e in describe_configs(cfg.values, None, topic_level=True)}
    assert entries["min.insync.replicas"][1:4] == ("2", True, SOURCE_STATIC_BROKER)
    assert entries["segment.bytes"][1] == "65536"
    assert entries["unclean.leader.election.enable"][1:4] == ("true", True, SOURCE_DEFAULT)
    assert "log.segment.bytes" not in entries
    only = describe_configs(cfg.values, ["retention.ms", "no.such.key"], topic_level=True)
    assert [e[0] for e in only] == ["retention.ms"]
    broker = {e[0]: e for e in describe_configs(cfg.values, None, topic_level=False)}
    assert broker["log.segment.bytes"][1] == "65536" and "segment.bytes" not in broker
