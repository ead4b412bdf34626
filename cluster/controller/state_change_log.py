"""The state-change log (docs/design.md#state-change-log): every partition
and replica state change, every request sent to a broker and every request a
broker rejected, with the controller epoch, leader epoch and target broker, so
that the whole lifecycle of a change can be followed.

Records go to the Python logger at once and, at the end of each event, to
ZooKeeper as sequential znodes /state_change_log/entry-NNNNNNNNNN, each a JSON
list of records of one event (an event with many records is split over several
entries, because a znode holds at most 1 MB). Only the newest MAX_ENTRIES
entries are kept. The entries are history, not state: they are written
without the controller-epoch check, so a deposed controller's "rejected"
records still reach the log."""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, ZookeeperError

from cluster import zkpaths

MAX_ENTRIES = 10_000
MAX_ENTRY_BYTES = 400_000
ENTRY_PREFIX = zkpaths.STATE_CHANGE_LOG + "/entry-"
FIELDS = ("time", "controller_id", "controller_epoch", "event", "kind", "topic", "partition",
          "from", "to", "leader", "leader_epoch", "isr", "target_broker")


def _entry_path(seq: int) -> str:
    return f"{ENTRY_PREFIX}{seq:010d}"


class StateChangeLog:
    def __init__(self, zk: KazooClient, controller_id: int,
                 logger: logging.Logger | None = None) -> None:
        self.zk = zk
        self.controller_id = controller_id
        self.log = logger or logging.getLogger("chaoslog.state_change")
        self.epoch = 0
        self.event = ""
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._oldest: int | None = None  # lowest entry sequence that may still exist
        self.guard = None  # called before recording a state change; may raise

    def begin(self, event: str) -> None:
        self.event = event

    def record(self, kind: str, topic: str | None = None, partition: int | None = None, *,
               from_state: str | None = None, to_state: str | None = None,
               leader: int | None = None, leader_epoch: int | None = None,
               isr: Iterable[int] | None = None, target_broker: int | None = None,
               event: str | None = None, epoch: int | None = None,
               level: int = logging.INFO, note: str | None = None) -> dict[str, Any]:
        if self.guard is not None and kind not in ("rejected", "controller"):
            self.guard()
        rec = {"time": round(time.time(), 3), "controller_id": self.controller_id,
               "controller_epoch": self.epoch if epoch is None else epoch,
               "event": event or self.event, "kind": kind, "topic": topic,
               "partition": partition, "from": from_state, "to": to_state, "leader": leader,
               "leader_epoch": leader_epoch, "isr": None if isr is None else list(isr),
               "target_broker": target_broker}
        if note:
            rec["note"] = note
        if self.log.isEnabledFor(level):
            self.log.log(level, "controller %d epoch %d %s: %s %s-%s %s -> %s leader %s "
                         "leader_epoch %s isr %s broker %s%s", self.controller_id,
                         rec["controller_epoch"], rec["event"], kind, topic, partition,
                         from_state, to_state, leader, leader_epoch, rec["isr"],
                         target_broker, f" ({note})" if note else "")
        with self._lock:
            self._pending.append(rec)
        return rec

    def discard(self) -> None:
        with self._lock:
            self._pending.clear()

    def flush(self, timeout: float = 30.0) -> None:
        """Write the pending records to ZooKeeper (pipelined) and trim old entries."""
        with self._lock:
            recs, self._pending = self._pending, []
        if not recs:
            return
        chunks: list[bytes] = []
        cur: list[str] = []
        size = 2
        for r in recs:
            s = json.dumps(r, separators=(",", ":"))
            if cur and size + len(s) + 1 > MAX_ENTRY_BYTES:
                chunks.append(("[" + ",".join(cur) + "]").encode())
                cur, size = [], 2
            cur.append(s)
            size += len(s) + 1
        chunks.append(("[" + ",".join(cur) + "]").encode())
        try:
            results = [self.zk.create_async(ENTRY_PREFIX, c, sequence=True) for c in chunks]
            newest = -1
            for res in results:
                path = res.get(timeout=timeout)
                newest = max(newest, int(path.rsplit("-", 1)[1]))
            self._trim(newest, timeout)
        except (ZookeeperError, Exception) as e:  # history must never break the controller
            self.log.warning("could not write %d state-change records to ZooKeeper: %r",
                             len(recs), e)

    def _trim(self, newest: int, timeout: float) -> None:
        if self._oldest is None:
            seqs = [int(c.rsplit("-", 1)[1]) for c in
                    self.zk.get_children(zkpaths.STATE_CHANGE_LOG) if c.startswith("entry-")]
            self._oldest = min(seqs) if seqs else newest
        limit = newest - MAX_ENTRIES  # delete every entry with seq <= limit
        if self._oldest > limit:
            return
        pend = [self.zk.delete_async(_entry_path(s)) for s in range(self._oldest, limit + 1)]
        for p in pend:
            try:
                p.get(timeout=timeout)
            except NoNodeError:
                pass
        self._oldest = limit + 1


def read_state_log(zk: KazooClient, topic: str | None = None, partition: int | None = None,
                   timeout: float = 30.0) -> list[dict[str, Any]]:
    """All retained records, oldest first, optionally only those of one topic
    (and partition). Records without a topic (events, broker-wide requests)
    are kept only when no filter is given."""
    try:
        names = sorted(c for c in zk.get_children(zkpaths.STATE_CHANGE_LOG) if c.startswith("entry-"))
    except NoNodeError:
        return []
    pend = [zk.get_async(f"{zkpaths.STATE_CHANGE_LOG}/{n}") for n in names]
    out: list[dict[str, Any]] = []
    for p in pend:
        try:
            data, _ = p.get(timeout=timeout)
        except NoNodeError:  # trimmed meanwhile
            continue
        for r in json.loads(data.decode()) if data else []:
            if topic is not None and r.get("topic") != topic:
                continue
            if partition is not None and r.get("partition") != partition:
                continue
            out.append(r)
    return out
