"""A broker's replicas as its own files say, for the replica-agreement oracle.

Clients see only what leaders serve; whether the followers hold the same
committed records is visible only in the replicas' files. The harness owns
the system under test, so after a run it reads every broker's log dir
(Cluster.log_dir) with its own reader: record batches in the segment files
(RecordBatch v2, parsed by kafka-python, not by the broker's code), the
high-watermark checkpoint of the log dir and each partition's leader epoch
cache. The layout is the one docs/design.md#log describes (Kafka's).
"""
from __future__ import annotations

import re
import struct
import warnings
from pathlib import Path
from typing import Any, Iterator

HW_CHECKPOINT = "replication-offset-checkpoint"
EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_BATCH_HEAD = struct.Struct(">qi")  # base offset, length of the rest


def _checkpoint(path: Path) -> list[list[str]]:
    """The entries of a Kafka checkpoint file (version, count, entries); []
    when it is missing or unreadable (a crash between write and rename)."""
    try:
        lines = path.read_text().splitlines()
        count = int(lines[1])
        return [line.split() for line in lines[2:2 + count]]
    except (OSError, ValueError, IndexError):
        return []


def high_watermarks(log_dir: Path) -> dict[tuple[str, int], int]:
    out = {}
    for entry in _checkpoint(Path(log_dir) / HW_CHECKPOINT):
        if len(entry) == 3:
            out[(entry[0], int(entry[1]))] = int(entry[2])
    return out


def _value(raw: bytes | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def batches(segment: Path) -> Iterator[Any]:
    """The whole record batches of one segment file, in order; a torn or
    damaged tail ends the segment (a broker being written to, or a disk
    fault: the replica's own recovery decides what it keeps)."""
    with warnings.catch_warnings():  # kafka-python's importlib.resources deprecations
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatch
    data = segment.read_bytes()
    pos = 0
    while pos + _BATCH_HEAD.size <= len(data):
        _base, length = _BATCH_HEAD.unpack_from(data, pos)
        end = pos + _BATCH_HEAD.size + length
        if length <= 0 or end > len(data):
            return
        batch = DefaultRecordBatch(data[pos:end])
        if not batch.validate_crc():
            return
        yield batch
        pos = end


def read_replica(partition_dir: Path, hw_checkpoint: int | None = None) -> dict[str, Any]:
    """One replica: its batches, records, offsets and leader epoch cache, and
    who wrote each idempotent batch (`writers`: producer id, producer epoch
    and base sequence, which tell a broker that appended one write twice from
    a client that sent it again as a new write)."""
    segs = sorted((p for p in partition_dir.glob("*.log") if p.stem.isdigit()),
                  key=lambda p: int(p.stem))
    out_batches, records, writers = [], [], []
    for seg in segs:
        for b in batches(seg):
            out_batches.append([b.base_offset, b.last_offset, b.leader_epoch, b.crc])
            if b.producer_id >= 0:
                writers.append([b.base_offset, b.last_offset, b.producer_id, b.producer_epoch,
                                b.base_sequence])
            records.extend([r.offset, _value(r.value)] for r in b)
    epochs = [[int(e), int(o)] for e, o, *_ in _checkpoint(partition_dir / EPOCH_CHECKPOINT)]
    start = out_batches[0][0] if out_batches else (int(segs[0].stem) if segs else 0)
    end = out_batches[-1][1] + 1 if out_batches else start
    return {"log_start_offset": start, "log_end_offset": end, "hw_checkpoint": hw_checkpoint,
            "epochs": epochs, "batches": out_batches, "writers": writers, "records": records}


def read_broker(log_dir: Path, topics: set[str] | None = None) -> list[dict[str, Any]]:
    """Every partition replica in one broker's log dir (of `topics`, or all):
    `replica` observations without the broker's name."""
    log_dir = Path(log_dir)
    if not log_dir.is_dir():
        return []
    hws = high_watermarks(log_dir)
    out = []
    for d in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        m = _PARTITION_DIR.match(d.name)
        if not m or (topics is not None and m["topic"] not in topics):
            continue
        tp = (m["topic"], int(m["partition"]))
        out.append({"topic": tp[0], "partition": tp[1], **read_replica(d, hws.get(tp))})
    return out
