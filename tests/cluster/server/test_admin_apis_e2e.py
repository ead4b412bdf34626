"""The admin APIs against real brokers with their controller components
(docs/design.md#admin-api): the AdminClients of kafka-python,
confluent-kafka and aiokafka create, grow, describe and delete topics, and get Kafka's
error codes for what they may not do; raw requests show that only the
controller takes the writing requests."""
from __future__ import annotations

import pytest
from kafka.protocol.admin import (CreateTopicsRequest, CreateTopicsResponse,
                                  DescribeConfigsRequest, DescribeConfigsResponse)

from broker_cluster import wait_until
from cluster import admin
from cluster.protocol import errors as E
from kafka_wire import Wire, metadata

CONTROLLER = {"chaoslog.controller.enable": True, "min.insync.replicas": 2}


def _led(c, topic: str, partitions: int) -> bool:
    try:
        d = admin.describe_topic(c.zk, topic)
    except admin.AdminError:
        return False
    return len(d["partitions"]) == partitions and all(p["leader"] >= 0 for p in d["partitions"])


def _every_broker_serves_metadata(c) -> bool:
    """Each broker answers Metadata (it closes the connection until the
    controller told it the cluster: docs/design.md#broker-startup); aiokafka's
    admin client, unlike the others, gives up when its first bootstrap
    round finds none."""
    for b in c.brokers.values():
        w = Wire(b.address)
        try:
            if len(metadata(w).brokers) != len(c.brokers):
                return False
        except Exception:  # noqa: BLE001 - closed: not yet
            return False
        finally:
            w.close()
    return True


def _gone(c, topic: str) -> bool:
    return topic not in admin.list_topics(c.zk)


def test_kafka_python_admin_client(make_cluster):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
    from kafka.errors import InvalidReplicationFactorError, TopicAlreadyExistsError
    c = make_cluster(3, **CONTROLLER)
    wait_until(lambda: admin.controller_info(c.zk)["id"] > 0, 30, "a controller")
    client = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        client.create_topics([NewTopic("kp", 3, 2)], timeout_ms=30000)
        assert _led(c, "kp", 3), admin.describe_topic(c.zk, "kp")
        assert {len(p["replicas"]) for p in admin.describe_topic(c.zk, "kp")["partitions"]} == {2}
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([NewTopic("kp", 1, 1)], timeout_ms=30000)
        with pytest.raises(InvalidReplicationFactorError):
            client.create_topics([NewTopic("kp-wide", 1, 4)], timeout_ms=30000)
        assert "kp-wide" not in admin.list_topics(c.zk)

        client.create_partitions({"kp": NewPartitions(5)}, timeout_ms=30000)
        assert _led(c, "kp", 5), admin.describe_topic(c.zk, "kp")

        got = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")],
                                      config_filter="all")
        assert got["topic"]["kp"]["min.insync.replicas"]["value"] == "2", got

        client.delete_topics(["kp"], timeout_ms=30000)
        assert _gone(c, "kp")
    finally:
        client.close()


def test_confluent_kafka_admin_client(make_cluster):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
    c = make_cluster(3, **CONTROLLER)
    wait_until(lambda: admin.controller_info(c.zk)["id"] > 0, 30, "a controller")
    client = AdminClient({"bootstrap.servers": c.bootstrap})
    for f in client.create_topics([NewTopic("ck", 2, 3)], operation_timeout=30).values():
        f.result(60)
    assert _led(c, "ck", 2), admin.describe_topic(c.zk, "ck")
    [f] = client.create_topics([NewTopic("ck", 2, 3)], operation_timeout=30).values()
    with pytest.raises(KafkaException) as refused:
        f.result(60)
    assert refused.value.args[0].code() == E.TOPIC_ALREADY_EXISTS

    for f in client.create_partitions([NewPartitions("ck", 4)], operation_timeout=30).values():
        f.result(60)
    assert _led(c, "ck", 4), admin.describe_topic(c.zk, "ck")

    [f] = client.describe_configs([ConfigResource("topic", "ck")]).values()
    configs = {k: v.value for k, v in f.result(60).items()}
    assert configs["min.insync.replicas"] == "2", configs

    for f in client.delete_topics(["ck"], operation_timeout=30).values():
        f.result(60)
    wait_until(lambda: _gone(c, "ck"), 30, "ck deleted")


def test_aiokafka_admin_client(make_cluster):
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    c = make_cluster(3, **CONTROLLER)
    wait_until(lambda: _every_broker_serves_metadata(c), 30, "brokers that know the cluster")

    async def session() -> dict:
        client = AIOKafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
        await client.start()
        try:
            created = await client.create_topics([NewTopic("ak", 2, 2), NewTopic("ak-wide", 1, 4)],
                                                 timeout_ms=30000)
            await client.create_partitions({"ak": NewPartitions(3)}, timeout_ms=30000)
            [configs] = await client.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "ak")])
            led = _led(c, "ak", 3)
            await client.delete_topics(["ak"], timeout_ms=30000)
            return {"created": created, "configs": configs, "led": led}
        finally:
            await client.close()

    got = asyncio.run(session())
    # aiokafka hands back the CreateTopics answer as the broker wrote it: one
    # error code per topic.
    errors = {t[0]: t[1] for t in got["created"].topic_errors}
    assert errors == {"ak": E.NONE, "ak-wide": E.INVALID_REPLICATION_FACTOR}, errors
    assert got["led"], admin.describe_topic(c.zk, "ak")
    [resource] = got["configs"].resources
    values = {entry[0]: entry[1] for entry in resource[4]}
    assert values["min.insync.replicas"] == "2", values
    wait_until(lambda: _gone(c, "ak"), 30, "ak deleted")
    assert "ak-wide" not in admin.list_topics(c.zk)


def test_only_the_controller_takes_writing_admin_requests(make_cluster):
    c = make_cluster(3, **CONTROLLER)
    controller = wait_until(lambda: admin.controller_info(c.zk)["id"], 30, "a controller")
    other = next(b for b in c.brokers if b != controller)

    def create(broker: int, validate_only: bool) -> tuple[int, str | None]:
        w = Wire(c.brokers[broker].address)
        try:
            resp = w.call(CreateTopicsRequest, CreateTopicsResponse, 4,
                          topics=[("raw", 1, 1, [], [])], timeout_ms=10000,
                          validate_only=validate_only)
        finally:
            w.close()
        [t] = resp.topics
        return t.error_code, t.error_message

    assert create(other, False)[0] == E.NOT_CONTROLLER
    assert create(controller, True) == (E.NONE, None)
    assert "raw" not in admin.list_topics(c.zk), "validate_only created the topic"
    assert create(controller, False) == (E.NONE, None)
    assert _led(c, "raw", 1)

    w = Wire(c.brokers[other].address)
    try:
        resp = w.call(DescribeConfigsRequest, DescribeConfigsResponse, 2,
                      resources=[(4, str(controller), None), (2, "no-such-topic", None)],
                      include_synonyms=False)
    finally:
        w.close()
    assert [r.error_code for r in resp.results] == [E.INVALID_REQUEST,
                                                    E.UNKNOWN_TOPIC_OR_PARTITION], resp
