"""A workload worker: `python -m harness.workload.worker ROLE [options]`.

Roles:
  producer  K logical processes ("slots") each with at most one send in
            flight, sharing one client; values are worker_id * 10^9 + n.
            With --transactions, each transaction sends one value per slot,
            then commits or aborts (harness/workload/transactions.py).
  pipeline  consume-transform-produce in transactions: reads --partitions as
            group --group, writes --output (harness/workload/pipeline.py).
  consumer  one logical process per assigned partition, polling in turn;
            with --group, a member of that consumer group instead
            (harness/workload/group.py): subscribed to --partitions' topics.
  final     reads each assigned partition from its first offset until it
            has returned every offset below the high watermark (and, when
            --min-end says how far acknowledged writes went, until it reached
            that too or --settle-s passed); polls are marked final.

Output, one JSON object per line on stdout (the harness owns numbering):
  {"type": "invoke", "slot": 2, "seq": 17, "f": "send", "topic": "t", "partition": 0, "value": ...}
  {"type": "ok" | "fail" | "info", "slot": 2, "seq": 17, ...fields}
  {"type": "status", ...}   final reads: per partition, complete or not
  {"type": "group", "kind": "assign" | "revoke" | "commit", ...}  group members: groups.jsonl
  {"type": "log", "msg": "..."}
The worker stops at --duration, on SIGTERM/SIGINT, or when stdin closes
(with --stdin-stop); it then waits up to --drain-s for ops in flight and
reports the rest as info.
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
from typing import Any

from contracts.deadline import Deadline, wait_until
from harness.security import PLAINTEXT, ClientSecurity
from harness.workload import pipeline, transactions
from harness.workload.clients import EXIT_FATAL, ProducerSettings, make_consumer, make_producer
from harness.workload.group import COMMIT_MODES

VALUE_STRIDE = 10**9
READ_COMMITTED = "read_committed"


class Out:
    """Serialized JSON lines on stdout, flushed per line (the harness times
    events at receipt, so buffering would skew `time`)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()

    def emit(self, **event: Any) -> None:
        line = json.dumps(event, separators=(",", ":"))
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def log(self, msg: str) -> None:
        self.emit(type="log", msg=msg)


class Stopper:
    def __init__(self, duration: float, stdin_stop: bool):
        self.event = threading.Event()
        self.deadline = Deadline(duration) if duration > 0 else None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.event.set())
        if stdin_stop:
            threading.Thread(target=self._watch_stdin, daemon=True).start()

    def _watch_stdin(self) -> None:
        try:
            while sys.stdin.readline():
                pass
        except (OSError, ValueError):
            pass
        self.event.set()

    def stopped(self) -> bool:
        if self.deadline is not None and self.deadline.expired():
            self.event.set()
        return self.event.is_set()


class RateLimiter:
    """At most `rate` starts a second overall (0 = unlimited)."""

    def __init__(self, rate: float):
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.next = time.monotonic()

    def ready(self) -> bool:
        if not self.interval:
            return True
        now = time.monotonic()
        if now >= self.next:
            self.next = max(self.next + self.interval, now - 1.0)  # at most 1 s of burst
            return True
        return False

    def wait_s(self) -> float:
        return max(0.0, self.next - time.monotonic()) if self.interval else 0.0


def parse_partitions(text: str) -> list[tuple[str, int]]:
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        topic, _, p = item.rpartition("/")
        if not topic or not p.isdigit():
            raise SystemExit(f"bad partition {item!r}: expected TOPIC/PARTITION")
        out.append((topic, int(p)))
    return out


def parse_min_end(text: str) -> dict[tuple[str, int], int]:
    """"t/0=17,t/1=4" -> {("t", 0): 17, ("t", 1): 4}"""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        tp, _, off = item.rpartition("=")
        [(topic, p)] = parse_partitions(tp)
        out[(topic, p)] = int(off)
    return out


# -- producer -----------------------------------------------------------------------

def run_transactions(a: argparse.Namespace, out: Out, stop: Stopper) -> int:
    kinds = {"confluent": transactions.ConfluentTransactions,
             "aiokafka": transactions.AiokafkaTransactions}
    if a.client not in kinds:
        raise SystemExit(f"--transactions: the transactional producers are "
                         f"{' and '.join(kinds)}, not {a.client}")
    producer = kinds[a.client](
        a.bootstrap, f"chaoslog-tx-w{a.worker_id}", f"chaoslog-w{a.worker_id}",
        a.transaction_timeout_ms, a.delivery_timeout_ms / 1000, a.security)
    limiter = RateLimiter(a.rate)

    def pace() -> None:
        while not limiter.ready():
            time.sleep(min(0.05, limiter.wait_s()))
    try:
        return transactions.run(producer, parse_partitions(a.partitions), a.slots, a.worker_id,
                                VALUE_STRIDE, a.abort_ratio, out.emit, stop.stopped,
                                random.Random(a.worker_id), pace)
    finally:
        try:
            producer.close(1.0)
        except Exception as e:  # noqa: BLE001
            out.log(f"closing the transactional producer: {e!r}")


def run_pipeline(a: argparse.Namespace, out: Out, stop: Stopper) -> int:
    if a.client != "confluent":
        raise SystemExit(f"the pipeline is confluent's, not {a.client}")
    pipe = pipeline.ConfluentPipeline(
        a.bootstrap, a.group, parse_partitions(a.partitions), f"chaoslog-pipe-w{a.worker_id}",
        f"chaoslog-w{a.worker_id}", a.transaction_timeout_ms, a.delivery_timeout_ms / 1000,
        a.security)
    try:
        return pipeline.run(pipe, a.output, a.output_partitions, a.worker_id, VALUE_STRIDE,
                            a.abort_ratio, out.emit, stop.stopped, random.Random(a.worker_id))
    finally:
        try:
            pipe.close()
        except Exception as e:  # noqa: BLE001
            out.log(f"closing the pipeline: {e!r}")


def run_producer(a: argparse.Namespace, out: Out, stop: Stopper) -> int:
    if a.transactions:
        return run_transactions(a, out, stop)
    settings = ProducerSettings(acks=a.acks, retries=a.retries, idempotent=a.idempotent,
                                max_in_flight=a.max_in_flight,
                                request_timeout_ms=a.request_timeout_ms,
                                delivery_timeout_ms=a.delivery_timeout_ms)
    targets = parse_partitions(a.partitions)
    producer = make_producer(a.client, a.bootstrap, settings, f"chaoslog-w{a.worker_id}",
                             a.security)
    limiter = RateLimiter(a.rate)
    busy: dict[int, int] = {}          # slot -> seq of its send in flight
    counter = 0
    seq = 0

    def completer(slot: int, s: int):
        def done(t: str, fields: dict[str, Any]) -> None:
            if busy.get(slot) == s:
                del busy[slot]
                out.emit(type=t, slot=slot, seq=s, **fields)
        return done

    while not stop.stopped():
        for slot in range(a.slots):
            if slot in busy or not limiter.ready():
                continue
            topic, partition = targets[counter % len(targets)]
            value = a.worker_id * VALUE_STRIDE + counter
            counter += 1
            seq += 1
            busy[slot] = seq
            out.emit(type="invoke", slot=slot, seq=seq, f="send", topic=topic,
                     partition=partition, value=value)
            producer.send(topic, partition, value, completer(slot, seq))
        producer.poll(min(0.05, limiter.wait_s()) if len(busy) < a.slots else 0.05)
        if producer.fatal:
            out.log(f"the producer stopped at a fatal error ({producer.fatal})")
            break
    # drain: let in-flight sends finish, then whatever is left is unknown
    deadline = Deadline(a.drain_s)
    while busy and not deadline.expired():
        producer.poll(0.05)
    left = dict(busy)
    for slot, s in left.items():
        out.emit(type="info", slot=slot, seq=s, error="worker-stopped")
    busy.clear()
    try:
        producer.close(1.0)
    except Exception as e:  # noqa: BLE001
        out.log(f"closing the producer: {e!r}")
    return EXIT_FATAL if producer.fatal else 0


# -- consumers -------------------------------------------------------------------------

def _start_offset(c: Any, from_beginning: bool) -> int:
    """Where a consumer starts: the partition's first offset for final reads,
    its end for live consumers (they watch new writes)."""
    wm = wait_until(lambda: c.watermarks(cached=False), 5.0, 0.25)
    if wm is None:
        return 0
    return wm[0] if from_beginning else wm[1]


def _reposition(c: Any, out: Out) -> None:
    """After OFFSET_OUT_OF_RANGE: clamp the position into [low, high]; the
    next invocation's offset shows the re-seek."""
    wm = c.watermarks(cached=False)
    if wm is None:
        return
    lo, hi = wm
    pos = c.position if c.position is not None else lo
    new = lo if pos < lo else hi
    out.log(f"{c.topic}/{c.partition}: position {pos} out of range [{lo}, {hi}], seeking to {new}")
    c.seek(new)


def run_member(a: argparse.Namespace, out: Out, stop: Stopper) -> int:
    """A member of consumer group --group: subscribe, poll, commit (--commit)."""
    from harness.workload.group import ConfluentGroupConsumer, check_member
    from harness.workload.group_aiokafka import AiokafkaGroupConsumer
    from harness.workload.group_kafka_python import KafkaPythonGroupConsumer
    try:
        check_member(a.client, a.commit)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    member_of = {"confluent": ConfluentGroupConsumer, "kafka-python": KafkaPythonGroupConsumer,
                 "aiokafka": AiokafkaGroupConsumer}[a.client]
    topics = sorted({t for t, _ in parse_partitions(a.partitions)})
    member = member_of(a.bootstrap, a.group, topics, a.commit, f"chaoslog-w{a.worker_id}",
                       lambda t, **f: out.emit(type=t, **f), a.security)
    limiter = RateLimiter(a.rate)
    while not stop.stopped():
        while not limiter.ready():
            time.sleep(min(0.05, limiter.wait_s()))
        try:
            member.poll(a.max_records, a.poll_timeout)
        except Exception as e:  # noqa: BLE001 - a poll that failed as a whole reported nothing
            out.log(f"group poll: {e!r}")
            time.sleep(0.2)
    try:
        member.close()  # (leaves the group: the others get its partitions at once)
    except Exception as e:  # noqa: BLE001
        out.log(f"closing the group consumer: {e!r}")
    return 0


def run_consumer(a: argparse.Namespace, out: Out, stop: Stopper) -> int:
    if a.group:
        return run_member(a, out, stop)
    parts = parse_partitions(a.partitions)
    consumers = [make_consumer(a.client, a.bootstrap, t, p, f"chaoslog-w{a.worker_id}-{i}",
                               a.isolation == READ_COMMITTED, a.security)
                 for i, (t, p) in enumerate(parts)]
    isolation = _isolation(a)
    for c in consumers:
        c.seek(_start_offset(c, a.from_beginning))
    limiter = RateLimiter(a.rate)
    seq = 0
    while not stop.stopped():
        for slot, c in enumerate(consumers):
            if stop.stopped():
                break
            while not limiter.ready():
                time.sleep(min(0.05, limiter.wait_s()))
            seq += 1
            out.emit(type="invoke", slot=slot, seq=seq, f="poll", topic=c.topic,
                     partition=c.partition, offset=c.position, **isolation)
            try:
                t, fields = c.poll(a.max_records, a.poll_timeout)
            except Exception as e:  # noqa: BLE001 - unknown outcome; keep going
                t, fields = "info", {"error": f"client-error: {type(e).__name__}"}
            out.emit(type=t, slot=slot, seq=seq, **isolation, **fields)
            if fields.get("error") == "OFFSET_OUT_OF_RANGE":
                _reposition(c, out)
    for c in consumers:
        try:
            c.close()
        except Exception:  # noqa: BLE001
            pass
    return 0


def run_final(a: argparse.Namespace, out: Out, stop: Stopper) -> int:
    """Read each partition from its beginning until complete, one after the other."""
    parts = parse_partitions(a.partitions)
    min_end = parse_min_end(a.min_end)
    deadline = Deadline(a.timeout)
    isolation = _isolation(a)
    seq = 0
    for slot, (topic, partition) in enumerate(parts):
        c = make_consumer(a.client, a.bootstrap, topic, partition,
                          f"chaoslog-final-{a.worker_id}-{slot}", a.isolation == READ_COMMITTED,
                          a.security)
        wm = None
        while wm is None and not deadline.expired() and not stop.stopped():
            wm = c.watermarks(cached=False)
            if wm is None:
                time.sleep(min(0.5, deadline.remaining()))
        if wm is None:
            # (the reads below then start at 0 and run into the same deadline)
            out.log(f"final read of {topic}/{partition}: no watermarks before the deadline: {c.last_error}")
        c.seek(wm[0] if wm else 0)
        want = min_end.get((topic, partition), 0)
        hw = None
        reached_hw_at = None
        complete = False
        while not deadline.expired() and not stop.stopped():
            seq += 1
            invoked_at = c.position
            out.emit(type="invoke", slot=slot, seq=seq, f="poll", topic=topic, partition=partition,
                     offset=invoked_at, final=True, **isolation)
            try:
                t, fields = c.poll(a.max_records, a.poll_timeout)
            except Exception as e:  # noqa: BLE001
                t, fields = "info", {"error": f"client-error: {type(e).__name__}"}
            if t == "ok" and fields.get("high_watermark") is None:
                wm2 = c.watermarks(cached=False)
                fields["high_watermark"] = wm2[1] if wm2 else None
            out.emit(type=t, slot=slot, seq=seq, final=True, **isolation, **fields)
            if fields.get("error") == "OFFSET_OUT_OF_RANGE":
                _reposition(c, out)
                continue
            if t != "ok" or fields.get("high_watermark") is None:
                continue
            hw = fields["high_watermark"]
            records = fields.get("records") or []
            # Every offset below hw returned, as the history shows it: a
            # record at hw - 1, or a poll from hw (at read_committed the last
            # offsets are markers, which no poll returns; the checker's rule).
            shown = (records and records[-1][0] >= hw - 1) or (
                invoked_at is not None and invoked_at >= hw)
            if c.position is not None and c.position >= hw and shown:
                # Every offset below hw has been returned. If acknowledged
                # writes went further, give the cluster --settle-s to catch
                # up before accepting this high watermark.
                if hw >= want:
                    complete = True
                    break
                reached_hw_at = reached_hw_at or time.monotonic()
                if time.monotonic() - reached_hw_at >= a.settle_s:
                    complete = True
                    break
        out.emit(type="status", topic=topic, partition=partition, complete=complete,
                 high_watermark=hw, position=c.position, min_end=want)
        try:
            c.close()
        except Exception:  # noqa: BLE001
            pass
    return 0


def security_arg(text: str) -> ClientSecurity:
    """--security: the run's settings as ClientSecurity.to_json wrote them
    (the password's source; each client reads the password when built)."""
    try:
        return ClientSecurity.from_json(json.loads(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _isolation(a: argparse.Namespace) -> dict[str, str]:
    """The `isolation` field of a poll event: written only at read_committed
    (absent means read_uncommitted: docs/history-format.md)."""
    return {"isolation": READ_COMMITTED} if a.isolation == READ_COMMITTED else {}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.workload.worker",
                                description="chaoslog workload worker (JSON lines on stdout)")
    p.add_argument("role", choices=("producer", "consumer", "final", "pipeline"))
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--client", default="confluent",
                   choices=("confluent", "kafka-python", "aiokafka", "raw"),
                   help="raw: the harness's own Fetch requests (consumers only)")
    p.add_argument("--partitions", required=True, help="TOPIC/P[,TOPIC/P...]")
    p.add_argument("--worker-id", type=int, required=True)
    p.add_argument("--duration", type=float, default=0.0, help="seconds; 0 = until stopped")
    p.add_argument("--drain-s", type=float, default=5.0)
    p.add_argument("--stdin-stop", action="store_true", help="stop when stdin closes")
    p.add_argument("--rate", type=float, default=0.0, help="ops/s for this worker; 0 = no limit")
    p.add_argument("--security", type=security_arg, default=PLAINTEXT, metavar="JSON",
                   help="the clients' security settings (ClientSecurity.to_json: the password's "
                        "source, never the password); none: plaintext")
    # producer
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--acks", default="all")
    p.add_argument("--retries", type=int, default=0)
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--max-in-flight", type=int, default=1)
    p.add_argument("--request-timeout-ms", type=int, default=5000)
    p.add_argument("--delivery-timeout-ms", type=int, default=15000)
    p.add_argument("--transactions", action="store_true",
                   help="send in transactions (confluent only): one value per slot each")
    p.add_argument("--abort-ratio", type=float, default=0.2,
                   help="with --transactions: the share of transactions aborted on purpose")
    p.add_argument("--transaction-timeout-ms", type=int, default=10000)
    # pipeline (reads --partitions as its group --group)
    p.add_argument("--output", default="", help="the pipeline's output topic")
    p.add_argument("--output-partitions", type=int, default=1)
    # consumers
    p.add_argument("--poll-timeout", type=float, default=0.2)
    p.add_argument("--max-records", type=int, default=500)
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--isolation", default="read_uncommitted",
                   choices=("read_uncommitted", READ_COMMITTED))
    p.add_argument("--group", default="", help="join this consumer group (subscribe) instead of assigning")
    p.add_argument("--commit", default="manual", choices=COMMIT_MODES,
                   help="with --group: how the member commits")
    # final reads
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--settle-s", type=float, default=10.0)
    p.add_argument("--min-end", default="", help="TOPIC/P=OFFSET,... acknowledged log ends")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    out = Out()
    stop = Stopper(a.duration, a.stdin_stop)
    run = {"producer": run_producer, "consumer": run_consumer, "final": run_final,
           "pipeline": run_pipeline}[a.role]
    try:
        return run(a, out, stop)
    except KeyboardInterrupt:
        return 0
    except Exception as e:  # noqa: BLE001 - the harness completes our ops as info
        out.log(f"worker crashed: {e!r}")
        return 1
    finally:
        out.emit(type="done")


if __name__ == "__main__":
    sys.exit(main())
