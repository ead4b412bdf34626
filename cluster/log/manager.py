"""A broker's logs: one directory per partition replica under the log dir.

Layout, as Kafka's:

    <log dir>/<topic>-<partition>/00000000000000000000.log, .index, leader-epoch-checkpoint
    <log dir>/replication-offset-checkpoint        high watermarks
    <log dir>/recovery-point-offset-checkpoint     offsets known fsynced, per log

The recovery points are read at startup so that each log fully validates only
what may not have reached the disk. The file is rewritten whenever a log's
recovery point moves (an fsync by the flush policy, a roll, a truncation), so it
is exact: a simulated power loss (crash.py) may drop everything above it and
nothing below it. With the default flush policy that is only on rolls and
truncations, so the cost stays off the append path.
A deleted log's directory is first renamed to `<topic>-<partition>.<uuid>-delete`
(atomic), then removed, so a crash in between cannot resurrect it.
"""
from __future__ import annotations

import logging
import re
import shutil
import threading
import uuid
from pathlib import Path

from .checkpoint import (HIGH_WATERMARK_FILE, RECOVERY_POINT_FILE, HighWatermarkCheckpoint,
                         OffsetCheckpoint, fsync_dir)
from .errors import CorruptCheckpointError
from .log import Log, LogConfig

log = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"^(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>\d+)$")
DELETE_SUFFIX = "-delete"


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    m = _PARTITION_DIR.match(name)
    if not m:
        return None
    return m["topic"], int(m["partition"])


class LogManager:
    def __init__(self, log_dir: Path, config: LogConfig):
        self.log_dir = Path(log_dir)
        self.config = config
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._logs: dict[tuple[str, int], Log] = {}
        self._lock = threading.RLock()
        self._hw = HighWatermarkCheckpoint(self.log_dir / HIGH_WATERMARK_FILE)
        self._recovery_points = OffsetCheckpoint(self.log_dir / RECOVERY_POINT_FILE)
        self._loaded_recovery_points: dict[tuple[str, int], int] | None = None
        # Guards recovery-point checkpoint writes only. Never held while taking
        # a Log's lock, and the manager lock is never taken under it: Log calls
        # in with its own lock held.
        self._rp_lock = threading.Lock()

    def _known_recovery_points(self) -> dict[tuple[str, int], int]:
        """The checkpoint as last read or written: it keeps the entries of
        logs not opened (yet), so a write never forgets them."""
        if self._loaded_recovery_points is None:
            try:
                self._loaded_recovery_points = self._recovery_points.read()
            except CorruptCheckpointError as e:
                # Safe fallback: every log is validated in full.
                log.warning("%s; recovering all logs from offset 0", e)
                self._loaded_recovery_points = {}
        return self._loaded_recovery_points

    def _recovery_point_for(self, tp: tuple[str, int]) -> int:
        with self._rp_lock:
            return self._known_recovery_points().get(tp, 0)

    # -- logs --------------------------------------------------------------

    def load_existing(self) -> dict[tuple[str, int], Log]:
        """Open (and recover) every partition directory in the log dir; remove
        the leftovers of interrupted deletions. Called once at startup."""
        with self._lock:
            for p in sorted(self.log_dir.iterdir()):
                if not p.is_dir():
                    continue
                if p.name.endswith(DELETE_SUFFIX):
                    shutil.rmtree(p, ignore_errors=True)
                    continue
                tp = parse_partition_dir(p.name)
                if tp is None or tp in self._logs:
                    continue
                self._logs[tp] = self._open(p, tp)
                log.info("loaded %r", self._logs[tp])
            return dict(self._logs)

    def _open(self, dir: Path, tp: tuple[str, int]) -> Log:
        checkpointed = self._recovery_point_for(tp)
        lg = Log(dir, self.config, checkpointed)
        lg.on_recovery_point_change = lambda _lg: self.checkpoint_recovery_points()
        if lg.recovery_point != checkpointed:
            # Recovery cut the log below its checkpointed recovery point.
            with self._rp_lock:
                self._known_recovery_points()[tp] = lg.recovery_point
            self.checkpoint_recovery_points()
        return lg

    def get_log(self, topic: str, partition: int) -> Log | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        tp = (topic, partition)
        with self._lock:
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            if parse_partition_dir(partition_dir_name(topic, partition)) != tp:
                raise ValueError(f"invalid topic name {topic!r}")
            new = self._open(self.log_dir / partition_dir_name(topic, partition), tp)
            fsync_dir(self.log_dir)
            self._logs[tp] = new
            return new

    def all_logs(self) -> dict[tuple[str, int], Log]:
        with self._lock:
            return dict(self._logs)

    def delete_log(self, topic: str, partition: int) -> None:
        """Remove the replica's log and directory (StopReplica with delete)."""
        tp = (topic, partition)
        with self._lock:
            lg = self._logs.pop(tp, None)
            d = self.log_dir / partition_dir_name(topic, partition)
            if lg is not None:
                lg.on_recovery_point_change = None
                lg.close(flush=False)
            if d.exists():
                doomed = d.with_name(f"{d.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
                d.rename(doomed)
                fsync_dir(self.log_dir)
                shutil.rmtree(doomed, ignore_errors=True)
            self.checkpoint_recovery_points(forget=tp)

    # -- checkpoints ---------------------------------------------------------

    def checkpoint_high_watermarks(self, hws: dict[tuple[str, int], int]) -> None:
        """Replace the high-watermark checkpoint with `hws` (all partitions)."""
        self._hw.write(hws)

    def read_high_watermarks(self) -> dict[tuple[str, int], int]:
        return self._hw.read()

    def checkpoint_recovery_points(self, forget: tuple[str, int] | None = None) -> None:
        """Write every log's recovery point (what a power loss cannot lose),
        dropping `forget` (a deleted log). Called by the logs themselves
        whenever one moves."""
        with self._rp_lock:
            points = dict(self._known_recovery_points())
            points.pop(forget, None)
            # list(): one atomic copy, safe while another thread adds a log.
            for tp, lg in list(self._logs.items()):
                points[tp] = lg.recovery_point
            self._recovery_points.write(points)
            self._loaded_recovery_points = points

    def read_recovery_points(self) -> dict[tuple[str, int], int]:
        return self._recovery_points.read()

    # -- durability and lifecycle -----------------------------------------------

    def flush_all(self) -> None:
        for lg in self.all_logs().values():
            lg.flush()
        self.checkpoint_recovery_points()

    def flush_if_due(self, now_ms: int | None = None) -> None:
        """Apply the time flush policy to every log (the broker's periodic
        flusher); the logs that flush update the recovery-point checkpoint."""
        for lg in self.all_logs().values():
            lg.flush_if_due(now_ms)

    def apply_retention(self, now_ms: int | None = None,
                        high_watermarks: dict[tuple[str, int], int] | None = None) -> int:
        """Run retention on every log; returns the number of segments deleted."""
        with self._lock:
            logs = list(self._logs.items())
        n = 0
        for tp, lg in logs:
            hw = high_watermarks.get(tp) if high_watermarks is not None else None
            n += lg.maybe_apply_retention(now_ms, high_watermark=hw)
        return n

    def close(self) -> None:
        """Clean shutdown: flush and close every log, then record the recovery
        points (all equal to the LEOs now)."""
        with self._lock:
            for lg in self._logs.values():
                lg.on_recovery_point_change = None
                lg.close()
            self.checkpoint_recovery_points()
            self._logs.clear()
