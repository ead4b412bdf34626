"""Helpers of test_controller_reassign_e2e.py: an acks=all producer that
records when each value was acknowledged, reading a partition back from the
start, and the ZooKeeper conditions the tests wait for. Clusters are the
harness's local backend (harness/backends/local.py): nodes are named
broker-<id>."""
from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Callable, Iterable

from cluster import admin, zkpaths


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll until cond() is truthy and return it. An exception inside cond (a
    ZooKeeper hiccup, a broker not answering yet) counts as "not yet"; the
    failure message names the condition and the last error."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}"
                                 + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


def node(broker_id: int) -> str:
    return f"broker-{broker_id}"


# ------------------------------------------------------------------ ZooKeeper
def partition(zk, topic: str, p: int = 0) -> dict[str, Any]:
    return {x["partition"]: x for x in admin.describe_topic(zk, topic)["partitions"]}[p]


def create_topic(zk, topic: str, assignment: dict[int, list[int]] | None = None,
                 partitions: int = 1, rf: int = 3) -> dict[str, Any]:
    """Create the topic and wait until every partition is led by its preferred
    replica with the full replica set in the ISR."""
    admin.create_topic(zk, topic, partitions, rf, replica_assignment=assignment)

    def ready():
        d = admin.describe_topic(zk, topic)
        ok = all(p["leader"] == p["replicas"][0] and sorted(p["isr"]) == sorted(p["replicas"])
                 for p in d["partitions"])
        return d if ok else None
    return wait_for(ready, 30, f"{topic}: preferred leaders and full ISRs")


def pending_reassignment(zk) -> dict:
    try:
        return zkpaths.decode_reassignment(zk.get(zkpaths.REASSIGN_PARTITIONS)[0])
    except Exception:  # NoNode: nothing pending
        return {}


def wait_reassigned(zk, topic: str, rar: list[int], p: int = 0, timeout: float = 60) -> dict:
    """The must-show end state: the admin entry is gone, AR == RAR, the
    leader is in RAR and the ISR is exactly RAR (the new replicas caught up,
    the old ones left)."""
    last: dict[str, Any] = {}

    def done():
        if (topic, p) in pending_reassignment(zk):
            return None
        last.update(partition(zk, topic, p))
        ok = (last["replicas"] == list(rar) and last["leader"] in rar
              and sorted(last["isr"]) == sorted(rar))
        return dict(last) if ok else None
    try:
        return wait_for(done, timeout, f"{topic}-{p} reassigned to {rar}")
    except AssertionError as e:
        raise AssertionError(f"{e}; last state {last}") from None


def reassignment_steps(zk, topic: str, p: int = 0) -> dict[int, list[str]]:
    """The controller's reassignment records of a partition, by controller
    epoch, oldest first ("step N done", "complete", "rejected")."""
    out: dict[int, list[str]] = {}
    for r in admin.state_log(zk, topic, p):
        if r["kind"] == "reassignment":
            out.setdefault(r["controller_epoch"], []).append(r["to"])
    return out


def start_epoch(zk, broker_id: int) -> int:
    for b in admin.brokers(zk):
        if b["id"] == broker_id:
            return b["start_epoch"]
    return -1


def restart_broker(cluster, zk, broker_id: int, env: dict[str, str] | None = None,
                   kill: bool = False) -> None:
    """Stop (SIGTERM, or SIGKILL with kill) and start a broker, with `env` as
    its extra environment from now on; return once the new process has
    registered (a registration with a higher start epoch)."""
    before = start_epoch(zk, broker_id)
    name = node(broker_id)
    if kill:
        cluster.kill_node(name)
    else:
        cluster.stop_node(name, 60)
    cluster.set_node_env(name, env or {})
    cluster.start_node(name)
    wait_for(lambda: start_epoch(zk, broker_id) > before, 60,
             f"broker {broker_id} registered again after its restart")


def replica_dir_gone(cluster, broker_id: int, topic: str, p: int = 0) -> bool:
    return not (cluster.data_dir(node(broker_id)) / "logs" / f"{topic}-{p}").exists()


# ------------------------------------------------------------------ clients
class AckedLoad:
    """An acks=all confluent-kafka producer in a thread writing unique values
    round-robin to the given partitions of a topic, with unbounded retries.
    librdkafka may write a value twice (a re-sent batch): allowed. What must
    hold is that every acknowledged value can be read back.

    acks: (ack time, partition, value, send latency) in acknowledgement order
    (monotonic clock); errors: the failed sends."""

    def __init__(self, bootstrap: str, topic: str, partitions: Iterable[int] = (0,),
                 pause: float = 0.002, burst: int = 0, size: int = 0) -> None:
        """One value every `pause` seconds, the first `burst` ones as fast as
        librdkafka takes them (a log for new replicas to copy); values are
        padded to `size` bytes."""
        import confluent_kafka as ck
        self.topic = topic
        self.partitions = list(partitions)
        self.pause = pause
        self.burst = burst
        self.pad = size
        self.acks: list[tuple[float, int, bytes, float]] = []
        self.errors: list[str] = []
        self.sent = 0
        self._sent_log: list[tuple[float, int]] = []  # (time, values sent so far), every 50
        self._stop = threading.Event()
        self.p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                              "message.timeout.ms": 120000, "retries": 1000000,
                              "retry.backoff.ms": 100})
        self._t = threading.Thread(target=self._run, daemon=True, name=f"load-{topic}")
        self._t.start()

    def _on_delivery(self, err, msg, sent_at: float) -> None:
        now = time.monotonic()
        if err:
            self.errors.append(f"{msg.value()!r}: {err}")
        else:
            self.acks.append((now, msg.partition(), msg.value(), now - sent_at))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            p = self.partitions[i % len(self.partitions)]
            value = b"%s-%d-%08d" % (self.topic.encode(), p, i)
            value += b"." * (self.pad - len(value))
            try:
                self.p.produce(self.topic, value=value, partition=p,
                               on_delivery=lambda e, m, t=time.monotonic(): self._on_delivery(e, m, t))
                i += 1
                self.sent = i
                if i % 50 == 0:
                    self._sent_log.append((time.monotonic(), i))
            except BufferError:
                self.p.poll(0.01)
            self.p.poll(0 if i < self.burst else self.pause)
        self.p.flush(150)

    def wait_acks(self, more: int, timeout: float = 60) -> None:
        """Until `more` acknowledgements beyond those seen so far arrived."""
        target = len(self.acks) + more
        wait_for(lambda: len(self.acks) >= target or self.errors, timeout,
                 f"{more} more acknowledgements of {self.topic}")
        assert not self.errors, self.errors[:5]

    def finish(self) -> None:
        self._stop.set()
        self._t.join(180)
        assert not self._t.is_alive(), "the producer did not finish flushing"

    def sent_at(self, t: float) -> int:
        """How many values had been sent at time t (to within 50)."""
        return max((n for u, n in self._sent_log if u <= t), default=0)

    def acks_between(self, since: float, until: float) -> int:
        return sum(1 for t, _, _, _ in self.acks if since <= t <= until)

    def acked(self, p: int | None = None) -> set[bytes]:
        return {v for _, q, v, _ in self.acks if p is None or q == p}

    def max_gap(self, partitions: Iterable[int] | None = None, since: float = 0.0,
                until: float = float("inf")) -> tuple[float, float]:
        """(largest gap between consecutive acknowledgements of the given
        partitions (all of them by default) that ended in [since, until],
        when it ended)."""
        ps = set(self.partitions if partitions is None else partitions)
        times = [t for t, q, _, _ in self.acks if q in ps]
        best, at = 0.0, 0.0
        for a, b in zip(times, times[1:]):
            if since <= b <= until and b - a > best:
                best, at = b - a, b
        return best, at

    def max_latency(self, since: float = 0.0, until: float = float("inf")) -> float:
        """Largest send-to-acknowledgement time of the values acknowledged in
        [since, until]."""
        return max((lat for t, _, _, lat in self.acks if since <= t <= until), default=0.0)


def read_partition(bootstrap: str, topic: str, p: int = 0, timeout: float = 60) -> list[bytes]:
    """Every value of the partition from offset 0 up to its high watermark,
    read from its current leader."""
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        tp = ck.TopicPartition(topic, p)
        _, high = wait_for(lambda: c.get_watermark_offsets(tp, timeout=5), timeout,
                           f"watermarks of {topic}-{p}")
        c.assign([ck.TopicPartition(topic, p, 0)])
        got: list[bytes] = []
        pos = 0
        deadline = time.monotonic() + timeout
        while pos < high:
            if time.monotonic() > deadline:
                raise AssertionError(f"read {topic}-{p} up to offset {pos} of {high} "
                                     f"within {timeout:g}s")
            for m in c.consume(1000, 0.5):
                if m.error() is None:
                    got.append(m.value())
                    pos = m.offset() + 1
        return got
    finally:
        c.close()


def assert_no_acked_loss(load: AckedLoad, bootstrap: str) -> int:
    """Every acknowledged value is in its partition, read from the start.
    Returns the number of acknowledged values checked."""
    for p in load.partitions:
        acked = load.acked(p)
        got = set(read_partition(bootstrap, load.topic, p))
        missing = acked - got
        assert not missing, (f"{len(missing)} of {len(acked)} acknowledged values of "
                             f"{load.topic}-{p} lost, e.g. {sorted(missing)[:5]}")
    return len(load.acked())
