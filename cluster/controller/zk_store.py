"""Batched ZooKeeper reads and writes for the controller.

Failing over 10,000 partitions one write at a time takes too long, so writes
use ZooKeeper 3.4's multi() (docs/design.md#event-queue). Measured on the
project's 2-core machines: kazoo multi transactions of 100 ops reach 50,000+ znodes/s,
pipelined *_async single ops 2,500-5,000/s. So:

* reads are pipelined *_async calls, a window of them in flight;
* writes are multi transactions of up to CHUNK ops, all committed
  asynchronously. Every transaction begins with a check of the
  /controller_epoch znode version this controller wrote when it was elected,
  so a deposed (zombie) controller can change nothing (Kafka 2.2 did the same,
  KAFKA-7235); that check failing raises ControllerMovedError.
* a multi is all-or-nothing: when one op fails (say a BadVersion because a
  leader changed the ISR meanwhile) the others are retried without it and the
  failed op is reported, so the caller can re-read and retry that partition
  (docs/design.md#partition-states).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import (BadVersionError, NoNodeError, NodeExistsError,
                              NotEmptyError, RolledBackError)

from cluster import zkpaths
from cluster.zkpaths import BrokerRegistration, LeaderAndIsr, TopicAssignment

from .context import TP

log = logging.getLogger("chaoslog.controller")

CHUNK = 100
WINDOW = 2000


class ControllerMovedError(Exception):
    """/controller_epoch changed under us: another controller was elected."""


@dataclass
class Op:
    """One transaction operation: kind is create | set | delete | check."""
    kind: str
    path: str
    data: bytes = b""
    version: int = -1
    key: Any = None


class ZkStore:
    def __init__(self, zk: KazooClient, timeout: float = 30.0) -> None:
        self.zk = zk
        self.timeout = timeout
        self.epoch_version: int | None = None  # None: writes are not fenced (admin use)
        self.guard = None  # called before every write batch; may raise

    # -- reads -------------------------------------------------------------
    def get_many(self, paths: Iterable[str], watch: Callable | None = None
                 ) -> dict[str, tuple[bytes, Any] | None]:
        """path -> (data, stat), or None when the znode does not exist."""
        out: dict[str, tuple[bytes, Any] | None] = {}
        paths = list(paths)
        for i in range(0, len(paths), WINDOW):
            window = paths[i:i + WINDOW]
            pend = [(p, self.zk.get_async(p, watch=watch)) for p in window]
            for p, a in pend:
                try:
                    out[p] = a.get(timeout=self.timeout)
                except NoNodeError:
                    out[p] = None
        return out

    def children_many(self, paths: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        paths = list(paths)
        for i in range(0, len(paths), WINDOW):
            pend = [(p, self.zk.get_children_async(p)) for p in paths[i:i + WINDOW]]
            for p, a in pend:
                try:
                    out[p] = a.get(timeout=self.timeout)
                except NoNodeError:
                    out[p] = []
        return out

    def read_brokers(self, ids: Iterable[int], created: dict[int, int] | None = None
                     ) -> dict[int, BrokerRegistration]:
        """Live brokers' registrations; `created`, if given, gets each
        registration's creation zxid (when that broker last started)."""
        got = self.get_many(zkpaths.broker_path(b) for b in ids)
        out = {}
        for path, v in got.items():
            if v is not None:
                bid = int(path.rsplit("/", 1)[1])
                if created is not None:
                    created[bid] = v[1].czxid
                try:
                    out[bid] = BrokerRegistration.decode(bid, v[0])
                except (ValueError, KeyError, TypeError):
                    log.error("unreadable broker registration at %s: %r", path, v[0])
        return out

    def read_assignments(self, topics: Iterable[str]) -> dict[str, tuple[TopicAssignment, int]]:
        out = {}
        for path, v in self.get_many(zkpaths.topic_path(t) for t in topics).items():
            if v is None:
                continue
            topic = path.rsplit("/", 1)[1]
            try:
                out[topic] = (TopicAssignment.decode(v[0]), v[1].version)
            except (ValueError, KeyError, TypeError, AttributeError):
                log.error("unreadable assignment of topic %s: %r", topic, v[0])
        return out

    def read_leader_and_isr(self, tps: Iterable[TP], watch: Callable | None = None,
                            modified: dict[TP, int] | None = None) -> dict[TP, LeaderAndIsr | None]:
        """`modified`, if given, gets the zxid of each znode's last write."""
        tps = list(tps)
        got = self.get_many((zkpaths.leader_and_isr_path(t, p) for t, p in tps), watch=watch)
        out: dict[TP, LeaderAndIsr | None] = {}
        for tp in tps:
            v = got.get(zkpaths.leader_and_isr_path(*tp))
            if v is None:
                out[tp] = None
                continue
            if modified is not None:
                modified[tp] = v[1].mzxid
            try:
                out[tp] = LeaderAndIsr.decode(v[0], v[1].version)
            except (ValueError, KeyError, TypeError, AttributeError):
                log.error("unreadable leaderAndISR of %s: %r", tp, v[0])
                out[tp] = None
        return out

    # -- writes ------------------------------------------------------------
    def run(self, ops: list[Op], fenced: bool = True) -> dict[int, Any]:
        """Run ops in multi transactions of up to CHUNK; returns index -> result
        or exception for every op. Ops of one chunk are atomic together only
        when they all succeed; a failing op is reported and the rest retried."""
        if self.guard is not None:
            self.guard()
        results: dict[int, Any] = {}
        todo = [list(range(i, min(i + CHUNK, len(ops)))) for i in range(0, len(ops), CHUNK)]
        check = fenced and self.epoch_version is not None
        while todo:
            inflight = []
            for idxs in todo:
                tx = self.zk.transaction()
                if check:
                    tx.check(zkpaths.CONTROLLER_EPOCH, self.epoch_version)
                for i in idxs:
                    op = ops[i]
                    if op.kind == "create":
                        tx.create(op.path, op.data)
                    elif op.kind == "set":
                        tx.set_data(op.path, op.data, op.version)
                    elif op.kind == "delete":
                        tx.delete(op.path, op.version)
                    elif op.kind == "check":
                        tx.check(op.path, op.version)
                    else:
                        raise ValueError(op.kind)
                inflight.append((idxs, tx.commit_async()))
            todo = []
            for idxs, a in inflight:
                res = a.get(timeout=self.timeout)
                if check:
                    head, res = res[0], res[1:]
                    if isinstance(head, Exception) and not isinstance(head, RolledBackError):
                        raise ControllerMovedError(
                            f"/controller_epoch is no longer at version {self.epoch_version}")
                failed = [k for k, r in enumerate(res)
                          if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
                if not failed:
                    for i, r in zip(idxs, res):
                        results[i] = r
                    continue
                # ZooKeeper reports the first failing op; retry the rest without it
                k = failed[0]
                results[idxs[k]] = res[k]
                rest = idxs[:k] + idxs[k + 1:]
                if rest:
                    todo.append(rest)
        return results

    def update_leader_and_isr(self, updates: dict[TP, LeaderAndIsr]
                              ) -> tuple[dict[TP, LeaderAndIsr], set[TP]]:
        """Conditional writes (each value's zk_version is the expected version).
        Returns (written, with their new zk_version; failed: BadVersion or gone)."""
        keys = list(updates)
        ops = [Op("set", zkpaths.leader_and_isr_path(*tp), updates[tp].encode(),
                  updates[tp].zk_version) for tp in keys]
        res = self.run(ops)
        ok: dict[TP, LeaderAndIsr] = {}
        failed: set[TP] = set()
        for i, tp in enumerate(keys):
            r = res[i]
            if isinstance(r, Exception):
                failed.add(tp)
            else:
                v = updates[tp]
                ok[tp] = LeaderAndIsr(v.leader, v.leader_epoch, v.isr, v.controller_epoch, r.version)
        return ok, failed

    def create_leader_and_isr(self, creates: dict[TP, LeaderAndIsr]
                              ) -> tuple[dict[TP, LeaderAndIsr], set[TP]]:
        """Create /brokers/topics/T/P (if needed) and its leaderAndISR.
        Returns (created, with zk_version 0; already existing)."""
        keys = list(creates)
        parents = self.get_many(zkpaths.partition_path(*tp) for tp in keys)
        ops: list[Op] = []
        idx_of: dict[int, TP] = {}
        for tp in keys:
            if parents.get(zkpaths.partition_path(*tp)) is None:
                ops.append(Op("create", zkpaths.partition_path(*tp)))
            idx_of[len(ops)] = tp
            ops.append(Op("create", zkpaths.leader_and_isr_path(*tp), creates[tp].encode()))
        res = self.run(ops)
        ok: dict[TP, LeaderAndIsr] = {}
        exists: set[TP] = set()
        for i, tp in idx_of.items():
            r = res[i]
            if isinstance(r, Exception):
                if not isinstance(r, (NodeExistsError, NoNodeError)):
                    log.error("creating leaderAndISR of %s failed: %r", tp, r)
                exists.add(tp)
            else:
                v = creates[tp]
                ok[tp] = LeaderAndIsr(v.leader, v.leader_epoch, v.isr, v.controller_epoch, 0)
        return ok, exists

    def delete_trees(self, roots: Iterable[str], fenced: bool = True) -> None:
        """Delete each root and everything under it, deepest first, batched."""
        levels: list[list[str]] = []
        frontier = [r for r in roots]
        while frontier:
            levels.append(frontier)
            kids = self.children_many(frontier)
            frontier = [f"{p}/{c}" for p in frontier for c in kids.get(p, [])]
        for level in reversed(levels):
            res = self.run([Op("delete", p) for p in level], fenced=fenced)
            for i, r in res.items():
                if isinstance(r, NotEmptyError):
                    # someone created a child meanwhile: go around once more
                    self.delete_trees([level[i]], fenced)
                elif isinstance(r, Exception) and not isinstance(r, NoNodeError):
                    log.error("deleting %s failed: %r", level[i], r)

    def set_conditional(self, path: str, data: bytes, version: int) -> int:
        """One fenced conditional set; returns the new version; raises
        BadVersionError / NoNodeError."""
        r = self.run([Op("set", path, data, version)])[0]
        if isinstance(r, Exception):
            raise r
        return r.version

    def delete_one(self, path: str, version: int = -1) -> bool:
        r = self.run([Op("delete", path, version=version)])[0]
        if isinstance(r, NoNodeError):
            return False
        if isinstance(r, Exception):
            raise r
        return True


__all__ = ["ZkStore", "Op", "ControllerMovedError", "BadVersionError"]
