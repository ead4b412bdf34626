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

GroupMember writes those lines for every client; ConfluentGroupConsumer
(here), KafkaPythonGroupConsumer (group_kafka_python.py) and
AiokafkaGroupConsumer (group_aiokafka.py) adapt one library each, all with
the same constructor. GROUP_CLIENTS says which commit modes each client
can record faithfully.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from harness.security import PLAINTEXT, ClientSecurity
from harness.workload.clients import _poll_ok
from harness.workload.errors import canonical
from reports.groups import NO_OFFSET

COMMIT_MODES = ("auto", "manual", "none")
SUB_VIA = ("assign", "subscribe")
# Client -> the commit modes its member records faithfully. kafka-python and
# aiokafka auto-commit without reporting every commit (their docstrings say
# which), so groups.jsonl would lack commits the coordinator took.
GROUP_CLIENTS = {"confluent": COMMIT_MODES, "kafka-python": ("manual", "none"),
                 "aiokafka": ("manual", "none")}
# Commit refusals that mean the coordinator did not store the offsets.
# _ASSIGNMENT_LOST is librdkafka's refusal of a commit outside a current
# generation, made before any request; the other clients' same local
# refusals are given that name too.
COMMIT_REFUSALS = frozenset({"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS",
                             "_ASSIGNMENT_LOST"})
COMMIT_TIMEOUT_S = 10.0     # a commit or an OffsetFetch of kafka-python or aiokafka
LOG_START_TIMEOUT_S = 5.0

Emit = Callable[..., None]
TP = tuple[str, int]


def _tp_list(parts: Any) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset}
            for tp in parts if tp.offset is not None and tp.offset >= 0]


def committed_offsets(answered: Iterable[Any]) -> dict[TP, int | None]:
    """confluent-kafka's `committed()` answer as {(topic, partition): offset}.
    A partition answered with an error has no offset to trust (librdkafka
    leaves it at -1001, the same as "nothing committed"): it maps to None,
    unknown, and the member then lets the library fetch the commit itself.
    Only an answer without error below 0 means nothing is committed."""
    return {(tp.topic, tp.partition): None if tp.error is not None else tp.offset
            for tp in answered}


def commit_outcome(name: str) -> tuple[str, str]:
    """("fail" | "info", canonical name) of a commit that did not succeed:
    fail only when the coordinator (or the client, before sending) refused it."""
    name = canonical(name)
    return ("fail" if name in COMMIT_REFUSALS else "info"), name


def check_member(client: str, commit: str) -> None:
    """ValueError unless `client` has a group member that can commit so."""
    if client not in GROUP_CLIENTS:
        raise ValueError(f"--sub-via subscribe needs --client {' or '.join(GROUP_CLIENTS)}, "
                         f"not {client}")
    if commit not in GROUP_CLIENTS[client]:
        raise ValueError(f"--commit {commit} with --client {client}: its group member commits "
                         f"{' or '.join(GROUP_CLIENTS[client])} only (harness/workload/group.py)")


class GroupMember:
    """The worker lines of one member of `group`, whatever its library:
    `emit(type, **fields)` writes one. `position` holds the assigned
    partitions and where the next poll of each reads from (None: where the
    library chose)."""

    def __init__(self, group: str, commit: str, emit: Emit):
        self.group, self.commit_mode, self.emit = group, commit, emit
        self.slot = 0                       # one logical process per assignment
        self.seq = 0
        self.commits = 0
        self.position: dict[TP, int | None] = {}

    def assigned(self, starts: Iterable[tuple[str, int, int | None, int | None]]) -> None:
        """An assignment: (topic, partition, position, committed) each, where
        committed is the OffsetFetch's answer (NO_OFFSET: none; None: the
        fetch failed, and position is then None too)."""
        self.slot += 1
        out = []
        for topic, partition, position, committed in starts:
            self.position[(topic, partition)] = position
            out.append({"topic": topic, "partition": partition, "position": position,
                        "committed": committed})
        self.emit("group", kind="assign", group=self.group, partitions=out)

    def revoked(self, parts: Iterable[TP], lost: bool = False) -> None:
        parts = list(parts)
        for key in parts:
            self.position.pop(key, None)
        self.emit("group", kind="revoke", group=self.group, lost=lost,
                  partitions=[{"topic": t, "partition": p} for t, p in parts])

    def polled(self, by_tp: dict[TP, list[list[int]]],
               high_watermark: Callable[[str, int], int | None]) -> list[tuple[str, int, int]]:
        """One library poll's records of assigned partitions, as one history
        poll per partition; returns (topic, partition, next offset) of each."""
        reached = []
        for (topic, partition), records in by_tp.items():
            self.seq += 1
            self.emit("invoke", slot=self.slot, seq=self.seq, f="poll", topic=topic,
                      partition=partition, offset=self.position[(topic, partition)],
                      group=self.group)
            t, fields = _poll_ok(records, high_watermark(topic, partition))
            self.emit(t, slot=self.slot, seq=self.seq, **fields)
            self.position[(topic, partition)] = records[-1][0] + 1
            reached.append((topic, partition, records[-1][0] + 1))
        return reached

    def commit_invoked(self, offsets: list[dict[str, Any]], auto: bool = False) -> int:
        """Records a commit's invocation; returns its id for the outcome."""
        self.commits += 1
        self.emit("group", kind="commit", outcome="invoke", commit=self.commits,
                  group=self.group, offsets=offsets, **({"auto": True} if auto else {}))
        return self.commits

    def commit_done(self, ref: int, offsets: list[dict[str, Any]] | None = None,
                    error: str | None = None, auto: bool = False) -> None:
        """Records a commit's outcome: ok with the offsets acknowledged, or
        the error (fail when refused, else info: see commit_outcome)."""
        extra = {"auto": True} if auto else {}
        if error is None:
            self.emit("group", kind="commit", outcome="ok", commit=ref, group=self.group,
                      offsets=offsets, **extra)
        else:
            outcome, name = commit_outcome(error)
            self.emit("group", kind="commit", outcome=outcome, commit=ref, group=self.group,
                      error=name, **extra)


def offsets_of(reached: Iterable[tuple[str, int, int]]) -> list[dict[str, Any]]:
    """A commit's `offsets` field from (topic, partition, next offset) triples."""
    return [{"topic": t, "partition": p, "offset": o} for t, p, o in reached]


class ConfluentGroupConsumer(GroupMember):
    """A confluent-kafka member of `group`, subscribed to `topics`. Polls
    and commits happen on the caller's thread, rebalance callbacks inside
    `poll`. Every commit mode: librdkafka reports its auto-commits too
    (`on_commit`)."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], commit: str,
                 client_id: str, emit: Emit, security: ClientSecurity = PLAINTEXT):
        from confluent_kafka import Consumer, TopicPartition
        super().__init__(group, commit, emit)
        self._tp = TopicPartition
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": group,
            "enable.auto.commit": commit == "auto", "auto.commit.interval.ms": 1000,
            # Offsets are stored for the auto-commit only after the records
            # were reported, so a commit never covers a record the history lacks.
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "enable.partition.eof": False, "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 2000, "log_level": 3,
            **security.confluent_config(),
        }
        if commit == "auto":
            conf["on_commit"] = self._auto_committed
        self.c = Consumer(conf)
        self.c.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked,
                         on_lost=self._lost)

    # -- rebalances (called inside consume) ------------------------------------------------

    def _assigned(self, consumer: Any, parts: list[Any]) -> None:
        """Start each partition at what the coordinator says is committed (the
        log start when nothing is), and record that position."""
        try:
            answered = consumer.committed(parts, timeout=10)
        except Exception as e:  # noqa: BLE001 - unknown: the library fetches it itself
            self.emit("log", msg=f"committed offsets unknown: {e!r}")
            answered = []
        committed = committed_offsets(answered)
        failed = sorted(f"{tp.topic}/{tp.partition}: {tp.error}" for tp in answered
                        if tp.error is not None)
        if failed:
            self.emit("log", msg=f"committed offsets unknown: {'; '.join(failed)}")
        starts = []
        for tp in parts:
            got = committed.get((tp.topic, tp.partition))
            if got is None:
                position = None           # (the library fetches the commit itself)
            else:
                position = got if got >= 0 else self._log_start(tp)
            if position is not None:
                tp.offset = position
            starts.append((tp.topic, tp.partition, position,
                           None if got is None else (got if got >= 0 else NO_OFFSET)))
        consumer.assign(parts)
        self.assigned(starts)

    def _log_start(self, tp: Any) -> int | None:
        try:
            lo, _hi = self.c.get_watermark_offsets(self._tp(tp.topic, tp.partition), timeout=5)
            return int(lo) if lo is not None and lo >= 0 else None
        except Exception:  # noqa: BLE001
            return None

    def _revoked(self, consumer: Any, parts: list[Any], lost: bool = False) -> None:
        self.revoked([(tp.topic, tp.partition) for tp in parts], lost)
        consumer.unassign()

    def _lost(self, consumer: Any, parts: list[Any]) -> None:
        self._revoked(consumer, parts, lost=True)

    # -- polls and commits -----------------------------------------------------------------

    def poll(self, max_records: int, timeout: float) -> None:
        """One library poll: its records as one history poll per partition,
        then (manual) a synchronous commit of what they reached."""
        msgs = self.c.consume(num_messages=max_records, timeout=timeout)
        by_tp: dict[TP, list[list[int]]] = {}
        for m in msgs:
            if m.error() is not None:
                self.emit("log", msg=f"poll error {m.error().name()}")
            elif (m.topic(), m.partition()) in self.position:
                by_tp.setdefault((m.topic(), m.partition()), []).append(
                    [int(m.offset()), int(m.value())])
        reached = [self._tp(t, p, o) for t, p, o in self.polled(by_tp, self._high_watermark)]
        if not reached:
            return
        if self.commit_mode == "manual":
            self._commit(reached)
        elif self.commit_mode == "auto":
            self.c.store_offsets(offsets=reached)

    def _high_watermark(self, topic: str, partition: int) -> int | None:
        try:
            _lo, hi = self.c.get_watermark_offsets(self._tp(topic, partition), cached=True)
        except Exception:  # noqa: BLE001
            return None
        return hi if hi is not None and hi >= 0 else None

    def _commit(self, offsets: list[Any]) -> None:
        from confluent_kafka import KafkaException
        ref = self.commit_invoked(_tp_list(offsets))
        try:
            result = self.c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            self.commit_done(ref, error=e.args[0].name())
            return
        errors = [tp.error.name() for tp in result or () if tp.error is not None]
        if errors:
            self.commit_done(ref, error=errors[0])
        else:
            self.commit_done(ref, offsets=_tp_list(result or offsets))

    def _auto_committed(self, err: Any, parts: list[Any]) -> None:
        """The library's own commit: its invocation is not seen, so it is
        recorded when its answer arrives, invoke and outcome together."""
        offsets = _tp_list(parts)
        if not offsets:
            return
        ref = self.commit_invoked(offsets, auto=True)
        errors = [err.name()] if err is not None else [tp.error.name() for tp in parts
                                                       if tp.error is not None]
        self.commit_done(ref, offsets=offsets, error=errors[0] if errors else None, auto=True)

    def close(self) -> None:
        self.c.close()
