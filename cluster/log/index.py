"""The sparse offset index of one segment (`<base offset>.index`).

On disk, exactly Kafka's format: 8-byte entries of big-endian int32 offset
relative to the segment's base offset and int32 byte position in the .log file.
As Kafka does, an entry names the *last* offset of the batch starting at that
position, and one is added only after more than `index.interval.bytes` have
been appended since the previous one, so a lookup lands at most that many bytes
before the wanted batch and the rest is a short forward scan.

The entries are also kept in memory (two int arrays), because lookups are on
the fetch path and the index is small (one entry per ~4 KiB of log).
"""
from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

ENTRY = struct.Struct(">ii")
ENTRY_SIZE = ENTRY.size


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int):
        self.path = Path(path)
        self.base_offset = base_offset
        self._rel = array("i")
        self._pos = array("i")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    # -- loading -----------------------------------------------------------

    def load(self, log_size: int) -> bool:
        """Read the entries from disk; return False (leaving the index empty) if
        they fail the sanity check, so the caller rebuilds the index from the log."""
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        if len(data) % ENTRY_SIZE:
            return False
        flat = array("i")
        flat.frombytes(data)
        if sys.byteorder == "little":
            flat.byteswap()
        rel, pos = flat[0::2], flat[1::2]
        for i in range(len(rel)):
            if rel[i] < 0 or pos[i] < 0 or pos[i] >= log_size:
                return False
            if i and (rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]):
                return False
        self._rel, self._pos = rel, pos
        return True

    # -- queries -----------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rel)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry whose offset is <= `offset`,
        or (base_offset, 0) when there is none: a position to scan forward from."""
        i = bisect_right(self._rel, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (absolute offset, position)."""
        return [(self.base_offset + r, p) for r, p in zip(self._rel, self._pos)]

    @property
    def last_position(self) -> int:
        return self._pos[-1] if self._pos else 0

    # -- changes -----------------------------------------------------------

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise ValueError(
                f"index entry ({offset}, {position}) does not follow the last one in {self.path}")
        os.pwrite(self._fd, ENTRY.pack(rel, position), len(self._rel) * ENTRY_SIZE)
        self._rel.append(rel)
        self._pos.append(position)

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries pointing at `position` or later (the log is cut there)."""
        keep = bisect_right(self._pos, position - 1)
        del self._rel[keep:]
        del self._pos[keep:]
        os.ftruncate(self._fd, keep * ENTRY_SIZE)

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace all entries (index rebuild after recovery)."""
        self._rel = array("i", (o - self.base_offset for o, _ in entries))
        self._pos = array("i", (p for _, p in entries))
        data = b"".join(ENTRY.pack(r, p) for r, p in zip(self._rel, self._pos))
        os.ftruncate(self._fd, 0)
        if data:
            os.pwrite(self._fd, data, 0)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
