"""An aiokafka member of the run's consumer group (--client aiokafka --sub-via subscribe).

The same worker lines as every member (GroupMember, harness/workload/group.py).
The member owns one asyncio event loop and runs it only inside its own
calls (loop.run_until_complete per poll, per commit), so aiokafka's
background tasks, the rebalance listener among them, run on the worker's
thread between the lines it writes. The listener may await: it pauses what
it was given before its first await (so no poll hands over records of a
partition not yet positioned), asks the coordinator for the commits,
positions each partition and resumes it.

Commit modes: manual and none. Not auto: aiokafka's auto-commit reports to
no callback, so groups.jsonl would lack every commit it made.
"""
from __future__ import annotations

import asyncio
from typing import Any

from harness.security import PLAINTEXT, ClientSecurity
from harness.workload.errors import kafka_python_name
from harness.workload.group import (COMMIT_TIMEOUT_S, LOG_START_TIMEOUT_S, NO_OFFSET, TP, Emit,
                                    GroupMember, check_member, offsets_of)


def commit_error(e: BaseException) -> str:
    """The error name of a commit aiokafka refused. CommitFailedError comes
    from the coordinator's refusal (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    REBALANCE_IN_PROGRESS, its cause); IllegalStateError is aiokafka's own
    refusal, before sending, of a commit while the member holds no assignment."""
    from aiokafka.errors import CommitFailedError, IllegalStateError
    if isinstance(e, CommitFailedError) and e.__cause__ is not None:
        return kafka_python_name(e.__cause__)
    if isinstance(e, IllegalStateError):
        return "_ASSIGNMENT_LOST"
    if isinstance(e, asyncio.TimeoutError):
        return "timeout"
    return kafka_python_name(e)


class AiokafkaGroupConsumer(GroupMember):
    """An aiokafka member of `group`, subscribed to `topics`."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], commit: str,
                 client_id: str, emit: Emit, security: ClientSecurity = PLAINTEXT):
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener
        check_member("aiokafka", commit)
        super().__init__(group, commit, emit)
        member = self

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_assigned(self, assigned: Any) -> None:
                await member._assigned(sorted(assigned))

            def on_partitions_revoked(self, revoked: Any) -> None:
                held = sorted((tp.topic, tp.partition) for tp in revoked)
                if held:
                    member.revoked(held)

        async def start() -> None:
            self.c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, client_id=client_id, group_id=group,
                enable_auto_commit=False, auto_offset_reset="earliest",
                session_timeout_ms=6000, heartbeat_interval_ms=1000,
                fetch_max_wait_ms=100, metadata_max_age_ms=2000, **security.aiokafka_kwargs())
            self.c.subscribe(topics=topics, listener=Listener())
            await self.c.start()         # (the first assignment may arrive within it)

        self.c: Any = None
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(start())

    async def _assigned(self, parts: list[Any]) -> None:
        """Start each partition at its commit (the log start when there is
        none; the library's choice when the OffsetFetch fails)."""
        self.c.pause(*parts)
        committed: dict[Any, int | None] = {}

        async def fetch() -> None:
            for tp in parts:
                committed[tp] = await self.c.committed(tp)   # None: no commit
        try:
            await asyncio.wait_for(fetch(), COMMIT_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - unknown: the library fetches it itself
            self.emit("log", msg=f"committed offsets unknown: {e!r}")
        starts = []
        for tp in parts:
            if tp not in committed:
                got, position = None, None
            elif committed[tp] is None:
                got, position = NO_OFFSET, await self._log_start(tp)
            else:
                got = position = committed[tp]
            if position is not None:
                self.c.seek(tp, position)
            starts.append((tp.topic, tp.partition, position, got))
        self.c.resume(*parts)
        self.assigned(starts)

    async def _log_start(self, tp: Any) -> int | None:
        try:
            return int((await asyncio.wait_for(self.c.beginning_offsets([tp]),
                                               LOG_START_TIMEOUT_S))[tp])
        except Exception:  # noqa: BLE001
            return None

    def poll(self, max_records: int, timeout: float) -> None:
        """One library poll: its records as one history poll per partition,
        then (manual) a commit of what they reached."""
        from aiokafka import TopicPartition
        batch = self.loop.run_until_complete(
            self.c.getmany(timeout_ms=int(timeout * 1000), max_records=max_records))
        by_tp: dict[TP, list[list[int]]] = {}
        for tp, records in batch.items():
            # (a revocation may have run after the records were taken: dropped)
            if (tp.topic, tp.partition) in self.position and records:
                by_tp[(tp.topic, tp.partition)] = [[int(r.offset), int(r.value)] for r in records]
        reached = self.polled(by_tp, lambda t, p: self.c.highwater(TopicPartition(t, p)))
        if reached and self.commit_mode == "manual":
            self._commit(reached)

    def _commit(self, reached: list[tuple[str, int, int]]) -> None:
        from aiokafka import TopicPartition
        offsets = offsets_of(reached)
        ref = self.commit_invoked(offsets)
        commit = self.c.commit({TopicPartition(t, p): o for t, p, o in reached})
        try:
            self.loop.run_until_complete(asyncio.wait_for(commit, COMMIT_TIMEOUT_S))
        except Exception as e:  # noqa: BLE001 - every error is an outcome
            self.commit_done(ref, error=commit_error(e))
        else:
            self.commit_done(ref, offsets=offsets)

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.c.stop())
        finally:
            self.loop.close()
