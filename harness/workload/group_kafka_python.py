"""A kafka-python member of the run's consumer group (--client kafka-python --sub-via subscribe).

The same worker lines as every member (GroupMember, harness/workload/group.py).
kafka-python 3 runs the group protocol on its IO thread, and the rebalance
listener with it, but only while poll() or close() blocks the worker's
thread for it: listener and polls never interleave. The listener must not
block that thread (a blocking call from it raises), so it only pauses the
partitions it was given; after the poll returns, the worker's thread asks
the coordinator for their commits, positions them and resumes them. The
pause matters: a partition fetched before it was positioned hands over
records that would be dropped, and if the OffsetFetch then fails the
library's position is already past them, a skip the history never saw.

Commit modes: manual and none. Not auto: kafka-python's auto-commit before
a rebalance and at close is synchronous and reports to no callback, so
groups.jsonl would miss commits the coordinator took.
"""
from __future__ import annotations

from typing import Any

from harness.security import PLAINTEXT, ClientSecurity
from harness.workload.errors import kafka_python_name
from harness.workload.group import (COMMIT_TIMEOUT_S, LOG_START_TIMEOUT_S, NO_OFFSET, TP, Emit,
                                    GroupMember, check_member, offsets_of)


def commit_error(e: BaseException) -> str:
    """The error name of a commit kafka-python refused. CommitFailedError
    wraps the coordinator's refusal (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    REBALANCE_IN_PROGRESS); without one, kafka-python refused the commit
    itself, before sending, because the member was in no current generation."""
    from kafka.errors import CommitFailedError
    if isinstance(e, CommitFailedError):
        cause = e.args[0] if e.args and isinstance(e.args[0], BaseException) else None
        return kafka_python_name(cause) if cause is not None else "_ASSIGNMENT_LOST"
    return kafka_python_name(e)


class KafkaPythonGroupConsumer(GroupMember):
    """A kafka-python member of `group`, subscribed to `topics`."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], commit: str,
                 client_id: str, emit: Emit, security: ClientSecurity = PLAINTEXT):
        from kafka import KafkaConsumer, TopicPartition
        from kafka.consumer.subscription_state import ConsumerRebalanceListener
        check_member("kafka-python", commit)
        super().__init__(group, commit, emit)
        self._tp = TopicPartition
        self.pending: set[Any] = set()       # assigned, paused, not yet positioned
        self.c = KafkaConsumer(
            bootstrap_servers=bootstrap.split(","), client_id=client_id, group_id=group,
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=6000, heartbeat_interval_ms=1000,
            fetch_max_wait_ms=100, metadata_max_age_ms=2000, **security.kafka_python_kwargs())
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: Any) -> None:
                member.c.pause(*assigned)
                member.pending |= set(assigned)

            def on_partitions_revoked(self, revoked: Any) -> None:
                member._revoked(revoked, lost=False)

            def on_partitions_lost(self, lost: Any) -> None:
                member._revoked(lost, lost=True)

        self.c.subscribe(topics=topics, listener=Listener())

    def _revoked(self, parts: Any, lost: bool) -> None:
        self.pending -= set(parts)
        held = sorted((tp.topic, tp.partition) for tp in parts)
        if held:
            self.revoked(held, lost)

    def _start_pending(self) -> None:
        """Position what the last rebalance assigned at its commit (the log
        start when there is none; the library's choice when the OffsetFetch
        fails), record it, and let it be fetched."""
        parts = sorted(self.pending)
        self.pending.clear()
        committed: dict[Any, int | None] = {}
        try:
            for tp in parts:
                committed[tp] = self.c.committed(tp, timeout_ms=int(COMMIT_TIMEOUT_S * 1000))
        except Exception as e:  # noqa: BLE001 - unknown: the library fetches it itself
            self.emit("log", msg=f"committed offsets unknown: {e!r}")
        starts = []
        for tp in parts:
            if tp not in committed:
                got, position = None, None
            elif committed[tp] is None:
                got, position = NO_OFFSET, self._log_start(tp)
            else:
                got = position = committed[tp]
            if position is not None:
                self.c.seek(tp, position)
            starts.append((tp.topic, tp.partition, position, got))
        self.c.resume(*parts)
        self.assigned(starts)

    def _log_start(self, tp: Any) -> int | None:
        try:
            return int(self.c.beginning_offsets(
                [tp], timeout_ms=int(LOG_START_TIMEOUT_S * 1000))[tp])
        except Exception:  # noqa: BLE001
            return None

    def poll(self, max_records: int, timeout: float) -> None:
        """One library poll (a rebalance runs inside it): its records as one
        history poll per partition, then (manual) a synchronous commit."""
        batch = self.c.poll(timeout_ms=int(timeout * 1000), max_records=max_records)
        by_tp: dict[TP, list[list[int]]] = {}
        for tp, records in batch.items():
            if (tp.topic, tp.partition) in self.position and records:
                by_tp[(tp.topic, tp.partition)] = [[int(r.offset), int(r.value)] for r in records]
        reached = self.polled(by_tp, lambda t, p: self.c.highwater(self._tp(t, p)))
        if self.pending:
            self._start_pending()
        if reached and self.commit_mode == "manual":
            self._commit(reached)

    def _commit(self, reached: list[tuple[str, int, int]]) -> None:
        from kafka.structs import OffsetAndMetadata
        offsets = offsets_of(reached)
        ref = self.commit_invoked(offsets)
        try:
            self.c.commit({self._tp(t, p): OffsetAndMetadata(o, "", -1) for t, p, o in reached},
                          timeout_ms=int(COMMIT_TIMEOUT_S * 1000))
        except Exception as e:  # noqa: BLE001 - every error is an outcome
            self.commit_done(ref, error=commit_error(e))
        else:
            self.commit_done(ref, offsets=offsets)

    def close(self) -> None:
        self.c.close(timeout_ms=5000)
