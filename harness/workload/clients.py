"""Thin adapters over the three Kafka client libraries (confluent-kafka,
kafka-python, aiokafka), so the worker's loops are written once. Each
adapter turns the library's outcome into the history's vocabulary:
("ok", fields), ("fail", fields) or ("info", fields).

Producers: `send(topic, partition, value, done)` hands the message over and
later calls `done(type, fields)` from the worker's own thread (inside
`poll`), never from a library thread. Consumers: one adapter per partition,
assigned and positioned explicitly (no group coordination), `poll()` returns
one outcome with the records and the high watermark of that fetch. RawFetcher
is a consumer without a library: the harness's own Fetch requests.
"""
from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass
from typing import Any, Callable

from harness.security import PLAINTEXT, ClientSecurity
from harness.workload.errors import canonical, classify_send, kafka_python_name

Done = Callable[[str, dict[str, Any]], None]
CLIENTS = ("confluent", "kafka-python", "aiokafka")


@dataclass
class ProducerSettings:
    acks: str = "all"                 # 0 | 1 | all
    retries: int = 0
    idempotent: bool = False
    max_in_flight: int = 1
    request_timeout_ms: int = 5000
    delivery_timeout_ms: int = 15000

    def __post_init__(self) -> None:
        if str(self.acks) not in ("0", "1", "all", "-1"):
            raise ValueError(f"acks is 0, 1 or all, not {self.acks!r}")
        self.acks = "all" if str(self.acks) == "-1" else str(self.acks)
        if self.idempotent and self.retries == 0:
            # Both libraries insist on retries with idempotence.
            self.retries = 2**31 - 1
        if self.delivery_timeout_ms < self.request_timeout_ms:
            self.delivery_timeout_ms = self.request_timeout_ms


def _acks_done(acks: str, offset: int | None) -> tuple[str, dict[str, Any]]:
    """A success callback. With acks=0 nothing was acknowledged: unknown."""
    if acks == "0" or offset is None or offset < 0:
        return "info", {"error": "no-acknowledgement"}
    return "ok", {"offset": int(offset)}


def _poll_ok(records: list[list[int]], hw: int | None) -> tuple[str, dict[str, Any]]:
    """An ok poll must carry a high watermark. If the client cannot say, a
    poll that returned records still proves the watermark was past its last
    offset (consumers only see committed data), so that bound is recorded;
    a poll with nothing and no watermark taught us nothing: fail."""
    if hw is None:
        if not records:
            return "fail", {"error": "no-high-watermark"}
        hw = records[-1][0] + 1
    return "ok", {"records": records, "high_watermark": hw}


# A producer worker's exit status after a fatal client error: the harness
# starts a new instance in its place (harness/workload/runner.py).
EXIT_FATAL = 3


# -- confluent-kafka -------------------------------------------------------------------

class ConfluentProducer:
    def __init__(self, bootstrap: str, s: ProducerSettings, client_id: str,
                 security: ClientSecurity = PLAINTEXT):
        from confluent_kafka import Producer
        self.s = s
        # librdkafka's fatal error, once one came: the instance sends nothing more.
        self.fatal: str | None = None
        self.p = Producer({
            "bootstrap.servers": bootstrap, "client.id": client_id,
            "acks": s.acks, "retries": s.retries, "enable.idempotence": s.idempotent,
            "max.in.flight.requests.per.connection": s.max_in_flight,
            "request.timeout.ms": s.request_timeout_ms, "message.timeout.ms": s.delivery_timeout_ms,
            "linger.ms": 0, "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 3, **security.confluent_config(),
        })

    def send(self, topic: str, partition: int, value: int, done: Done) -> None:
        from confluent_kafka import KafkaException

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                done(*_acks_done(self.s.acks, msg.offset()))
            else:
                self._note_fatal(err)
                t, name = classify_send(err.name(), single_attempt=False)
                done(t, {"error": name})

        try:
            self.p.produce(topic, value=str(value).encode(), partition=partition, on_delivery=delivered)
        except BufferError:
            done("fail", {"error": "_QUEUE_FULL"})
        except KafkaException as e:
            self._note_fatal(e.args[0])
            t, name = classify_send(e.args[0].name(), single_attempt=False, never_sent=True)
            done(t, {"error": name})

    def _note_fatal(self, err: Any) -> None:
        if self.fatal is None and err.fatal():
            self.fatal = f"{err.name()}: {err.str()}"

    def poll(self, timeout: float) -> None:
        from confluent_kafka import KafkaException
        try:
            self.p.poll(timeout)
        except KafkaException as e:   # a fatal error is raised here once (no error_cb)
            if not e.args[0].fatal():
                raise
            self._note_fatal(e.args[0])

    def close(self, timeout: float) -> int:
        """Flush what is in flight (callbacks fire); returns messages left."""
        return self.p.flush(timeout)


class ConfluentConsumer:
    def __init__(self, bootstrap: str, topic: str, partition: int, client_id: str,
                 read_committed: bool = False, security: ClientSecurity = PLAINTEXT):
        from confluent_kafka import Consumer, TopicPartition
        self.topic, self.partition = topic, partition
        self.read_committed = read_committed
        self.c = Consumer({
            "bootstrap.servers": bootstrap, "client.id": client_id,
            "group.id": f"chaoslog-{client_id}",  # required, never used: we assign
            "enable.auto.commit": False, "auto.offset.reset": "error",
            "enable.partition.eof": False, "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 2000, "log_level": 3,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            **security.confluent_config(),
        })
        self._tp = TopicPartition
        self.position: int | None = None
        self.last_error: str | None = None  # why the last watermarks() gave None

    def seek(self, offset: int) -> None:
        tp = self._tp(self.topic, self.partition, offset)
        if self.position is None:
            self.c.assign([tp])
        else:
            try:
                self.c.seek(tp)
            except Exception:  # noqa: BLE001 - not yet fetching: re-assign
                self.c.assign([tp])
        self.position = offset

    def watermarks(self, cached: bool, timeout: float = 5.0) -> tuple[int, int] | None:
        try:
            lo, hi = self.c.get_watermark_offsets(self._tp(self.topic, self.partition),
                                                  timeout=timeout, cached=cached)
        except Exception as e:  # noqa: BLE001 - unknown right now
            self.last_error = f"{type(e).__name__}: {e}"
            return None
        if lo is None or hi is None or hi < 0:
            self.last_error = f"watermarks ({lo}, {hi})"
            return None
        return int(lo), int(hi)

    def poll(self, max_records: int, timeout: float) -> tuple[str, dict[str, Any]]:
        try:
            msgs = self.c.consume(num_messages=max_records, timeout=timeout)
        except Exception as e:  # noqa: BLE001
            return "fail", {"error": canonical(type(e).__name__)}
        records, errors = [], []
        for m in msgs:
            err = m.error()
            if err is not None:
                errors.append(err.name())
            elif m.topic() == self.topic and m.partition() == self.partition:
                records.append([int(m.offset()), int(m.value())])
        if records:
            self.position = records[-1][0] + 1
        if self.read_committed:
            _follow(self, self.c.position([self._tp(self.topic, self.partition)])[0].offset)
        if not records and errors:
            if "_AUTO_OFFSET_RESET" in errors or "OFFSET_OUT_OF_RANGE" in errors:
                return "fail", {"error": "OFFSET_OUT_OF_RANGE"}
            return "fail", {"error": canonical(errors[0])}
        wm = self.watermarks(cached=True) or self.watermarks(cached=False, timeout=2.0)
        return _poll_ok(records, wm[1] if wm else None)

    def close(self) -> None:
        self.c.close()


def _follow(consumer: Any, library_position: int | None) -> None:
    """At read_committed the library's position passes what it returns no
    record for (markers, aborted records): the next poll starts there."""
    if library_position is not None and library_position >= 0 and (
            consumer.position is None or library_position > consumer.position):
        consumer.position = int(library_position)


# -- kafka-python ----------------------------------------------------------------------

class KafkaPythonProducer:
    fatal: str | None = None       # no fatal errors of its own

    def __init__(self, bootstrap: str, s: ProducerSettings, client_id: str,
                 security: ClientSecurity = PLAINTEXT):
        from kafka import KafkaProducer
        self.s = s
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self.p = KafkaProducer(
            bootstrap_servers=bootstrap.split(","), client_id=client_id,
            acks={"all": "all", "1": 1, "0": 0}[s.acks], retries=s.retries,
            enable_idempotence=s.idempotent, max_in_flight_requests_per_connection=s.max_in_flight,
            request_timeout_ms=s.request_timeout_ms, delivery_timeout_ms=s.delivery_timeout_ms,
            linger_ms=0, retry_backoff_ms=100, metadata_max_age_ms=2000,
            **security.kafka_python_kwargs())

    def send(self, topic: str, partition: int, value: int, done: Done) -> None:
        try:
            fut = self.p.send(topic, value=str(value).encode(), partition=partition)
        except Exception as e:  # noqa: BLE001 - raised before the message was accepted
            t, name = classify_send(kafka_python_name(e), single_attempt=self.s.retries == 0,
                                    never_sent=True)
            done(t, {"error": name})
            return
        # Library thread -> our queue; `poll` completes ops on the worker's thread.
        fut.add_callback(lambda md: self._done.put((done, _acks_done(self.s.acks, md.offset))))
        fut.add_errback(lambda e: self._done.put(
            (done, _error_outcome(e, self.s.retries))))

    def poll(self, timeout: float) -> None:
        try:
            item = self._done.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            done, (t, fields) = item
            done(t, fields)
            try:
                item = self._done.get_nowait()
            except queue.Empty:
                return

    def close(self, timeout: float) -> int:
        try:
            self.p.flush(timeout=timeout)
        except Exception:  # noqa: BLE001
            pass
        self.poll(0)
        try:
            self.p.close(timeout=1)
        except Exception:  # noqa: BLE001
            pass
        return 0


def _error_outcome(e: BaseException, retries: int) -> tuple[str, dict[str, Any]]:
    t, name = classify_send(kafka_python_name(e), single_attempt=retries == 0)
    return t, {"error": name}


class KafkaPythonConsumer:
    def __init__(self, bootstrap: str, topic: str, partition: int, client_id: str,
                 read_committed: bool = False, security: ClientSecurity = PLAINTEXT):
        from kafka import KafkaConsumer, TopicPartition
        self.topic, self.partition = topic, partition
        self.read_committed = read_committed
        self.tp = TopicPartition(topic, partition)
        self.c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), client_id=client_id,
                               group_id=None, enable_auto_commit=False, auto_offset_reset="none",
                               fetch_max_wait_ms=100, metadata_max_age_ms=2000,
                               isolation_level="read_committed" if read_committed
                               else "read_uncommitted", **security.kafka_python_kwargs())
        self.c.assign([self.tp])
        self.position: int | None = None
        self.last_error: str | None = None  # why the last watermarks() gave None

    def seek(self, offset: int) -> None:
        self.c.seek(self.tp, offset)
        self.position = offset

    def watermarks(self, cached: bool, timeout: float = 5.0) -> tuple[int, int] | None:
        try:
            if cached:
                hi = self.c.highwater(self.tp)
                return (0, int(hi)) if hi is not None else None
            lo = self.c.beginning_offsets([self.tp], timeout_ms=int(timeout * 1000))[self.tp]
            hi = self.c.end_offsets([self.tp], timeout_ms=int(timeout * 1000))[self.tp]
            return int(lo), int(hi)
        except Exception as e:  # noqa: BLE001
            self.last_error = f"{type(e).__name__}: {e}"
            return None

    def poll(self, max_records: int, timeout: float) -> tuple[str, dict[str, Any]]:
        try:
            batch = self.c.poll(timeout_ms=int(timeout * 1000), max_records=max_records)
        except Exception as e:  # noqa: BLE001
            name = kafka_python_name(e)
            if name in ("OFFSET_OUT_OF_RANGE", "NoOffsetForPartitionError", "OffsetOutOfRangeError"):
                name = "OFFSET_OUT_OF_RANGE"
            return "fail", {"error": canonical(name)}
        records = [[int(r.offset), int(r.value)] for r in batch.get(self.tp, [])]
        if records:
            self.position = records[-1][0] + 1
        if self.read_committed:
            _follow(self, self.c.position(self.tp))
        hi = self.c.highwater(self.tp)
        if hi is None:
            wm = self.watermarks(cached=False, timeout=2.0)
            hi = wm[1] if wm else None
        return _poll_ok(records, int(hi) if hi is not None else None)

    def close(self) -> None:
        self.c.close()


# -- aiokafka --------------------------------------------------------------------------

class AiokafkaProducer:
    """aiokafka driven from the worker's thread: the adapter owns an event
    loop and runs it only inside `poll` and `close` (`send` only adds a
    task), so completions arrive on the worker's thread, inside `poll`.
    aiokafka has no retries setting: it retries a batch until its
    request_timeout_ms (given the delivery timeout here) is spent, and sends
    one batch per partition at a time, so its state refusals are `info`."""
    fatal: str | None = None       # no fatal errors of its own

    def __init__(self, bootstrap: str, s: ProducerSettings, client_id: str,
                 security: ClientSecurity = PLAINTEXT):
        from aiokafka import AIOKafkaProducer
        self.s = s
        self.loop = asyncio.new_event_loop()
        self.sends: dict[Any, Done] = {}     # task -> its completion

        async def start() -> Any:
            p = AIOKafkaProducer(
                bootstrap_servers=bootstrap, client_id=client_id,
                acks={"all": "all", "1": 1, "0": 0}[s.acks], enable_idempotence=s.idempotent,
                request_timeout_ms=s.delivery_timeout_ms, linger_ms=0, retry_backoff_ms=100,
                metadata_max_age_ms=2000, **security.aiokafka_kwargs())
            await p.start()
            return p
        self.p = self.loop.run_until_complete(start())

    async def _send(self, topic: str, partition: int, value: int) -> tuple[str, dict[str, Any]]:
        try:
            delivered = await self.p.send(topic, value=str(value).encode(), partition=partition)
        except Exception as e:  # noqa: BLE001 - raised before the message was accepted
            t, name = classify_send(kafka_python_name(e), single_attempt=False, never_sent=True)
            return t, {"error": name}
        try:
            md = await delivered
        except Exception as e:  # noqa: BLE001
            t, name = classify_send(kafka_python_name(e), single_attempt=False)
            return t, {"error": name}
        return _acks_done(self.s.acks, md.offset)

    def send(self, topic: str, partition: int, value: int, done: Done) -> None:
        self.sends[self.loop.create_task(self._send(topic, partition, value))] = done

    def poll(self, timeout: float) -> None:
        """Run the loop until a send completes or `timeout` passes; report
        what completed."""
        if self.sends:
            self.loop.run_until_complete(asyncio.wait(list(self.sends), timeout=timeout,
                                                      return_when=asyncio.FIRST_COMPLETED))
        else:
            self.loop.run_until_complete(asyncio.sleep(timeout))
        for task in [t for t in self.sends if t.done()]:
            self.sends.pop(task)(*task.result())

    def close(self, timeout: float) -> int:
        try:
            self.loop.run_until_complete(asyncio.wait_for(self.p.stop(), timeout))
        except Exception:  # noqa: BLE001
            pass
        finally:
            self.loop.close()
        return 0


class AiokafkaConsumer:
    """One partition, assigned, read by aiokafka on an event loop of its own
    that runs only inside this adapter's calls."""

    def __init__(self, bootstrap: str, topic: str, partition: int, client_id: str,
                 read_committed: bool = False, security: ClientSecurity = PLAINTEXT):
        from aiokafka import AIOKafkaConsumer, TopicPartition
        self.topic, self.partition = topic, partition
        self.read_committed = read_committed
        self.tp = TopicPartition(topic, partition)
        self.loop = asyncio.new_event_loop()

        async def start() -> Any:
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="none",
                                 fetch_max_wait_ms=100, metadata_max_age_ms=2000,
                                 isolation_level="read_committed" if read_committed
                                 else "read_uncommitted", **security.aiokafka_kwargs())
            await c.start()
            c.assign([self.tp])
            return c
        self.c = self.loop.run_until_complete(start())
        self.position: int | None = None
        self.last_error: str | None = None  # why the last watermarks() gave None

    def seek(self, offset: int) -> None:
        self.c.seek(self.tp, offset)
        self.position = offset

    def watermarks(self, cached: bool, timeout: float = 5.0) -> tuple[int, int] | None:
        try:
            if cached:
                hi = self.c.highwater(self.tp)
                return (0, int(hi)) if hi is not None else None

            async def both() -> tuple[int, int]:
                lo = (await self.c.beginning_offsets([self.tp]))[self.tp]
                hi = (await self.c.end_offsets([self.tp]))[self.tp]
                return int(lo), int(hi)
            return self.loop.run_until_complete(asyncio.wait_for(both(), timeout))
        except Exception as e:  # noqa: BLE001
            self.last_error = f"{type(e).__name__}: {e}"
            return None

    def poll(self, max_records: int, timeout: float) -> tuple[str, dict[str, Any]]:
        try:
            batch = self.loop.run_until_complete(self.c.getmany(
                self.tp, timeout_ms=int(timeout * 1000), max_records=max_records))
        except Exception as e:  # noqa: BLE001
            return "fail", {"error": canonical(kafka_python_name(e))}
        records = [[int(r.offset), int(r.value)] for r in batch.get(self.tp, [])]
        if records:
            self.position = records[-1][0] + 1
        if self.read_committed:
            _follow(self, self.loop.run_until_complete(self.c.position(self.tp)))
        hi = self.c.highwater(self.tp)
        if hi is None:
            wm = self.watermarks(cached=False, timeout=2.0)
            hi = wm[1] if wm else None
        return _poll_ok(records, int(hi) if hi is not None else None)

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.c.stop())
        finally:
            self.loop.close()


def make_producer(client: str, bootstrap: str, s: ProducerSettings, client_id: str,
                  security: ClientSecurity = PLAINTEXT) -> Any:
    if client == "confluent":
        return ConfluentProducer(bootstrap, s, client_id, security)
    if client == "kafka-python":
        return KafkaPythonProducer(bootstrap, s, client_id, security)
    if client == "aiokafka":
        return AiokafkaProducer(bootstrap, s, client_id, security)
    raise ValueError(f"unknown client {client!r}: {', '.join(CLIENTS)}")


def make_consumer(client: str, bootstrap: str, topic: str, partition: int, client_id: str,
                  read_committed: bool = False, security: ClientSecurity = PLAINTEXT) -> Any:
    """A consumer of `client`; "raw" is the harness's own fetcher (RawFetcher),
    which reads uncommitted only."""
    if client == "raw":
        if read_committed:
            raise ValueError("the raw fetcher reads at read_uncommitted only")
        return RawFetcher(bootstrap, topic, partition, client_id, security)
    if client == "confluent":
        return ConfluentConsumer(bootstrap, topic, partition, client_id, read_committed, security)
    if client == "kafka-python":
        return KafkaPythonConsumer(bootstrap, topic, partition, client_id, read_committed, security)
    if client == "aiokafka":
        return AiokafkaConsumer(bootstrap, topic, partition, client_id, read_committed, security)
    raise ValueError(f"unknown client {client!r}: {', '.join(CLIENTS)}")


# -- the protocol itself ---------------------------------------------------------------

NOT_AN_INTEGER = -1  # a record value that is not a decimal integer (never a value we sent)


class RawFetcher:
    """A consumer that sends Fetch requests itself (harness/kafka_wire.py) to
    the partition's leader, so that each poll reports exactly what one fetch
    response said: its records, high watermark and log start offset. The
    checker holds such polls to the committed-read rule
    (docs/history-format.md, `log_start_offset`)."""

    def __init__(self, bootstrap: str, topic: str, partition: int, client_id: str,
                 security: ClientSecurity = PLAINTEXT):
        self.bootstrap = [tuple(a.rsplit(":", 1)) for a in bootstrap.split(",")]
        self.topic, self.partition = topic, partition
        self.client_id = client_id
        self.security = security
        self.position: int | None = None
        self.last_error: str | None = None
        self._conn: Any = None

    def _leader(self) -> Any:
        """A connection to the partition's leader, as some broker's Metadata says."""
        from harness import kafka_wire as kw
        if self._conn is not None:
            return self._conn
        for host, port in self.bootstrap:
            try:
                c = kw.KafkaConnection(host, int(port), client_id=self.client_id, timeout=5,
                                       security=self.security)
                try:
                    md = kw.metadata(c, [self.topic])
                finally:
                    c.close()
            except kw.WireError:
                continue
            p = md.partitions.get((self.topic, self.partition))
            if p is None or p.leader not in md.brokers:
                continue
            self._conn = kw.KafkaConnection(*md.brokers[p.leader], client_id=self.client_id,
                                            timeout=10, security=self.security)
            return self._conn
        raise kw.WireError(f"no broker names a leader of {self.topic}/{self.partition}")

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def seek(self, offset: int) -> None:
        self.position = offset

    def watermarks(self, cached: bool = False, timeout: float = 5.0) -> tuple[int, int] | None:
        from harness import kafka_wire as kw
        try:
            conn = self._leader()
            (e1, lo), (e2, hi) = (kw.list_offset(conn, self.topic, self.partition, -2),
                                  kw.list_offset(conn, self.topic, self.partition, -1))
        except kw.WireError as e:
            self._drop()
            self.last_error = str(e)
            return None
        if e1 or e2:
            self._drop()
            self.last_error = f"ListOffsets errors {e1}, {e2}"
            return None
        return lo, hi

    def poll(self, max_records: int, timeout: float) -> tuple[str, dict[str, Any]]:
        from kafka.errors import for_code

        from harness import kafka_wire as kw
        if self.position is None:
            return "fail", {"error": "no-position"}
        try:
            r = kw.fetch(self._leader(), self.topic, self.partition, self.position,
                         max_wait_ms=int(timeout * 1000))
        except kw.WireError:
            self._drop()
            return "fail", {"error": "connection"}
        if r.error:
            self._drop()
            return "fail", {"error": canonical(getattr(for_code(r.error), "message", str(r.error)))}
        records = [[o, _int_or(v)] for o, v in r.records[:max_records]]
        if records:
            self.position = records[-1][0] + 1
        fields: dict[str, Any] = {"records": records, "high_watermark": r.high_watermark}
        if r.log_start_offset is not None:
            fields["log_start_offset"] = r.log_start_offset
        return "ok", fields

    def close(self) -> None:
        self._drop()


def _int_or(raw: bytes | None) -> int:
    try:
        return int(raw) if raw is not None else NOT_AN_INTEGER
    except ValueError:
        return NOT_AN_INTEGER
