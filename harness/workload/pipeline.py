"""A consume-transform-produce pipeline in transactions (exactly-once, KIP-98),
recorded as docs/history-format.md ("Transactions") says.

Each round reads what came on the input partitions (read_committed, as a
member of the pipeline's group that assigns itself every input partition),
writes one output value per input record (`source` names the input), sends
the group's next offsets to the transaction (a groups.jsonl commit carrying
`txn`), and commits, or now and then aborts on purpose. After an abort, or
a commit whose outcome is not known, the pipeline goes back to the offsets
its group has committed, as an application does, and reads those inputs
again. So every input below the group's committed offset must have exactly
one committed output (eos-missing, eos-duplicate: docs/anomalies.md).
"""
from __future__ import annotations

import random
from typing import Any, Callable

from contracts.deadline import wait_until
from harness.security import PLAINTEXT, ClientSecurity
from harness.workload.clients import EXIT_FATAL, _poll_ok
from harness.workload.errors import canonical
from harness.workload.group import committed_offsets
from harness.workload.transactions import ConfluentTransactions, Transaction

Emit = Callable[..., None]
TP = tuple[str, int]
MAX_RECORDS = 5          # inputs per transaction (one send slot each)
STABLE_WAIT_S = 15.0     # for the last transaction's offsets to show


class ConfluentPipeline:
    """The group's consumer (read_committed) and a transactional producer."""

    def __init__(self, bootstrap: str, group: str, inputs: list[TP], transactional_id: str,
                 client_id: str, timeout_ms: int, op_timeout_s: float,
                 security: ClientSecurity = PLAINTEXT):
        from confluent_kafka import Consumer
        self.group, self.inputs = group, inputs
        self.c = Consumer({
            "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed", "enable.partition.eof": False,
            "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 3, **security.confluent_config(),
        })
        self.tx = ConfluentTransactions(bootstrap, transactional_id, client_id, timeout_ms,
                                        op_timeout_s, security)
        self.position: dict[TP, int] = {}

    @property
    def fatal(self) -> str | None:
        return self.tx.fatal

    def rewind(self) -> None:
        """Back to what the group has committed (the log start where nothing is)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
        committed = self.committed()
        start = [TopicPartition(t, p, committed.get((t, p)) if (committed.get((t, p)) or -1) >= 0
                                else OFFSET_BEGINNING) for t, p in self.inputs]
        self.c.assign(start)
        self.position = {(t, p): o for (t, p), o in committed.items() if o is not None and o >= 0}

    def read(self, timeout: float) -> dict[TP, list[list[int]]]:
        """Up to MAX_RECORDS inputs, by partition: [[offset, value], ...]."""
        out: dict[TP, list[list[int]]] = {}
        for m in self.c.consume(num_messages=MAX_RECORDS, timeout=timeout):
            if m.error() is None:
                out.setdefault((m.topic(), m.partition()), []).append(
                    [int(m.offset()), int(m.value())])
        return out

    def high_watermark(self, tp: TP) -> int | None:
        from confluent_kafka import TopicPartition
        try:
            return int(self.c.get_watermark_offsets(TopicPartition(*tp), cached=True)[1])
        except Exception:  # noqa: BLE001 - unknown: _poll_ok bounds it by the records
            return None

    def send_offsets(self, offsets: dict[TP, int]) -> tuple[str, dict[str, Any]]:
        from confluent_kafka import KafkaException, TopicPartition
        try:
            self.tx.p.send_offsets_to_transaction(
                [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                self.c.consumer_group_metadata(), self.tx.op_timeout_s)
            return "ok", {}
        except KafkaException as e:
            err = e.args[0]
            if err.fatal():
                self.tx.fatal = f"{err.name()}: {err.str()}"
            return "info", {"error": canonical(err.name())}

    def committed(self) -> dict[TP, int | None]:
        from confluent_kafka import TopicPartition
        return committed_offsets(self.c.committed([TopicPartition(t, p) for t, p in self.inputs],
                                                  timeout=self.tx.op_timeout_s))

    def close(self) -> None:
        try:
            self.tx.close(1.0)
        finally:
            self.c.close()


def run(pipe: Any, output: str, output_partitions: int, worker_id: int, value_stride: int,
        abort_ratio: float, emit: Emit, stopped: Callable[[], bool], rng: random.Random) -> int:
    """Rounds until stopped; returns the worker's exit status."""
    try:
        pipe.tx.init()
        pipe.rewind()
    except Exception as e:  # noqa: BLE001 - no coordinator yet, or fenced
        emit(type="log", msg=f"the pipeline could not start: {e!r}")
        return EXIT_FATAL
    counter = seq = txns = commits = 0
    while not stopped() and pipe.fatal is None:
        inputs = pipe.read(0.5)
        if not inputs:
            continue
        txns += 1
        txn = f"w{worker_id}/{txns}"
        pipe.tx.begin()
        for tp, records in inputs.items():      # the reads, slot 0
            seq += 1
            emit(type="invoke", slot=0, seq=seq, f="poll", topic=tp[0], partition=tp[1],
                 offset=pipe.position.get(tp), group=pipe.group, isolation="read_committed",
                 txn=txn)
            t, fields = _poll_ok(records, pipe.high_watermark(tp))
            emit(type=t, slot=0, seq=seq, txn=txn, **fields)
        sends = Transaction(txn, emit)
        slot = 0
        for (topic, partition), records in inputs.items():
            for offset, value in records:
                slot += 1
                seq += 1
                out_value = worker_id * value_stride + counter
                counter += 1
                out_partition = partition % output_partitions
                done = sends.send(slot, seq, topic=output, partition=out_partition,
                                  value=out_value, source={"topic": topic, "partition": partition,
                                                           "offset": offset, "value": value})
                pipe.tx.send(output, out_partition, out_value, done)
        pipe.tx.flush(pipe.tx.op_timeout_s)
        sends.undelivered()
        next_offsets = {tp: records[-1][0] + 1 for tp, records in inputs.items()}
        commits += 1
        listed = [{"topic": t, "partition": p, "offset": o} for (t, p), o in next_offsets.items()]
        emit(type="group", kind="commit", outcome="invoke", commit=commits, group=pipe.group,
             offsets=listed, txn=txn)
        t, fields = pipe.send_offsets(next_offsets)
        emit(type="group", kind="commit", outcome=t, commit=commits, group=pipe.group, txn=txn,
             **({"offsets": listed} if t == "ok" else fields))
        commit = t == "ok" and rng.random() >= abort_ratio
        seq += 1
        if sends.end(pipe.tx, seq, commit) == "ok" and commit:
            pipe.position.update(next_offsets)
        elif pipe.fatal is None:
            pipe.rewind()
    if pipe.fatal:
        emit(type="log", msg=f"the pipeline stopped: {pipe.fatal}")
        return EXIT_FATAL
    # What the group committed once this instance stopped (the pipeline's
    # only writer of offsets): what eos-missing and eos-duplicate judge by.
    # A transaction's offsets show once its markers are written, after
    # EndTxn's answer (docs/design.md#transactions): wait for the last
    # commit to show, a while, then record what the coordinator answers.
    try:
        committed: dict[TP, int | None] = {}

        def shows_last_commit() -> bool:
            committed.update(pipe.committed())
            return all((committed.get(tp) or -1) >= offset
                       for tp, offset in pipe.position.items())
        wait_until(shows_last_commit, STABLE_WAIT_S)
        for (topic, partition), offset in sorted(committed.items()):
            if offset is not None:
                emit(type="group", kind="committed", group=pipe.group, topic=topic,
                     partition=partition, offset=offset)
    except Exception as e:  # noqa: BLE001 - then no committed offsets: eos not judged
        emit(type="log", msg=f"reading the group's committed offsets failed: {e!r}")
    return 0
