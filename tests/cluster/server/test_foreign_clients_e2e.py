"""Non-Python Kafka clients against one shared 3-broker cluster (real broker
processes with their controller components, a real ZooKeeper, RF 3,
min.insync.replicas 2), each on topics of its own whose 3 partitions are led
by brokers 1, 2 and 3:

- kcat (Debian's `kcat`, librdkafka): `kcat -L`, asked of each broker,
  lists the 3 brokers and every partition with the leader, replicas and ISR
  that ZooKeeper holds; `kcat -P -X acks=all` (librdkafka's acks -1)
  produces to each partition and `kcat -C -e` reads every message back, in
  order, at offsets 0..n-1, with the exact values;
  `kcat -G` (a balanced consumer, docs/design.md#groups) reads everything,
  commits it (the committed offsets are the partitions' ends), and a second
  run of the same group reads only what was produced after the first.
- Go, built offline in GOPATH mode from Debian's /usr/share/gocode once per
  session (the programs are in go/ beside this file): sarama
  (golang-github-shopify-sarama-dev) with Config.Version V2_0_0_0,
  V1_0_0_0 (both ask for Metadata v5) and V0_11_0_0 (Metadata v1), and
  kafka-go (golang-github-segmentio-kafka-go-dev) each produce 3000
  messages with acks=all to the 3 partitions and consume them back from the
  start; the test checks their JSON summaries (acknowledged and consumed offsets
  0..n-1 per partition, exact values in order) and reads the topic again
  with confluent-kafka, so what the Go client wrote is checked by another
  client too.

A missing tool fails its tests with what to install (scripts/setup.sh
installs them all); nothing is skipped."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker_cluster import BrokerProcess, wait_until
from cluster import admin

GO_SRC = Path(__file__).parent / "go"
GOCODE = Path("/usr/share/gocode")
PARTITIONS = 3
# Leaders 1, 2, 3 for partitions 0, 1, 2 (the controller elects the first
# live replica of each list).
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
CONFIG = {"chaoslog.controller.enable": True, "min.insync.replicas": 2,
          "group.initial.rebalance.delay.ms": 100, "group.min.session.timeout.ms": 1000,
          "offsets.topic.num.partitions": 4}
SETUP = "scripts/setup.sh installs them (`make test` runs it first)"


# -- the shared cluster ------------------------------------------------------------------

class ForeignCluster:
    """Three brokers with their controller components under a ZooKeeper
    chroot of their own (as conftest.py's Cluster, which has no
    module-scoped fixture with a controller)."""

    def __init__(self, zookeeper, base: Path, n: int = 3) -> None:
        chroot = f"/foreign-{uuid.uuid4().hex[:8]}"
        root = KazooClient(zookeeper.hosts)
        root.start()
        root.ensure_path(chroot)
        root.stop()
        root.close()
        self.zk = KazooClient(zookeeper.hosts + chroot)
        self.zk.start()
        self.brokers = {i: BrokerProcess(i, zookeeper.hosts, base, chroot=chroot, **CONFIG)
                        for i in range(1, n + 1)}
        try:
            for b in self.brokers.values():
                b.start()
            for b in self.brokers.values():
                b.wait_registered(self.zk)
            wait_until(lambda: admin.controller_info(self.zk)["id"] > 0, 30, "a controller")
        except BaseException:
            self.close()
            raise

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def topic(self, name: str) -> str:
        admin.create_topic(self.zk, name, PARTITIONS, 3, replica_assignment=ASSIGNMENT)
        d = admin.wait_for_leaders(self.zk, name, 30)
        assert [p["leader"] for p in d["partitions"]] == [1, 2, 3], d
        return name

    def stderr(self) -> str:
        return "\n".join(f"--- broker {b.id} ({b.stderr_path})\n{b.stderr()[-3000:]}"
                         for b in self.brokers.values())

    def close(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.zk.stop()
        self.zk.close()


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = ForeignCluster(zookeeper, tmp_path_factory.mktemp("foreign"))
    try:
        yield c
    finally:
        c.close()


def _run(cluster, cmd: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """Run a client; fail the test with its output and the brokers' logs
    when it exits non-zero or hangs."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{cmd[0]} still running after {timeout}s: {' '.join(cmd)}\n"
                    f"stdout (tail): {(e.stdout or b'')[-2000:]!r}\n"
                    f"stderr (tail): {(e.stderr or b'')[-4000:]!r}\n{cluster.stderr()}")
    if r.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {r.returncode}\nstdout (tail): {r.stdout[-2000:]}\n"
                    f"stderr (tail): {r.stderr[-6000:]}\n{cluster.stderr()}")
    return r


def _expected(prefix: str, n: int) -> dict[int, list[tuple[int, str]]]:
    """Message i goes to partition i % PARTITIONS: (offset, value) per partition."""
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
    for i in range(n):
        p = i % PARTITIONS
        out[p].append((len(out[p]), f"{prefix}-{i}"))
    return out


def _ck_read_all(cluster, topic: str, n: int,
                 timeout: float = 60) -> dict[int, list[tuple[int, str]]]:
    """Every message of the topic read with confluent-kafka, from offset 0."""
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{topic}",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout
    try:
        while sum(map(len, got.values())) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert not m.error(), m.error()
                got[m.partition()].append((m.offset(), m.value().decode()))
        for m in c.consume(100, 0.5):
            if not m.error():
                got[m.partition()].append((m.offset(), m.value().decode()))
    finally:
        c.close()
    return got


# -- kcat ----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat not found: install Debian's package kcat "
                    f"(apt-get install -y kcat); {SETUP}")
    return path


def _kcat_lines(out: str) -> dict[int, list[tuple[int, str]]]:
    """kcat -f '%p %o %s\\n' output: (offset, value) per partition."""
    got: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
    for line in out.splitlines():
        p, o, v = line.split(" ", 2)
        got[int(p)].append((int(o), v))
    return got


def _kcat_produce(cluster, kcat: str, topic: str, prefix: str, start: int, n: int) -> None:
    """Messages start..start+n-1, message i to partition i % PARTITIONS, one
    kcat -P run per partition (acks=all); kcat reports failed deliveries on
    stderr."""
    for p in range(PARTITIONS):
        lines = "".join(f"{prefix}-{i}\n" for i in range(start, start + n) if i % PARTITIONS == p)
        r = _run(cluster, [kcat, "-P", "-b", cluster.bootstrap, "-t", topic, "-p", str(p),
                           "-X", "acks=all", "-X", "linger.ms=5"], input=lines)
        assert "fail" not in r.stderr.lower() and "error" not in r.stderr.lower(), r.stderr


def test_kcat_metadata(cluster, kcat):
    topic = cluster.topic("kcat-meta")
    want_brokers = sorted((b.id, b.bootstrap) for b in cluster.brokers.values())
    want_parts = sorted((p["partition"], p["leader"], sorted(p["replicas"]), sorted(p["isr"]))
                        for p in admin.describe_topic(cluster.zk, topic)["partitions"])
    seen = {}

    def listed():
        # Every broker's metadata, asked of each broker alone: they all agree
        # once the controller's UpdateMetadata reached them.
        for b in cluster.brokers.values():
            r = _run(cluster, [kcat, "-L", "-J", "-b", b.bootstrap, "-t", topic], timeout=30)
            md = json.loads(r.stdout)
            seen[b.id] = md
            brokers = sorted((x["id"], x["name"]) for x in md["brokers"])
            (t,) = md["topics"]
            parts = sorted((x["partition"], x["leader"], sorted(y["id"] for y in x["replicas"]),
                            sorted(y["id"] for y in x["isrs"])) for x in t["partitions"])
            if t.get("error") or brokers != want_brokers or parts != want_parts:
                return False
        return True
    try:
        wait_until(listed, 20, "kcat -L to show the brokers and the topic's leaders")
    except AssertionError:
        pytest.fail(f"want brokers {want_brokers}, partitions {want_parts}; kcat -L -J said "
                    f"{json.dumps(seen, indent=1)}")


def test_kcat_produce_acks_all_and_consume(cluster, kcat):
    topic = cluster.topic("kcat-pc")
    n = 3000
    # -X acks=all reaches librdkafka as acks -1 (its own name for it).
    r = _run(cluster, [kcat, "-P", "-b", cluster.bootstrap, "-t", topic, "-X", "acks=all",
                       "-X", "dump"])
    assert "request.required.acks = -1" in r.stdout.splitlines(), r.stdout
    _kcat_produce(cluster, kcat, topic, "kcat", 0, n)
    r = _run(cluster, [kcat, "-C", "-b", cluster.bootstrap, "-t", topic, "-o", "beginning",
                       "-e", "-f", "%p %o %s\\n"])
    assert _kcat_lines(r.stdout) == _expected("kcat", n)


def _committed(cluster, group: str, topic: str) -> dict[int, int]:
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                     "enable.auto.commit": False})
    try:
        tps = c.committed([ck.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    assert not any(tp.error for tp in tps), tps
    return {tp.partition: tp.offset for tp in tps}


def test_kcat_balanced_consumer_commits(cluster, kcat):
    topic = cluster.topic("kcat-group")
    group = "kcat-g"
    n1, n2 = 900, 300
    _kcat_produce(cluster, kcat, topic, "g", 0, n1)
    # No -o: kcat would start every assigned partition there, whatever the
    # group committed; without it the group's offsets count (earliest when
    # there are none).
    cmd = [kcat, "-b", cluster.bootstrap, "-G", group, topic, "-e",
           "-f", "%p %o %s\\n", "-X", "auto.offset.reset=earliest",
           "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=300"]
    r = _run(cluster, cmd)
    assert _kcat_lines(r.stdout) == _expected("g", n1), r.stderr
    # kcat commits what it consumed (auto-commit, and again when it closes).
    want = {p: len(v) for p, v in _expected("g", n1).items()}
    assert _committed(cluster, group, topic) == want

    # The same group again, after more messages: only those are read.
    _kcat_produce(cluster, kcat, topic, "g", n1, n2)
    r = _run(cluster, cmd)
    all_ = _expected("g", n1 + n2)
    assert _kcat_lines(r.stdout) == {p: v[want[p]:] for p, v in all_.items()}, r.stderr
    assert _committed(cluster, group, topic) == {p: len(v) for p, v in all_.items()}


# -- Go: sarama and kafka-go ---------------------------------------------------------------

GO_PACKAGES = {"golang-github-shopify-sarama-dev": GOCODE / "src/github.com/Shopify/sarama",
               "golang-github-segmentio-kafka-go-dev": GOCODE / "src/github.com/segmentio/kafka-go"}


@pytest.fixture(scope="session")
def go_clients(tmp_path_factory) -> dict[str, Path]:
    """The Go programs of go/, built once per session, offline: GOPATH mode,
    Debian's Go packages only, no module download (GOPROXY=off). CGO off:
    Debian's sarama then builds without zstd's C library."""
    go = shutil.which("go")
    missing = ([] if go else ["golang-go"]) + [pkg for pkg, path in GO_PACKAGES.items()
                                               if not path.is_dir()]
    if missing:
        pytest.fail(f"Go clients need Debian's packages {' '.join(missing)} "
                    f"(apt-get install -y {' '.join(missing)}); {SETUP}")
    gopath = tmp_path_factory.mktemp("gopath")
    src = gopath / "src" / "chaoslogclients"
    shutil.copytree(GO_SRC, src)
    out = gopath / "bin"
    out.mkdir()
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{gopath}:{GOCODE}",
           "CGO_ENABLED": "0", "GOPROXY": "off", "GOFLAGS": ""}
    if not any(os.environ.get(k) for k in ("GOCACHE", "XDG_CACHE_HOME", "HOME")):
        env["GOCACHE"] = str(gopath / "cache")  # go refuses to build without one
    r = subprocess.run([go, "build", "-o", f"{out}/", "chaoslogclients/sarama",
                        "chaoslogclients/kafkago"], cwd=gopath, env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"go build of {GO_SRC} failed:\n{r.stdout}\n{r.stderr}")
    return {"sarama": out / "sarama", "kafkago": out / "kafkago"}


def _check_go_summary(cluster, summary: dict, topic: str, prefix: str, n: int,
                      acked: bool) -> None:
    want = _expected(prefix, n)
    assert summary["produced"] == n and summary["consumed"] == n
    for p in range(PARTITIONS):
        part = summary["partitions"][str(p)]
        offsets = [o for o, _ in want[p]]
        assert part["consumed_offsets"] == offsets, p
        assert part["values"] == [v for _, v in want[p]], p
        if acked:
            assert part["acked_offsets"] == offsets, p
    # What the Go client wrote, read by another client.
    assert _ck_read_all(cluster, topic, n) == want


N_GO = 3000


# -version, and sarama's KafkaVersion.String() of it
# (1.0.0 too: from 1.0 on sarama asks for Metadata v5, as with 2.0.)
@pytest.mark.parametrize("version,shown", [("2.0.0", "2.0.0"), ("1.0.0", "1.0.0"),
                                           ("0.11.0", "0.11.0.0")])
def test_sarama(cluster, go_clients, version, shown):
    topic = cluster.topic(f"sarama-{version.replace('.', '')}")
    prefix = f"sarama{version}"
    r = _run(cluster, [str(go_clients["sarama"]), "-brokers", cluster.bootstrap, "-topic", topic,
                       "-partitions", str(PARTITIONS), "-n", str(N_GO), "-prefix", prefix,
                       "-version", version, "-timeout", "45s"], timeout=120)
    summary = json.loads(r.stdout)
    assert summary["client"] == "sarama"
    assert summary["kafka_version"] == shown
    _check_go_summary(cluster, summary, topic, prefix, N_GO, acked=True)


def test_kafka_go(cluster, go_clients):
    topic = cluster.topic("kafkago")
    r = _run(cluster, [str(go_clients["kafkago"]), "-brokers", cluster.bootstrap, "-topic", topic,
                       "-partitions", str(PARTITIONS), "-n", str(N_GO), "-prefix", "kafkago",
                       "-timeout", "45s"], timeout=120)
    summary = json.loads(r.stdout)
    assert summary["client"] == "kafka-go"
    _check_go_summary(cluster, summary, topic, "kafkago", N_GO, acked=False)
