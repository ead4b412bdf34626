"""Disk faults on a broker's replica files, applied while the broker is down.

The broker is killed (SIGKILL) when the fault starts, its files are damaged,
and healing starts it again, so its log recovery meets the damage at startup:

  truncate-tail    cut the last N bytes off the active segment of one replica
  bitflip          flip N random bits near the end of that segment
  lose-unfsynced   cut every replica back to its recovery point
  bad-offset       add N to the baseOffset of the last batch of that segment

lose-unfsynced simulates a power loss. A SIGKILL alone loses nothing that
was written: the page cache survives the process, so bytes the broker never
fsynced are still read back after the restart. A machine that loses power
keeps only what was fsynced. The broker's `recovery-point-offset-checkpoint`
(Kafka's format: version line, count line, "topic partition offset" lines,
kept exact by its LogManager) says how far each replica was flushed; each
replica is cut back to the first batch at or after that offset, later
segments deleted; a replica with no entry was never flushed and loses
everything. The cutting itself is the storage's own tool,
cluster.log.crash.discard_unflushed: the log's owner knows its files best.
This is an approximation: a real power loss may keep some unfsynced pages
(or tear a write); we keep exactly the flushed prefix, the worst case.

bad-offset damages the one field a batch's CRC does not cover: baseOffset
(CRC-32C runs from the attributes on), so only the log's recovery can notice,
by checking that each batch starts where the previous one ended
(cluster/log/batch.py, valid_prefix). A broker that keeps the batch serves
its records at offsets nobody wrote.

Layout: `<log.dirs>/<topic>-<partition>/<20-digit base offset>.log`; the
active segment is the one with the highest base offset.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cluster.log.batch import LOG_OVERHEAD, peek_offset_and_size, set_base_offset
from contracts.abilities import NodeFiles, ProcessControl
from faults.injectors.base import FaultError, Injector
from faults.injectors.process import restart

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
REPLICA_DIR_RE = re.compile(r"^(.+)-(\d+)$")


# -- pure file logic (unit-tested on synthetic segments) ------------------------

def segments(replica_dir: Path) -> list[tuple[int, Path]]:
    out = []
    for p in replica_dir.iterdir():
        m = SEGMENT_RE.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def flip_bits(path: Path, count: int, window: int, rng: Any) -> list[int]:
    """Flip `count` random bits among the last `window` bytes; returns the bit positions."""
    size = path.stat().st_size
    if size == 0:
        return []
    lo = max(0, size - window)
    flipped = []
    with open(path, "r+b") as f:
        for _ in range(count):
            byte = rng.randrange(lo, size)
            bit = rng.randrange(8)
            f.seek(byte)
            b = f.read(1)[0]
            f.seek(byte)
            f.write(bytes([b ^ (1 << bit)]))
            flipped.append(byte * 8 + bit)
    return flipped


def cut_tail(path: Path, nbytes: int) -> int:
    size = path.stat().st_size
    new = max(0, size - nbytes)
    with open(path, "r+b") as f:
        f.truncate(new)
    return size - new


def shift_last_base_offset(path: Path, by: int) -> tuple[int, int] | None:
    """Add `by` to the baseOffset of the last batch of segment `path`;
    (old, new), or None when the file holds no whole batch. The
    batches are walked by their length fields alone: no CRC is checked, and
    none needs recomputing."""
    buf = bytearray(path.read_bytes())
    pos, last = 0, None
    while pos + LOG_OVERHEAD <= len(buf):
        base, size = peek_offset_and_size(buf, pos)
        if size < LOG_OVERHEAD or pos + size > len(buf):
            break   # garbage or a torn tail: no whole batch from here
        last = (pos, base)
        pos += size
    if last is None:
        return None
    pos, base = last
    set_base_offset(buf, pos, base + by)
    path.write_bytes(buf)
    return base, base + by


def label(segment: Path) -> str:
    """`T-0/00000000000000000000.log`: a segment as the notes name it."""
    return f"{segment.parent.name}/{segment.name}"


# -- injectors ---------------------------------------------------------------------

class _DownDisk(Injector):
    """Kill the broker, damage its files, restart it on heal."""
    NEEDS = (ProcessControl, NodeFiles)

    def _resolve(self) -> list[str]:
        names = super()._resolve()
        if any(not n.startswith("broker-") for n in names):
            raise FaultError(f"{self.fault} damages a broker's log: target brokers")
        return names

    def _start(self) -> None:
        for n in self.targets:
            self.ctx.cluster.kill_node(n)
            self.damage(n, self.ctx.cluster.log_dir(n))

    def _stop(self) -> None:
        late = [n for n in self.targets if not restart(self.ctx, n)]
        if late:
            self.notes.append(f"not registered after restart: {','.join(late)}")

    def damage(self, name: str, log_dir: Path) -> None:
        raise NotImplementedError

    def replica_dir(self, name: str, log_dir: Path) -> Path:
        want = self.params.get("partition")
        if want:
            topic, _, part = str(want).rpartition("/")
        elif self.target is not None and self.target.topic is not None:
            topic, part = self.target.topic, self.target.partition   # "leader:T/P" damages T/P
        elif self.ctx.default_partition:
            topic, part = self.ctx.default_partition
        else:
            topic = part = None
        if topic is not None:
            d = log_dir / f"{topic}-{part}"
            if d.is_dir():
                return d
        dirs = sorted(p for p in log_dir.iterdir() if p.is_dir() and REPLICA_DIR_RE.match(p.name))
        if not dirs:
            raise FaultError(f"{name} holds no replica in {log_dir}")
        return dirs[0]

    def active_segment(self, name: str, log_dir: Path) -> Path:
        rd = self.replica_dir(name, log_dir)
        segs = segments(rd)
        if not segs:
            raise FaultError(f"{rd} has no segment")
        return segs[-1][1]


class TruncateTail(_DownDisk):
    fault = "truncate-tail"

    def damage(self, name: str, log_dir: Path) -> None:
        seg = self.active_segment(name, log_dir)
        n = int(self.params.get("bytes", 0)) or self.ctx.rng.randint(1, 512)
        cut = cut_tail(seg, n)
        self.notes.append(f"{name}: cut {cut} bytes off {label(seg)}")


class BitFlip(_DownDisk):
    fault = "bitflip"

    def damage(self, name: str, log_dir: Path) -> None:
        seg = self.active_segment(name, log_dir)
        bits = flip_bits(seg, int(self.params.get("flips", 1)), int(self.params.get("window", 4096)),
                         self.ctx.rng)
        self.notes.append(f"{name}: flipped bits {bits} of {label(seg)}")


class LoseUnfsynced(_DownDisk):
    fault = "lose-unfsynced"

    def damage(self, name: str, log_dir: Path) -> None:
        from cluster.log.crash import discard_unflushed
        result = discard_unflushed(log_dir)
        lost = {f"{t}-{p}": before - after for (t, p), (before, after) in sorted(result.items())}
        self.notes.append(f"{name}: unfsynced bytes dropped {lost}")


class BadOffset(_DownDisk):
    fault = "bad-offset"

    def damage(self, name: str, log_dir: Path) -> None:
        seg = self.active_segment(name, log_dir)
        by = int(self.params.get("by", 0)) or self.ctx.rng.randint(1, 1000)
        shifted = shift_last_base_offset(seg, by)
        if shifted is None:
            self.notes.append(f"{name}: {label(seg)} holds no batch, no base offset shifted")
        else:
            self.notes.append(f"{name}: shifted the base offset of the last batch of {label(seg)} "
                              f"from {shifted[0]} to {shifted[1]}")
