"""The transactional producers' loop (KIP-98), confluent-kafka's and
aiokafka's: each transaction sends a few
values, one per logical process, then commits or (now and then, on
purpose) aborts, and records how it ended (docs/history-format.md,
"Transactions").

The history's rules hold as for plain sends: a send is `ok` when the broker
acknowledged it (its value is visible only if its transaction commits), and
a transaction's `txn` op is `ok` when it ended as intended, `fail` when it
certainly did not commit, `info` when nobody can tell. librdkafka's error
classes decide: a retriable error is tried again until the deadline; an
abortable one is followed by an abort, and only an abort that succeeds
proves the transaction did not commit; a fatal one (a fenced producer)
leaves the outcome unknown and stops the instance, which the harness
replaces (a new instance of the same transactional id fences this one).
"""
from __future__ import annotations

import random
from typing import Any, Callable

from contracts.deadline import Deadline
from harness.security import PLAINTEXT, ClientSecurity
from harness.workload.clients import EXIT_FATAL
from harness.workload.errors import canonical, classify_send

Emit = Callable[..., None]


class ConfluentTransactions:
    """A confluent-kafka transactional producer, one transaction at a time."""

    def __init__(self, bootstrap: str, transactional_id: str, client_id: str,
                 timeout_ms: int, op_timeout_s: float, security: ClientSecurity = PLAINTEXT):
        from confluent_kafka import Producer
        self.op_timeout_s = op_timeout_s
        self.p = Producer({
            "bootstrap.servers": bootstrap, "client.id": client_id,
            "transactional.id": transactional_id, "transaction.timeout.ms": timeout_ms,
            "linger.ms": 0, "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 3, **security.confluent_config(),
        })
        self.fatal: str | None = None

    def init(self) -> None:
        self.p.init_transactions(self.op_timeout_s)

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: int,
             done: Callable[[str, dict[str, Any]], None]) -> None:
        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                done("ok", {"offset": int(msg.offset())})
            else:
                done(*_send_outcome(err.name()))
        try:
            self.p.produce(topic, value=str(value).encode(), partition=partition,
                           on_delivery=delivered)
        except BufferError:
            done("fail", {"error": "_QUEUE_FULL"})
        except Exception as e:  # noqa: BLE001 - KafkaException: not handed over
            done(*classify_send(_name(e), single_attempt=False, never_sent=True))

    def flush(self, timeout: float) -> int:
        return self.p.flush(timeout)

    def end(self, commit: bool) -> tuple[str, dict[str, Any]]:
        """Commit or abort the open transaction: (outcome, fields)."""
        from confluent_kafka import KafkaException
        deadline = Deadline(self.op_timeout_s)
        while True:
            try:
                if commit:
                    self.p.commit_transaction(max(0.1, deadline.remaining()))
                else:
                    self.p.abort_transaction(max(0.1, deadline.remaining()))
                return "ok", {}
            except KafkaException as e:
                err = e.args[0]
                if err.fatal():
                    self.fatal = f"{err.name()}: {err.str()}"
                    return "info", {"error": canonical(err.name())}
                if err.retriable() and not deadline.expired():
                    continue
                if commit and err.txn_requires_abort():
                    return self._abort_after(err.name())
                return "info", {"error": canonical(err.name())}

    def _abort_after(self, why: str) -> tuple[str, dict[str, Any]]:
        """The commit failed with an abortable error: if the abort succeeds,
        the transaction certainly did not commit."""
        outcome, fields = self.end(commit=False)
        if outcome == "ok":
            return "fail", {"error": canonical(why)}
        return "info", {"error": canonical(why)}

    def close(self, timeout: float) -> None:
        self.p.flush(timeout)


class AiokafkaTransactions:
    """aiokafka's transactional producer, one transaction at a time, driven
    from the worker's thread on an event loop of its own (as
    clients.AiokafkaProducer). aiokafka has no error classes of librdkafka's
    kind: a fenced producer is fatal, any other failed commit is followed
    by an abort, and only an abort that succeeds proves it did not commit."""

    def __init__(self, bootstrap: str, transactional_id: str, client_id: str,
                 timeout_ms: int, op_timeout_s: float, security: ClientSecurity = PLAINTEXT):
        import asyncio
        self.op_timeout_s = op_timeout_s
        self.loop = asyncio.new_event_loop()
        self.fatal: str | None = None
        self.sends: dict[Any, Callable[[str, dict[str, Any]], None]] = {}
        self._settings = dict(bootstrap_servers=bootstrap, client_id=client_id,
                              transactional_id=transactional_id,
                              transaction_timeout_ms=timeout_ms,
                              request_timeout_ms=int(op_timeout_s * 1000), linger_ms=0,
                              retry_backoff_ms=100, metadata_max_age_ms=2000,
                              **security.aiokafka_kwargs())
        self.p: Any = None

    def _run(self, coro: Any) -> Any:
        import asyncio
        return self.loop.run_until_complete(asyncio.wait_for(coro, self.op_timeout_s))

    def init(self) -> None:
        from aiokafka import AIOKafkaProducer

        async def start() -> Any:
            p = AIOKafkaProducer(**self._settings)
            await p.start()            # InitProducerId for the transactional id
            return p
        self.p = self._run(start())

    def begin(self) -> None:
        self._run(self.p.begin_transaction())

    def send(self, topic: str, partition: int, value: int,
             done: Callable[[str, dict[str, Any]], None]) -> None:
        from harness.workload.errors import kafka_python_name

        async def one() -> tuple[str, dict[str, Any]]:
            try:
                delivered = await self.p.send(topic, value=str(value).encode(),
                                              partition=partition)
            except Exception as e:  # noqa: BLE001 - not accepted
                t, name = classify_send(kafka_python_name(e), single_attempt=False,
                                        never_sent=True)
                return t, {"error": name}
            try:
                return "ok", {"offset": int((await delivered).offset)}
            except Exception as e:  # noqa: BLE001
                return _send_outcome(kafka_python_name(e))
        self.sends[self.loop.create_task(one())] = done

    def flush(self, timeout: float) -> int:
        import asyncio
        if self.sends:
            self.loop.run_until_complete(asyncio.wait(list(self.sends), timeout=timeout))
        for task in [t for t in self.sends if t.done()]:
            self.sends.pop(task)(*task.result())
        return len(self.sends)

    def end(self, commit: bool) -> tuple[str, dict[str, Any]]:
        from aiokafka.errors import ProducerFenced

        from harness.workload.errors import kafka_python_name
        try:
            self._run(self.p.commit_transaction() if commit else self.p.abort_transaction())
            return "ok", {}
        except ProducerFenced as e:
            self.fatal = f"ProducerFenced: {e}"
            return "info", {"error": "PRODUCER_FENCED"}
        except Exception as e:  # noqa: BLE001
            why = canonical(kafka_python_name(e))
            if not commit:
                return "info", {"error": why}
        try:
            self._run(self.p.abort_transaction())
            return "fail", {"error": why}
        except Exception:  # noqa: BLE001 - then nobody can tell
            return "info", {"error": why}

    def close(self, timeout: float) -> None:
        import asyncio
        try:
            if self.p is not None:
                self.loop.run_until_complete(asyncio.wait_for(self.p.stop(), timeout))
        except Exception:  # noqa: BLE001
            pass
        finally:
            self.loop.close()


class Transaction:
    """What one transaction records: its sends, one in flight per slot, each
    completed once (those never delivered as unknown), then its txn op on
    slot 0 (docs/history-format.md, "Transactions")."""

    def __init__(self, txn: str, emit: Emit):
        self.txn, self.emit = txn, emit
        self.open: dict[int, int] = {}     # slot -> seq of its send in flight

    def send(self, slot: int, seq: int, **fields: Any) -> Callable[[str, dict[str, Any]], None]:
        """Record a send's invocation; returns what completes it."""
        self.open[slot] = seq
        self.emit(type="invoke", slot=slot, seq=seq, f="send", txn=self.txn, **fields)

        def done(t: str, result: dict[str, Any]) -> None:
            if self.open.get(slot) == seq:
                del self.open[slot]
                self.emit(type=t, slot=slot, seq=seq, txn=self.txn, **result)
        return done

    def undelivered(self) -> None:
        """After the producer's flush: what is still in flight is unknown."""
        for slot, seq in list(self.open.items()):
            self.emit(type="info", slot=slot, seq=seq, txn=self.txn, error="not-delivered")
        self.open.clear()

    def end(self, producer: Any, seq: int, commit: bool) -> str:
        """Commit or abort through `producer`, recorded; the outcome."""
        intent = "commit" if commit else "abort"
        self.emit(type="invoke", slot=0, seq=seq, f="txn", txn=self.txn, intent=intent)
        t, fields = producer.end(commit)
        self.emit(type=t, slot=0, seq=seq, txn=self.txn, intent=intent, **fields)
        return t


def _name(e: BaseException) -> str:
    args = getattr(e, "args", ())
    return args[0].name() if args and hasattr(args[0], "name") else type(e).__name__


def _send_outcome(name: str) -> tuple[str, dict[str, Any]]:
    t, error = classify_send(name, single_attempt=False)
    return t, {"error": error}


def run(producer: Any, targets: list[tuple[str, int]], slots: int, worker_id: int,
        value_stride: int, abort_ratio: float, emit: Emit, stopped: Callable[[], bool],
        rng: random.Random, pace: Callable[[], None] = lambda: None) -> int:
    """Transactions until stopped: each sends one value on each of `slots`
    logical processes (partitions drawn from `targets`), waits for them,
    then commits, or aborts with probability `abort_ratio`. `pace` returns
    when the next send may go (the worker's rate). Returns the worker's
    exit status."""
    counter = seq = txns = 0
    try:
        producer.init()
    except Exception as e:  # noqa: BLE001 - no coordinator yet, or fenced
        emit(type="log", msg=f"init_transactions failed: {e!r}")
        return EXIT_FATAL
    while not stopped() and producer.fatal is None:
        txns += 1
        txn = Transaction(f"w{worker_id}/{txns}", emit)
        try:
            producer.begin()
        except Exception as e:  # noqa: BLE001
            emit(type="log", msg=f"begin_transaction failed: {e!r}")
            break
        for slot in range(slots):
            pace()
            topic, partition = targets[rng.randrange(len(targets))]
            value = worker_id * value_stride + counter
            counter += 1
            seq += 1
            done = txn.send(slot, seq, topic=topic, partition=partition, value=value)
            producer.send(topic, partition, value, done)
        producer.flush(producer.op_timeout_s)
        txn.undelivered()
        seq += 1
        txn.end(producer, seq, commit=rng.random() >= abort_ratio)
    if producer.fatal:
        emit(type="log", msg=f"the transactional producer stopped: {producer.fatal}")
        return EXIT_FATAL
    return 0
