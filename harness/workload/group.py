"""Consumers in a consumer group: `subscribe()`, poll, commit (--sub-via subscribe).

Every consumer worker of a run joins one group and lets the coordinator
assign it partitions. What it sees goes out as the worker's JSON lines:

  * polls, as ordinary history polls: one op per partition that a poll
    returned records of (a library poll spans partitions; the history's polls
    do not), `offset` the position it read that partition from, `group` set;
  * `group` lines for groups.jsonl (docs/history-format.md): `assign` (the
    partitions and the position each starts from: the committed offset an
    OffsetFetch gave, else the log start), `revoke`, and each `commit`
    attempt as invoke and outcome with the offsets per partition.

Each assignment polls under a new slot (a new logical process), so that a
re-read from a commit after a rebalance is a fresh sequence for the
nonmonotonic-poll and poll-skip checks.

confluent-kafka only: kafka-python's group client is not wired up.
"""
from __future__ import annotations

from typing import Any, Callable

from harness.workload.clients import _poll_ok
from harness.workload.errors import canonical
from reports.groups import NO_OFFSET

COMMIT_MODES = ("auto", "manual", "none")
SUB_VIA = ("assign", "subscribe")
GROUP_CLIENTS = ("confluent",)
# Commit refusals that mean the coordinator did not store the offsets.
COMMIT_REFUSALS = frozenset({"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS",
                             "_ASSIGNMENT_LOST"})

Emit = Callable[..., None]


def _tp_list(parts: Any) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset}
            for tp in parts if tp.offset is not None and tp.offset >= 0]


class ConfluentGroupConsumer:
    """One member of `group`, subscribed to `topics`; `emit(type, **fields)`
    writes a worker line. Polls and commits happen on the caller's thread,
    rebalance callbacks inside `poll`."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], commit: str,
                 client_id: str, emit: Emit):
        from confluent_kafka import Consumer, TopicPartition
        self._tp = TopicPartition
        self.emit = emit
        self.group, self.commit_mode = group, commit
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": group,
            "enable.auto.commit": commit == "auto", "auto.commit.interval.ms": 1000,
            # Offsets are stored for the auto-commit only after the records
            # were reported, so a commit never covers a record the history lacks.
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "enable.partition.eof": False, "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 2000, "log_level": 3,
        }
        if commit == "auto":
            conf["on_commit"] = self._auto_committed
        self.c = Consumer(conf)
        self.slot = 0                       # one logical process per assignment
        self.seq = 0
        self.commits = 0
        self.position: dict[tuple[str, int], int | None] = {}  # assigned partitions
        self.c.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked,
                         on_lost=self._lost)

    # -- rebalances (called inside consume) ------------------------------------------------

    def _assigned(self, consumer: Any, parts: list[Any]) -> None:
        """Start each partition at what the coordinator says is committed (the
        log start when nothing is), and record that position."""
        try:
            committed = {(tp.topic, tp.partition): tp.offset
                         for tp in consumer.committed(parts, timeout=10)}
        except Exception as e:  # noqa: BLE001 - unknown: the library fetches it itself
            self.emit("log", msg=f"committed offsets unknown: {e!r}")
            committed = {}
        self.slot += 1
        out = []
        for tp in parts:
            key = (tp.topic, tp.partition)
            got = committed.get(key)
            if got is None:
                position = None           # (the library fetches the commit itself)
            else:
                position = got if got >= 0 else self._log_start(tp)
            if position is not None:
                tp.offset = position
            self.position[key] = position
            out.append({"topic": tp.topic, "partition": tp.partition, "position": position,
                        "committed": None if got is None else (got if got >= 0 else NO_OFFSET)})
        consumer.assign(parts)
        self.emit("group", kind="assign", group=self.group, partitions=out)

    def _log_start(self, tp: Any) -> int | None:
        try:
            lo, _hi = self.c.get_watermark_offsets(self._tp(tp.topic, tp.partition), timeout=5)
            return int(lo) if lo is not None and lo >= 0 else None
        except Exception:  # noqa: BLE001
            return None

    def _revoked(self, consumer: Any, parts: list[Any], lost: bool = False) -> None:
        for tp in parts:
            self.position.pop((tp.topic, tp.partition), None)
        self.emit("group", kind="revoke", group=self.group, lost=lost,
                  partitions=[{"topic": tp.topic, "partition": tp.partition} for tp in parts])
        consumer.unassign()

    def _lost(self, consumer: Any, parts: list[Any]) -> None:
        self._revoked(consumer, parts, lost=True)

    # -- polls and commits -----------------------------------------------------------------

    def poll(self, max_records: int, timeout: float) -> None:
        """One library poll: its records as one history poll per partition,
        then (manual) a synchronous commit of what they reached."""
        msgs = self.c.consume(num_messages=max_records, timeout=timeout)
        by_tp: dict[tuple[str, int], list[list[int]]] = {}
        for m in msgs:
            if m.error() is not None:
                self.emit("log", msg=f"poll error {m.error().name()}")
            elif (m.topic(), m.partition()) in self.position:
                by_tp.setdefault((m.topic(), m.partition()), []).append(
                    [int(m.offset()), int(m.value())])
        for (topic, partition), records in by_tp.items():
            self.seq += 1
            self.emit("invoke", slot=self.slot, seq=self.seq, f="poll", topic=topic,
                      partition=partition, offset=self.position[(topic, partition)],
                      group=self.group)
            lo_hi = self._watermarks(topic, partition)
            t, fields = _poll_ok(records, lo_hi[1] if lo_hi else None)
            self.emit(t, slot=self.slot, seq=self.seq, **fields)
            self.position[(topic, partition)] = records[-1][0] + 1
        reached = [self._tp(t, p, self.position[(t, p)]) for t, p in by_tp]
        if not reached:
            return
        if self.commit_mode == "manual":
            self._commit(reached)
        elif self.commit_mode == "auto":
            self.c.store_offsets(offsets=reached)

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int] | None:
        try:
            lo, hi = self.c.get_watermark_offsets(self._tp(topic, partition), cached=True)
        except Exception:  # noqa: BLE001
            return None
        return (lo, hi) if hi is not None and hi >= 0 else None

    def _commit(self, offsets: list[Any]) -> None:
        from confluent_kafka import KafkaException
        self.commits += 1
        ref = self.commits
        self.emit("group", kind="commit", outcome="invoke", commit=ref, group=self.group,
                  offsets=_tp_list(offsets))
        try:
            result = self.c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            name = canonical(e.args[0].name())
            self.emit("group", kind="commit", outcome="fail" if name in COMMIT_REFUSALS else "info",
                      commit=ref, group=self.group, error=name)
            return
        errors = [tp.error.name() for tp in result or () if tp.error is not None]
        if errors:
            name = canonical(errors[0])
            self.emit("group", kind="commit", outcome="fail" if name in COMMIT_REFUSALS else "info",
                      commit=ref, group=self.group, error=name)
        else:
            self.emit("group", kind="commit", outcome="ok", commit=ref, group=self.group,
                      offsets=_tp_list(result or offsets))

    def _auto_committed(self, err: Any, parts: list[Any]) -> None:
        """The library's own commit: its invocation is not seen, so it is
        recorded when its answer arrives, invoke and outcome together."""
        offsets = _tp_list(parts)
        if not offsets:
            return
        self.commits += 1
        ref = self.commits
        self.emit("group", kind="commit", outcome="invoke", commit=ref, group=self.group,
                  offsets=offsets, auto=True)
        errors = [err.name()] if err is not None else [tp.error.name() for tp in parts
                                                       if tp.error is not None]
        if errors:
            name = canonical(errors[0])
            self.emit("group", kind="commit", outcome="fail" if name in COMMIT_REFUSALS else "info",
                      commit=ref, group=self.group, error=name, auto=True)
        else:
            self.emit("group", kind="commit", outcome="ok", commit=ref, group=self.group,
                      offsets=offsets, auto=True)

    def close(self) -> None:
        self.c.close()
