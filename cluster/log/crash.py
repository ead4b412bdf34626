"""Simulate a power loss on a stopped broker's log dir: drop what was not fsynced.

Killing a process loses nothing the kernel already has (the page cache
survives); a machine crash loses every write not fsynced. The recovery-point
checkpoint says, per partition, up to which offset the data was fsynced (the
LogManager keeps it exact), so this cuts each partition's segments back to it.
The next start of the broker then sees exactly what a real crash would leave,
and its recovery and the replication protocol must cope. The checkpoint files
themselves (high watermarks, epochs, recovery points) are always fsynced when
written, so they are kept as they are.

Usage (inside the broker's container, with the broker stopped):
    python -m cluster.log.crash LOG_DIR      # prints {"topic-partition": [old LEO bytes, kept bytes]}
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .batch import peek_offset_and_size
from .checkpoint import RECOVERY_POINT_FILE, OffsetCheckpoint
from .manager import parse_partition_dir
from .segment import index_path, log_path


def _cut_position(data: bytes, recovery_point: int) -> int:
    """Byte position of the first batch starting at or after `recovery_point`."""
    pos = 0
    while pos + 12 <= len(data):
        base, size = peek_offset_and_size(data, pos)
        if base >= recovery_point or size < 12:
            return pos
        pos += size
    return min(pos, len(data))


def discard_partition(dir: Path, recovery_point: int) -> tuple[int, int]:
    """Cut one partition directory back to `recovery_point`; return the bytes
    of segment data before and after."""
    bases = sorted(int(p.stem) for p in dir.glob("*.log") if p.stem.isdigit())
    before = after = 0
    for i, base in enumerate(bases):
        path = log_path(dir, base)
        size = path.stat().st_size
        before += size
        if base > recovery_point and i > 0:
            path.unlink()
            index_path(dir, base).unlink(missing_ok=True)
            continue
        data = path.read_bytes()
        keep = _cut_position(data, recovery_point) if base <= recovery_point else 0
        if keep < size:
            os.truncate(path, keep)
            # The index may point past the cut; recovery rebuilds it anyway.
            idx = index_path(dir, base)
            if idx.exists():
                os.truncate(idx, 0)
        after += keep
    return before, after


def discard_unflushed(log_dir: Path) -> dict[tuple[str, int], tuple[int, int]]:
    """Apply discard_partition to every partition dir of `log_dir`, each with
    its checkpointed recovery point (0 if it has none: nothing was fsynced)."""
    log_dir = Path(log_dir)
    points = OffsetCheckpoint(log_dir / RECOVERY_POINT_FILE).read()
    out = {}
    for p in sorted(log_dir.iterdir()):
        tp = parse_partition_dir(p.name) if p.is_dir() else None
        if tp is not None:
            out[tp] = discard_partition(p, points.get(tp, 0))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    result = discard_unflushed(Path(args[0]))
    print(json.dumps({f"{t}-{p}": list(v) for (t, p), v in result.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
