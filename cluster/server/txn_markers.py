"""WriteTxnMarkers on the partition leader's side: each transaction's COMMIT
or ABORT marker appended to each of its partitions led here, answered once
the HW covers it, as Kafka's acks=all marker append (docs/design.md#transactions).

Used by the WriteTxnMarkers handler (a coordinator on another broker) and
by this broker's own transaction coordinator for the partitions it leads.
`on_marker` hears of each marker the HW covers: the group coordinator
commits (or drops) the offsets a transaction committed on that partition.
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable

from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.server.partition import Partition

PartitionOf = Callable[[tuple[str, int]], Partition | None]
OnMarker = Callable[[tuple[str, int], int, bool], None]   # (partition, producer id, commit)


async def write_markers(partition_of: PartitionOf, markers: tuple[control.TxnMarker, ...],
                        min_isr: int, timeout_s: float, on_marker: OnMarker
                        ) -> control.WriteTxnMarkersResponse:
    """Append every marker now (in request order), then wait for the HW to
    pass them all, at most `timeout_s` (then REQUEST_TIMED_OUT)."""
    now_ms = int(time.time() * 1000)
    results: list[list[list]] = []     # per marker: [topic, partition, error]
    waits: list[tuple[list, control.TxnMarker, asyncio.Future]] = []
    for m in markers:
        rows = []
        for tp in m.partitions:
            row = [tp.topic, tp.partition, E.NONE]
            rows.append(row)
            p = partition_of((tp.topic, tp.partition))
            if p is None:
                row[2] = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            err, required = p.append_marker(m.producer_id, m.producer_epoch, m.commit,
                                            m.coordinator_epoch, min_isr, now_ms)
            row[2] = err
            if err == E.NONE and p.hw < required:
                waits.append((row, m, p.hw_waiters.add(required)))
            elif err == E.NONE:
                row[2] = p.ack_result()
                on_marker((tp.topic, tp.partition), m.producer_id, m.commit)
        results.append(rows)
    if waits:
        await asyncio.wait([f for _, _, f in waits], timeout=timeout_s)
        for row, m, f in waits:
            if f.done():
                row[2] = f.result()
                if row[2] == E.NONE:
                    on_marker((row[0], row[1]), m.producer_id, m.commit)
            else:
                f.cancel()
                row[2] = E.REQUEST_TIMED_OUT
    return control.WriteTxnMarkersResponse(tuple(
        control.TxnMarkerResult(m.producer_id, tuple(control.PartitionError(*row) for row in rows))
        for m, rows in zip(markers, results)))
