"""Kafka's small checkpoint files: a version line, a count line, then entries.

    0
    <count>
    <entry>          e.g. "<topic> <partition> <offset>" or "<epoch> <start offset>"

Used for the high-watermark file (`replication-offset-checkpoint`), the
recovery points (`recovery-point-offset-checkpoint`) and a replica's
`leader-epoch-checkpoint`. A checkpoint is always replaced whole: written to a
temporary file, fsynced, renamed over the old one, and the directory fsynced,
so a crash leaves either the old or the new content, never a mix. A replica's
`partition.metadata` (its topic id, Kafka's "key: value" file) is written the
same way.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from .errors import CorruptCheckpointError

VERSION = 0
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
TMP_SUFFIX = ".tmp"


def fsync_dir(dir: Path) -> None:
    fd = os.open(dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = text.encode()
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_checkpoint(path: Path, entries: list[tuple]) -> None:
    lines = [str(VERSION), str(len(entries))]
    lines += [" ".join(str(f) for f in e) for e in entries]
    write_atomically(path, "\n".join(lines) + "\n")


def read_checkpoint(path: Path, fields: int) -> list[list[str]]:
    """Entries of the checkpoint at `path` split into `fields` strings each;
    [] if the file does not exist."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        version, count = int(lines[0]), int(lines[1])
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"{path}: malformed header") from None
    if version != VERSION:
        raise CorruptCheckpointError(f"{path}: unknown version {version}")
    body = lines[2:]
    if len(body) != count:
        raise CorruptCheckpointError(f"{path}: {count} entries announced, {len(body)} present")
    out = []
    for line in body:
        parts = line.split()
        if len(parts) != fields:
            raise CorruptCheckpointError(f"{path}: malformed entry {line!r}")
        out.append(parts)
    return out


class OffsetCheckpoint:
    """A `{(topic, partition): offset}` checkpoint file (Kafka's
    OffsetCheckpointFile). Writes are serialized and atomic."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        entries = [(t, p, o) for (t, p), o in sorted(offsets.items())]
        for t, _, _ in entries:
            if not t or any(c.isspace() for c in t):
                raise ValueError(f"topic {t!r} cannot be written to a checkpoint")
        with self._lock:
            write_checkpoint(self.path, entries)

    def read(self) -> dict[tuple[str, int], int]:
        try:
            return {(t, int(p)): int(o) for t, p, o in read_checkpoint(self.path, 3)}
        except ValueError as e:
            if isinstance(e, CorruptCheckpointError):
                raise
            raise CorruptCheckpointError(f"{self.path}: {e}") from None


class HighWatermarkCheckpoint(OffsetCheckpoint):
    """The high watermarks of a log dir's partitions (`replication-offset-checkpoint`),
    written periodically and at clean shutdown, read at startup so a restarted
    broker knows how far its replicas were committed (seed: "truncate the log
    to r.hw" on becoming follower)."""


def write_topic_id(path: Path, topic_id: str) -> None:
    """Kafka's partition.metadata: "version: 0" and "topic_id: <id>"."""
    write_atomically(path, f"version: {VERSION}\ntopic_id: {topic_id}\n")


def read_topic_id(path: Path) -> str | None:
    """The topic id in a partition.metadata file; None if there is none."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    if fields.get("version") != str(VERSION) or not fields.get("topic_id"):
        raise CorruptCheckpointError(f"{path}: malformed partition metadata {text[:80]!r}")
    return fields["topic_id"]
