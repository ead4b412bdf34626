"""Helpers shared by the log storage tests (no tests here).

Batches are built with kafka-python's DefaultRecordBatchBuilder, so the tests
exercise the log against the bytes a real client sends, and decoded with its
DefaultRecordBatch to check what a real client would read back.
"""
from __future__ import annotations

from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from cluster.log import Log, LogConfig, iter_batches


def make_batch(values: list[bytes] | int, *, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, timestamp: int = 1_000, key: bytes | None = None) -> bytes:
    """One RecordBatch v2 holding `values` (or that many small values)."""
    if isinstance(values, int):
        values = [b"v%d" % i for i in range(values)]
    b = DefaultRecordBatchBuilder(2, 0, False, producer_id, producer_epoch, base_sequence,
                                  1 << 30)
    for i, v in enumerate(values):
        b.append(i, timestamp + i, key, v, [])
    return bytes(b.build())


def decode_values(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in `data`, as a client decodes them."""
    out = []
    for h in iter_batches(data):
        batch = DefaultRecordBatch(data[h.position:h.position + h.size])
        assert batch.validate_crc()
        out += [(r.offset, r.value) for r in batch]
    return out


def read_all(lg: Log, max_bytes: int = 1 << 20) -> bytes:
    """Everything from log start to LEO, through repeated read() calls."""
    out, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read(offset, max_bytes)
        assert data, f"read({offset}) returned nothing below LEO {lg.log_end_offset}"
        out.append(data)
        offset = list(iter_batches(data))[-1].next_offset
    return b"".join(out)


def small_config(**kw) -> LogConfig:
    cfg = dict(segment_bytes=1024, index_interval_bytes=128)
    cfg.update(kw)
    return LogConfig(**cfg)


def assert_index_consistent(lg: Log) -> None:
    """Every index entry names the last offset of the batch at its position,
    entries increase, and segments chain without gaps up to the LEO."""
    expected_base = lg.log_start_offset
    for seg in lg.segments:
        assert seg.base_offset == expected_base
        by_pos = {h.position: h for h in seg.scan(0)}
        prev = (-1, -1)
        for off, pos in seg.index.entries():
            assert pos in by_pos, (seg, off, pos)
            assert by_pos[pos].last_offset == off
            assert off > prev[0] and pos > prev[1]
            prev = (off, pos)
        on_disk = Path(seg.index.path).stat().st_size
        assert on_disk == 8 * len(seg.index)
        assert Path(seg.log_path).stat().st_size == seg.size
        expected_base = seg.next_offset
    assert expected_base == lg.log_end_offset
