"""A SASL_SSL cluster of three brokers with their controllers
(docs/design.md#security): the brokers fetch from each other and the
controller talks to them over TLS with SCRAM; unmodified clients (librdkafka,
kafka-python, aiokafka, kcat, and Go's sarama with PLAIN over handshake v0)
produce and consume with PLAIN and both SCRAM mechanisms; a wrong password
and a request before authentication are refused, and the connection closed.
Debian's kafka-go has no SASL: it goes through TLS to an SSL cluster."""
from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import struct
import subprocess
import time

import pytest

from broker_cluster import AckedProducer, Cluster, wait_until
from cluster import admin
from cluster.protocol import errors as E
from cluster.protocol import sasl
from cluster.security import socket_roundtrip
from harness.certificates import make_certificates
from test_foreign_clients_e2e import go_clients  # noqa: F401 - the session's Go build

BROKER_PASSWORD = "broker-secret-1"
ALICE_PASSWORD = "alice-secret-2"


def _tls_config(certs) -> dict:
    return {"ssl.keystore.location": str(certs.keystore), "ssl.truststore.location": str(certs.ca),
            "chaoslog.controller.enable": True, "min.insync.replicas": 2}


@pytest.fixture(scope="module")
def secure(zookeeper, tmp_path_factory):
    base = tmp_path_factory.mktemp("secure")
    certs = make_certificates(base / "tls", [])
    (base / "broker.password").write_text(BROKER_PASSWORD)
    c = Cluster(zookeeper, base, 3, {"broker": BROKER_PASSWORD, "alice": ALICE_PASSWORD}, **{
        "security.inter.broker.protocol": "SASL_SSL",
        "sasl.inter.broker.username": "broker",
        "sasl.inter.broker.password.file": str(base / "broker.password"), **_tls_config(certs)})
    c.ca = str(certs.ca)
    try:
        yield c
    finally:
        c.close()


def _go(binary, c, topic: str, *extra: str) -> dict:
    admin.create_topic(c.zk, topic, 1, 3)
    admin.wait_for_leaders(c.zk, topic, 60)
    r = subprocess.run([str(binary), "-brokers", c.bootstrap, "-topic", topic, "-partitions", "1",
                        "-n", "300", "-prefix", topic, "-timeout", "45s", "-ca", c.ca, *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["produced"] == out["consumed"] == 300, out
    return out


def test_sarama_produces_and_consumes_through_sasl_ssl_with_plain(secure, go_clients, tmp_path):
    password = tmp_path / "alice.password"
    password.write_text(ALICE_PASSWORD)
    _go(go_clients["sarama"], secure, "sarama-sec", "-version", "2.0.0",
        "-sasl-user", "alice", "-sasl-password-file", str(password))


def test_kafka_go_produces_and_consumes_through_ssl(zookeeper, tmp_path, go_clients):
    certs = make_certificates(tmp_path / "tls", [])
    c = Cluster(zookeeper, tmp_path, 3, None, **{"security.inter.broker.protocol": "SSL",
                                                 **_tls_config(certs)})
    c.ca = str(certs.ca)
    try:
        _go(go_clients["kafkago"], c, "kafkago-ssl")
    finally:
        c.close()


def _ck(c, mechanism: str, password: str = ALICE_PASSWORD) -> dict:
    return {"bootstrap.servers": c.bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanisms": mechanism, "sasl.username": "alice", "sasl.password": password,
            "ssl.ca.location": c.ca}


def _tls(c) -> socket.socket:
    ctx = ssl.create_default_context(cafile=c.ca)
    b = next(iter(c.brokers.values()))
    return ctx.wrap_socket(socket.create_connection(b.address, timeout=10), server_hostname="127.0.0.1")


def _roundtrip(s: socket.socket):
    return socket_roundtrip(s, b"test")


def _closed(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        return s.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def test_clients_produce_and_consume_through_sasl_ssl_with_every_mechanism(secure):
    import confluent_kafka as ck
    admin.create_topic(secure.zk, "sec", 1, 3)
    admin.wait_for_leaders(secure.zk, "sec", 60)
    with AckedProducer(secure.bootstrap, "sec", b"s%06d", **_ck(secure, "SCRAM-SHA-512")) as load:
        wait_until(lambda: len(load.acked) >= 500, 60, "acks=all writes through SASL_SSL")
    assert load.errors == []
    # acks=all with min ISR 2 were acknowledged: the followers fetched over SASL_SSL.
    wait_until(lambda: len(admin.describe_topic(secure.zk, "sec")["partitions"][0]["isr"]) == 3,
               30, "the whole ISR")

    cons = ck.Consumer({**_ck(secure, "PLAIN"), "group.id": "g", "enable.auto.commit": False})
    cons.assign([ck.TopicPartition("sec", 0, 0)])
    got, deadline = [], time.monotonic() + 60
    while len(got) < len(load.acked) and time.monotonic() < deadline:
        got += [m.value() for m in cons.consume(1000, 0.5) if not m.error()]
    cons.close()
    assert got[:len(load.acked)] == load.acked

    from kafka import KafkaConsumer, TopicPartition
    kp = KafkaConsumer(bootstrap_servers=secure.bootstrap, security_protocol="SASL_SSL",
                       sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                       sasl_plain_password=ALICE_PASSWORD, ssl_cafile=secure.ca,
                       enable_auto_commit=False, consumer_timeout_ms=5000)
    kp.assign([TopicPartition("sec", 0)])
    kp.seek(TopicPartition("sec", 0), 0)
    assert [m.value for m in kp][:10] == load.acked[:10]
    kp.close()

    async def aio():
        from aiokafka import AIOKafkaConsumer
        from aiokafka.helpers import create_ssl_context
        from aiokafka.structs import TopicPartition as ATP
        c = AIOKafkaConsumer(bootstrap_servers=secure.bootstrap, security_protocol="SASL_SSL",
                             sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                             sasl_plain_password=ALICE_PASSWORD,
                             ssl_context=create_ssl_context(cafile=secure.ca))
        await c.start()
        try:
            c.assign([ATP("sec", 0)])
            c.seek(ATP("sec", 0), 0)
            batch = await c.getmany(timeout_ms=10000, max_records=10)
            return [m.value for ms in batch.values() for m in ms]
        finally:
            await c.stop()
    assert asyncio.run(aio())[:10] == load.acked[:10]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by make setup")
def test_kcat_reads_through_sasl_ssl(secure):
    admin.create_topic(secure.zk, "kc", 1, 3)
    admin.wait_for_leaders(secure.zk, "kc", 60)
    args = ["kcat", "-b", secure.bootstrap, "-X", "security.protocol=SASL_SSL",
            "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=alice",
            "-X", f"sasl.password={ALICE_PASSWORD}", "-X", f"ssl.ca.location={secure.ca}"]
    subprocess.run(args + ["-P", "-t", "kc", "-p", "0"], input=b"one\ntwo\n", check=True,
                   timeout=60)
    out = subprocess.run(args + ["-C", "-t", "kc", "-p", "0", "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=60).stdout
    assert out.split() == [b"one", b"two"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_wrong_password_is_refused_and_the_connection_closed(secure, mechanism):
    s = _tls(secure)
    with pytest.raises(sasl.SaslError, match="Authentication failed"):
        sasl.authenticate(_roundtrip(s), mechanism, "alice", "not-the-password")
    assert _closed(s)
    # The right one passes on a new connection.
    s = _tls(secure)
    sasl.authenticate(_roundtrip(s), mechanism, "alice", ALICE_PASSWORD)
    s.close()


def test_librdkafka_with_a_wrong_password_gets_an_authentication_error(secure):
    import confluent_kafka as ck
    errors = []
    p = ck.Producer({**_ck(secure, "SCRAM-SHA-256", "wrong"), "error_cb": errors.append})
    wait_until(lambda: p.poll(0.2) is not None and errors, 30, "an error from librdkafka")
    assert any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors), errors
    p.flush(0)


def test_a_request_before_authentication_closes_the_connection(secure):
    s = _tls(secure)
    send = _roundtrip(s)
    # ApiVersions is answered before authentication...
    assert struct.unpack(">h", send(18, 0, b"")[:2])[0] == E.NONE
    # ...Metadata is not: the connection closes.
    with pytest.raises(ConnectionError):
        send(3, 0, struct.pack(">i", -1))
    # An unknown mechanism: refused, the enabled ones named, then closed.
    s = _tls(secure)
    with pytest.raises(sasl.SaslError, match="error 33.*SCRAM-SHA-512"):
        _handshake(s, "GSSAPI")
    assert _closed(s)


def _handshake(s: socket.socket, mechanism: str) -> None:
    body = struct.pack(">h", len(mechanism)) + mechanism.encode()
    r = _roundtrip(s)(sasl.SASL_HANDSHAKE, 1, body)
    error = struct.unpack(">h", r[:2])[0]
    if error:
        raise sasl.SaslError(f"error {error}: {r[6:].decode(errors='replace')}")
