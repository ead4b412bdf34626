"""Recording a run: history.jsonl, run.json and the artifacts a checker needs.

The history is the only evidence a run leaves (docs/history-format.md
is the contract). So the recorder, not the workers, owns the three things that
must be globally consistent: `index` (one total order), `time` (one monotonic
clock, read under the same lock, so it never decreases along the index) and the
`op`/`process` numbering (so "one op outstanding per process" and "retire a
process after info" hold no matter how many workers report concurrently).

Lines are buffered in memory and written with plain os.write of whole lines at
least every `flush_interval` seconds: a crash of the harness loses at most that
much, and never leaves half a line behind from our side.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator

# A consumer group's commits and rebalances go beside the history, in
# groups.jsonl (docs/history-format.md): v1 readers know only send, poll and nemesis.
from reports.groups import GROUPS_FILE

FORMAT = 1
NEMESIS_PROCESS = -1
TYPES = ("invoke", "ok", "fail", "info")
FUNCTIONS = ("send", "poll", "txn", "nemesis")

# Field order on disk: the fixed head, then the optional fields.
_HEAD = ("index", "time", "process", "op", "type", "f")
_OPTIONAL = ("topic", "partition", "value", "offset", "records", "high_watermark",
             "final", "error", "node", "fault", "phase", "targets", "detail",
             "log_start_offset", "group",    # (docs/history-format.md, "Extensions")
             "txn", "intent", "isolation", "source")   # ("Transactions")
_ALLOWED = frozenset(_HEAD + _OPTIONAL)
# Carried from an invocation onto its completion when the completion omits them.
_INHERITED = ("topic", "partition", "value", "final", "node", "group", "txn", "intent",
              "isolation")


class HistoryError(RuntimeError):
    """An event that would break a rule of the history format."""


def encode(event: dict[str, Any]) -> str:
    ordered = {k: event[k] for k in _HEAD if k in event}
    ordered.update((k, event[k]) for k in _OPTIONAL if event.get(k) is not None)
    return json.dumps(ordered, separators=(",", ":")) + "\n"


class HistoryRecorder:
    """Thread-safe writer of history.jsonl.

    Clients are named by an *actor* key (any hashable: a worker slot, a test
    name). The recorder maps each actor to its current process id and gives
    it a fresh one after an `info` completion, as the format requires.
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], int] = time.monotonic_ns,
                 flush_interval: float = 0.5, start_ns: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._start = clock() if start_ns is None else start_ns
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._buf: list[str] = []
        self._index = 0
        self._last_time = 0
        self._next_op = 0
        self._next_process = 0
        self._actors: dict[Hashable, int] = {}
        self._outstanding: dict[int, tuple[Hashable, dict[str, Any]]] = {}  # op -> (actor, invoke)
        self._busy: dict[Hashable, int] = {}  # actor -> its outstanding op
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        self._closed = False
        self._groups_fd: int | None = None
        self._group_seq = 0
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, args=(flush_interval,),
                                         name="history-flush", daemon=True)
        self._flusher.start()

    @property
    def run_dir(self) -> Path:
        """The run directory this history belongs to."""
        return self.path.parent

    # -- the clock ----------------------------------------------------------
    def now(self) -> int:
        """Nanoseconds since the run started (the `time` of an event made now)."""
        return self._clock() - self._start

    # -- low level ----------------------------------------------------------
    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call `listener(event)` for every event, in index order, under the
        recorder's lock: keep it cheap and never call back into the recorder."""
        with self._lock:
            self._listeners.append(listener)

    def _append(self, event: dict[str, Any]) -> dict[str, Any]:
        # Caller holds the lock.
        if self._closed:
            raise HistoryError("the history is closed")
        unknown = set(event) - _ALLOWED
        if unknown:
            raise HistoryError(f"unknown history fields {sorted(unknown)}")
        t = max(self._last_time, self.now())
        self._last_time = t
        event["index"] = self._index
        event["time"] = t
        self._index += 1
        self._buf.append(encode(event))
        for listener in self._listeners:
            listener(event)
        return event

    def _process_of(self, actor: Hashable) -> int:
        p = self._actors.get(actor)
        if p is None:
            p = self._actors[actor] = self._next_process
            self._next_process += 1
        return p

    # -- client ops ---------------------------------------------------------
    def invoke(self, actor: Hashable, f: str, **fields: Any) -> int:
        """Record an invocation; returns its op id."""
        if f not in ("send", "poll", "txn"):
            raise HistoryError(f"client ops are send, poll or txn, not {f!r}")
        with self._lock:
            process = self._process_of(actor)
            if actor in self._busy:
                raise HistoryError(f"actor {actor!r} already has op {self._busy[actor]} outstanding")
            op = self._next_op
            self._next_op += 1
            event = self._append({"process": process, "op": op, "type": "invoke", "f": f, **fields})
            self._outstanding[op] = (actor, event)
            self._busy[actor] = op
            return op

    def complete(self, op: int, type: str, **fields: Any) -> dict[str, Any]:
        """Record the completion of `op`: ok, fail or info. After info the
        actor's process id is retired."""
        if type not in ("ok", "fail", "info"):
            raise HistoryError(f"a completion is ok, fail or info, not {type!r}")
        with self._lock:
            try:
                actor, inv = self._outstanding.pop(op)
            except KeyError:
                raise HistoryError(f"op {op} is not outstanding") from None
            del self._busy[actor]
            for k in _INHERITED:
                if fields.get(k) is None and inv.get(k) is not None:
                    fields[k] = inv[k]
            event = self._append({"process": inv["process"], "op": op, "type": type,
                                  "f": inv["f"], **fields})
            if type == "info":
                self._actors.pop(actor, None)
            return event

    def outstanding(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(inv) for _, inv in self._outstanding.values()]

    # -- consumer groups ----------------------------------------------------
    def group_event(self, **fields: Any) -> dict[str, Any]:
        """A line of groups.jsonl: `time` on the history's clock, `index` the
        history index of the next event (it happened after every history
        event below it), `seq` its place among group events. Written at once:
        there are few, and a crash must not reorder them against the history."""
        with self._lock:
            if self._closed:
                raise HistoryError("the history is closed")
            if self._groups_fd is None:
                self._groups_fd = os.open(self.path.parent / GROUPS_FILE,
                                          os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            t = max(self._last_time, self.now())
            self._last_time = t
            event = {"time": t, "index": self._index, "seq": self._group_seq, **fields}
            self._group_seq += 1
            os.write(self._groups_fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())
            return event

    # -- nemesis ------------------------------------------------------------
    def nemesis(self, fault: str, phase: str, targets: list[str] | tuple[str, ...] = (),
                detail: Any = None) -> dict[str, Any]:
        """A nemesis event: process -1, type info, its own op id."""
        if phase not in ("start", "stop"):
            raise HistoryError(f"a nemesis phase is start or stop, not {phase!r}")
        if detail is not None and not isinstance(detail, str):
            detail = json.dumps(detail, separators=(",", ":"), sort_keys=True)
        with self._lock:
            op = self._next_op
            self._next_op += 1
            return self._append({"process": NEMESIS_PROCESS, "op": op, "type": "info",
                                 "f": "nemesis", "fault": fault, "phase": phase,
                                 "targets": sorted(str(t) for t in targets), "detail": detail})

    # -- durability ---------------------------------------------------------
    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._buf:
            return
        data = "".join(self._buf).encode()
        self._buf.clear()
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def _flush_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.flush()
            except OSError:
                return

    def close(self, reason: str = "history closed with the op outstanding") -> None:
        """Complete every outstanding op as info (its outcome is unknown:
        rule 1 wants a completion for every invocation), flush, close."""
        for op in sorted(self._outstanding_ops()):
            try:
                self.complete(op, "info", error=reason)
            except HistoryError:
                pass
        self._stop.set()
        self._flusher.join(timeout=5)
        with self._lock:
            if self._closed:
                return
            self._flush_locked()
            self._closed = True
            os.fsync(self._fd)
            os.close(self._fd)
            if self._groups_fd is not None:
                os.close(self._groups_fd)

    def _outstanding_ops(self) -> list[int]:
        with self._lock:
            return list(self._outstanding)

    @property
    def count(self) -> int:
        return self._index

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "HistoryRecorder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class HistoryStats:
    """Running counts for the progress line and for the final reads: ops by
    outcome, errors, active faults, highest acknowledged offset per partition."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.errors: dict[str, int] = {}
        self.active_faults: dict[str, list[str]] = {}
        self.acked: dict[tuple[str, int], int] = {}
        self.last_time = 0

    def __call__(self, e: dict[str, Any]) -> None:
        self.last_time = e["time"]
        if e["f"] == "nemesis":
            if e["phase"] == "start":
                self.active_faults[e["fault"]] = e["targets"]
            else:
                self.active_faults.pop(e["fault"], None)
            return
        key = (e["f"], e["type"])
        self.counts[key] = self.counts.get(key, 0) + 1
        if e.get("error"):
            self.errors[e["error"]] = self.errors.get(e["error"], 0) + 1
        if e["f"] == "send" and e["type"] == "ok" and e.get("offset") is not None:
            tp = (e["topic"], e["partition"])
            if e["offset"] > self.acked.get(tp, -1):
                self.acked[tp] = e["offset"]

    def completed(self) -> int:
        return sum(n for (f, t), n in self.counts.items() if t != "invoke")

    def failed(self) -> int:
        return sum(n for (f, t), n in self.counts.items() if t in ("fail", "info"))


def read_history(path: str | Path) -> Iterator[dict[str, Any]]:
    """Events of a history.jsonl; a torn last line (a crash mid-write by some
    other writer) is ignored."""
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                return
            yield json.loads(line)


# -- run directory artifacts ---------------------------------------------------

def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:6]


def utc_now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_run_json(run_dir: str | Path, *, run: str, seed: Any, cluster: dict[str, Any],
                   workload: dict[str, Any], faults: list[str], started_at: str | None = None,
                   **extra: Any) -> Path:
    """run.json as the format wants it; `extra` keys (outcome, schedule, ...) are added."""
    meta = {"format": FORMAT, "run": run, "seed": seed,
            "started_at": started_at or utc_now_iso(),
            "cluster": cluster, "workload": workload, "faults": list(faults), **extra}
    path = Path(run_dir) / "run.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return path


def update_run_json(run_dir: str | Path, **fields: Any) -> None:
    path = Path(run_dir) / "run.json"
    meta = json.loads(path.read_text())
    meta.update(fields)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def collect_logs(cluster: Any, run_dir: str | Path) -> list[str]:
    """Every node's log into RUN_DIR/logs/<node>.log; returns the problems met
    (a log that cannot be read is noted, not fatal: the history matters more)."""
    out = Path(run_dir) / "logs"
    out.mkdir(parents=True, exist_ok=True)
    problems = []
    for name in [n.name for n in cluster.nodes()]:
        try:
            text = cluster.logs(name)
        except Exception as e:  # noqa: BLE001 - any backend failure is just noted
            problems.append(f"{name}: {e}")
            text = f"(chaoslog: could not read the log of {name}: {e})\n"
        (out / f"{name}.log").write_text(text)
    return problems


def dump_zookeeper(hosts: str, run_dir: str | Path, *, timeout: float = 10.0,
                   root: str = "/") -> Path:
    """The ZooKeeper tree into RUN_DIR/zookeeper.json: path -> data string
    (undecodable bytes as \\ufffd), read recursively through kazoo."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, timeout=timeout)
    zk.start(timeout=timeout)
    tree: dict[str, str | None] = {}
    try:
        stack = [root]
        while stack:
            path = stack.pop()
            if path == "/zookeeper" or path.startswith("/zookeeper/"):
                continue  # ZooKeeper's own quota/config nodes
            try:
                data, _ = zk.get(path)
                children = zk.get_children(path)
            except Exception:  # noqa: BLE001 - a node deleted while we walk
                continue
            tree[path] = data.decode("utf-8", "replace") if data is not None else None
            base = path.rstrip("/")
            stack.extend(f"{base}/{c}" for c in children)
    finally:
        zk.stop()
        zk.close()
    path = Path(run_dir) / "zookeeper.json"
    path.write_text(json.dumps(dict(sorted(tree.items())), indent=1) + "\n")
    return path
