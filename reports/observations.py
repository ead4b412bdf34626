"""What the harness observed of the cluster itself, and the oracles that judge it.

A run directory may hold `observations.jsonl` beside the history
(docs/history-format.md, "observations.jsonl"): ZooKeeper `metadata` samples,
the `recovery` after the final heal, each broker's own Metadata answer
(`broker-metadata`), every replica's files (`replica`) and each broker's
own state about every second (`broker-state`: read here, judged by
reports/invariants.py). The oracles that
read only those are plain functions here, used by both checkers (one
definition, so they cannot disagree); the two that also need the clients'
sends (`ack-below-min-isr`, the partition part of `unrecovered`) get their
inputs from here and each checker joins them with its sends.

Every function returns anomaly instances (dicts with topic, partition and
the offsets, brokers or times involved, and `time`: when the evidence was
taken); docs/anomalies.md defines each, reports/registry.py lists each
checker's function calling them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from reports.errors import HistoryError
from reports.figures import NS_PER_SECOND
from reports.incarnations import Incarnations, from_lines

OBSERVATIONS_FILE = "observations.jsonl"
NS = NS_PER_SECOND
# Two samples further apart than this are not evidence of what happened
# between them (ZooKeeper was paused or cut off from the harness).
MAX_SAMPLE_GAP_NS = 3 * NS
# How long a partition may stay leaderless (run.json `checks.leaderless_s` overrides it).
LEADERLESS_S = 20.0


@dataclass
class Observed:
    metadata: list[dict] = field(default_factory=list)   # in time order
    recovery: dict | None = None
    brokers: list[dict] = field(default_factory=list)
    replicas: list[dict] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)     # broker-state samples, in time order
    present: bool = False
    bounds: dict = field(default_factory=dict)   # run.json `checks`
    incarnations: Incarnations = field(default_factory=Incarnations)

    @property
    def versioned(self) -> list[dict]:
        """The `metadata` samples read in ZooKeeper: those carry leader epochs
        and leaderAndISR versions. Samples of a target without ZooKeeper
        (`source` "kafka": a broker's Metadata answer) carry neither."""
        return [s for s in self.metadata if s.get("source", "zookeeper") != "kafka"]


def read_observations(run_dir: Path, bounds: dict | None = None) -> Observed:
    """The observations of a run directory (none: an empty Observed). A line
    cut by a crash at the end is ignored; any other unreadable line is a
    HistoryError naming the file and line. `bounds`: run.json's `checks`."""
    path = Path(run_dir) / OBSERVATIONS_FILE
    out = Observed(bounds=dict(bounds or {}))
    if not path.is_file():
        return out
    out.present = True
    parsed = list(_lines(path))
    # Topics deleted and created again are judged per incarnation (reports/incarnations.py).
    out.incarnations = from_lines(parsed)
    for obs in parsed:
        obs = out.incarnations.rename_observation(obs)
        kind = obs.get("kind")
        if kind == "metadata":
            out.metadata.append(obs)
        elif kind == "recovery":
            out.recovery = obs
        elif kind == "broker-metadata":
            out.brokers.append(obs)
        elif kind == "replica":
            out.replicas.append(obs)
        elif kind == "broker-state":
            out.states.append(obs)
    out.metadata.sort(key=lambda o: o["time"])
    out.states.sort(key=lambda o: o["time"])
    return out


def _lines(path: Path):
    with open(path, "rb") as fh:
        lines = fh.read().split(b"\n")
    last = len(lines) - 1
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obs = json.loads(raw)
            if not isinstance(obs, dict) or not isinstance(obs.get("time"), int):
                raise ValueError("not an object with an integer time")
        except ValueError as e:
            if n - 1 == last:  # the writer died mid-line
                return
            raise HistoryError(path, n, f"not an observation: {e}") from None
        yield obs


def read_incarnations(run_dir: Path) -> Incarnations:
    """Only the re-creations of a run's topics (none: empty), read before
    the history: each checker renames the ops by them as it reads."""
    path = Path(run_dir) / OBSERVATIONS_FILE
    if not path.is_file():
        return Incarnations()
    found = []
    with open(path, "rb") as fh:
        for raw in fh:
            if b'"topic-create"' in raw:
                try:
                    found.append(json.loads(raw))
                except ValueError:
                    continue  # (read_observations names the line)
    return from_lines(o for o in found if isinstance(o, dict))


def _tp(p: dict) -> tuple[str, int]:
    return p["topic"], p["partition"]


# -- metadata at every sample -------------------------------------------------------------

def isr_invariant(obs: Observed) -> list[dict]:
    """The leader is in the ISR; ISR and leader are assigned replicas (or the
    targets of a pending reassignment)."""
    out = []
    for s in obs.metadata:
        for p in s["partitions"]:
            allowed = set(p["replicas"]) | set(s.get("reassigning", {}).get(f"{p['topic']}/{p['partition']}", ()))
            rules = []
            if p["leader"] >= 0 and p["leader"] not in p["isr"]:
                rules.append("leader not in ISR")
            if not set(p["isr"]) <= allowed:
                rules.append("ISR not a subset of the replicas")
            if p["leader"] >= 0 and p["leader"] not in allowed:
                rules.append("leader not a replica")
            for rule in rules:
                out.append({"topic": p["topic"], "partition": p["partition"], "time": s["time"],
                            "rule": rule, "leader": p["leader"], "isr": p["isr"],
                            "replicas": p["replicas"]})
    return out


def _v2_vacancy(p: dict) -> bool:
    """A V2 partition (controller epoch -1: no controller wrote it) whose
    leader lock is free: its leader died and none is elected yet. No one
    writes that state, so its epoch cannot change (docs/design.md#v2); a
    controller marks it with a new epoch."""
    return p.get("controller_epoch") == -1 and p["leader"] == -1


def epoch_regression(obs: Observed) -> list[dict]:
    """Controller epoch, leader epochs and leaderAndISR versions never go
    back; a new leader comes with a new leader epoch."""
    out = []
    last_controller: int | None = None
    last: dict[tuple[str, int], dict] = {}
    for s in obs.versioned:
        ce = s.get("controller_epoch")
        if ce is not None:
            if last_controller is not None and ce < last_controller:
                out.append({"topic": None, "partition": None, "time": s["time"],
                            "what": "controller epoch", "previous": last_controller,
                            "current": ce})
            last_controller = ce
        present = set()
        for p in s["partitions"]:
            tp = _tp(p)
            present.add(tp)
            prev = last.get(tp)
            if prev is not None:
                def flag(what, a, b):
                    out.append({"topic": tp[0], "partition": tp[1], "time": s["time"], "what": what,
                                "previous": a, "current": b})
                if p["zk_version"] < prev["zk_version"]:
                    flag("leaderAndISR version", prev["zk_version"], p["zk_version"])
                elif p["leader_epoch"] < prev["leader_epoch"]:
                    flag("leader epoch", prev["leader_epoch"], p["leader_epoch"])
                elif (p["leader_epoch"] == prev["leader_epoch"] and p["leader"] != prev["leader"]
                      and not _v2_vacancy(p)):
                    flag("leader changed without a new leader epoch",
                         f"{prev['leader']}@{prev['leader_epoch']}", f"{p['leader']}@{p['leader_epoch']}")
            last[tp] = p
        # a topic deleted (and maybe re-created) starts afresh
        for tp in set(last) - present:
            if tp[0] not in {q["topic"] for q in s["partitions"]}:
                del last[tp]
    return out


def leaderless(obs: Observed) -> list[dict]:
    """A partition without a live leader while a member of its ISR is alive,
    for longer than run.json's `checks.leaderless_s`, in samples that cover
    the whole span."""
    bound_s = obs.bounds.get("leaderless_s", LEADERLESS_S)
    out = []
    start: dict[tuple[str, int], tuple[int, list[int]]] = {}
    last_time = None
    for s in obs.metadata:
        if last_time is not None and s["time"] - last_time > MAX_SAMPLE_GAP_NS:
            start.clear()  # no evidence across the gap
        last_time = s["time"]
        live = set(s["live_brokers"])
        for p in s["partitions"]:
            tp = _tp(p)
            live_isr = [b for b in p["isr"] if b in live]
            if p["leader"] not in live and live_isr:
                t0, _ = start.setdefault(tp, (s["time"], live_isr))
                if s["time"] - t0 > bound_s * NS and tp not in {(o["topic"], o["partition"]) for o in out
                                                              if o["start"] == t0}:
                    out.append({"topic": tp[0], "partition": tp[1], "start": t0, "time": s["time"],
                                "seconds": round((s["time"] - t0) / NS, 1), "live_isr": live_isr,
                                "leader": p["leader"]})
            else:
                start.pop(tp, None)
    return out


# -- at the end --------------------------------------------------------------------------------

def unrecovered_cluster(obs: Observed) -> list[dict]:
    r = obs.recovery
    if r is None or r.get("recovered"):
        return []
    return [{"topic": None, "partition": None, "kind": "cluster", "time": r["time"],
             "seconds": r.get("bound_s"), "detail": r.get("detail", "")}]


def stale_metadata(obs: Observed) -> list[dict]:
    """After recovery every broker serves what ZooKeeper says about the
    topics it was asked for (`topics`; absent in older files: every topic of
    the last sample). A cluster shared by several runs holds other runs'
    topics, which this run did not ask about."""
    if not obs.metadata or not obs.brokers or not (obs.recovery or {}).get("recovered"):
        return []
    zk = {_tp(p): p for p in obs.metadata[-1]["partitions"]}
    out = []
    for b in obs.brokers:
        if "error" in b and "partitions" not in b:
            out.append({"topic": None, "partition": None, "broker": b["broker"], "time": b["time"],
                        "served": None, "zookeeper": None, "detail": b["error"]})
            continue
        served = {_tp(p): p for p in b.get("partitions", [])}
        asked = b.get("topics")
        for tp, z in sorted(zk.items()):
            if asked is not None and tp[0] not in asked:
                continue
            s = served.get(tp)
            want = {"leader": z["leader"], "isr": sorted(z["isr"]), "replicas": z["replicas"]}
            got = None if s is None else {"leader": s["leader"], "isr": sorted(s["isr"]),
                                          "replicas": s["replicas"]}
            if got != want:
                out.append({"topic": tp[0], "partition": tp[1], "broker": b["broker"],
                            "time": b["time"], "served": got, "zookeeper": want})
    return out


def replica_divergence(obs: Observed, high_watermarks: dict[tuple[str, int], int]) -> list[dict]:
    """Every replica holds the committed prefix of the reference replica (the
    last sampled leader, else the longest log): the same value, batch leader
    epoch and batch CRC at every offset below the high watermark; in-sync
    replicas hold all of it; each replica's epoch cache gives every committed
    offset the epoch of the batch that holds it."""
    by_tp: dict[tuple[str, int], list[dict]] = {}
    for r in obs.replicas:
        by_tp.setdefault(_tp(r), []).append(r)
    last = {_tp(p): p for p in obs.metadata[-1]["partitions"]} if obs.metadata else {}
    out = []
    for tp, reps in sorted(by_tp.items()):
        meta = last.get(tp)
        if meta is not None:  # the replicas it has now (files of a replica moved away do not count)
            reps = [r for r in reps if int(r["broker"].rsplit("-", 1)[1]) in meta["replicas"]] or reps
        leader = f"broker-{meta['leader']}" if meta and meta["leader"] >= 0 else None
        ref = next((r for r in reps if r["broker"] == leader), None) or max(
            reps, key=lambda r: (r["log_end_offset"], r["broker"]))
        hw = high_watermarks.get(tp)
        if hw is None:
            hw = ref.get("hw_checkpoint") or 0
        want = _records(ref)
        isr = {f"broker-{b}" for b in (meta["isr"] if meta else ())}
        for r in reps:
            if r is ref:
                continue
            base = {"topic": tp[0], "partition": tp[1], "broker": r["broker"],
                    "reference": ref["broker"], "time": r["time"]}
            got = _records(r)
            limit = min(hw, r["log_end_offset"], ref["log_end_offset"])
            diff = [o for o in range(max(r["log_start_offset"], ref["log_start_offset"]), limit)
                    if o in got and o in want and got[o] != want[o]]
            if diff:
                o = diff[0]
                out.append({**base, "kind": "record", "offset": o, "count": len(diff),
                            "expected": list(want[o]), "found": list(got[o])})
            if r["broker"] in isr and r["log_end_offset"] < hw:
                out.append({**base, "kind": "missing", "offset": r["log_end_offset"],
                            "count": hw - r["log_end_offset"], "expected": hw,
                            "found": r["log_end_offset"]})
        for r in reps:
            wrong = _epoch_cache_errors(r, hw)
            if wrong:
                o, cached, batch = wrong[0]
                out.append({"topic": tp[0], "partition": tp[1], "broker": r["broker"],
                            "reference": r["broker"], "time": r["time"], "kind": "epoch-cache",
                            "offset": o, "count": len(wrong), "expected": batch, "found": cached})
    return out


def _records(replica: dict) -> dict[int, tuple]:
    """offset -> (value, batch leader epoch, batch crc)."""
    batches = replica["batches"]
    out, i = {}, 0
    for offset, value in replica["records"]:
        while i < len(batches) and batches[i][1] < offset:
            i += 1
        epoch, crc = (batches[i][2], batches[i][3]) if i < len(batches) else (None, None)
        out[offset] = (value, epoch, crc)
    return out


def _epoch_cache_errors(replica: dict, hw: int) -> list[tuple[int, int | None, int]]:
    """(offset below hw, the epoch the cache gives it, the epoch of its
    batch) wherever they differ."""
    import bisect
    epochs = sorted(replica.get("epochs") or [], key=lambda e: e[1])
    if not epochs:
        return []
    starts = [start for _e, start in epochs]
    out = []
    for base, last, epoch, _crc in replica["batches"]:
        for o in range(base, min(last + 1, hw)):
            i = bisect.bisect_right(starts, o) - 1
            cached = epochs[i][0] if i >= 0 else None
            if cached != epoch:
                out.append((o, cached, epoch))
        if last + 1 >= hw:
            break
    return out


def writers_of_duplicates(obs: Observed, duplicates: list[dict]) -> int:
    """Say who wrote each copy of the duplicates written by idempotent
    producers, from the replicas' files, and return how many of those with
    `idempotent` instances the client wrote twice.

    Each instance gets `writers`: `[offset, producer id, producer epoch,
    sequence]` per copy (`null` ids where no replica file tells). The broker
    deduplicates one producer session's retries, by sequence (docs/design.md
    #idempotence). Copies with the same producer id, epoch and sequence are
    the broker's fault: it appended one batch twice. Copies under different
    producer ids or epochs, or at different sequences, were sent by the
    client as separate writes (librdkafka re-sends in-flight messages after
    bumping its own epoch: confluentinc/librdkafka#4953); no broker can tell
    them apart. Those get `"resent": true`; they are reported, not fatal.
    Unknown writers count as the broker's (the oracle stays conservative)."""
    if not duplicates or not obs.replicas:
        return 0
    by_tp: dict[tuple[str, int], list[dict]] = {}
    for r in obs.replicas:
        if r.get("writers"):
            by_tp.setdefault(_tp(r), []).append(r)
    resent = 0
    for inst in duplicates:
        reps = by_tp.get(_tp(inst), [])
        writers = [[o, *_writer_at(reps, o, inst["value"])] for o in inst["offsets"]]
        ids = [tuple(w[1:]) for w in writers]
        if all(i[0] is None for i in ids):
            continue            # not written by an idempotent producer, or no file tells
        inst["writers"] = writers
        if all(i[0] is not None for i in ids) and len(set(ids)) == len(ids):
            inst["resent"] = True
            resent += bool(inst.get("idempotent"))
    return resent


def _writer_at(replicas: list[dict], offset: int, value) -> list:
    """(producer id, epoch, sequence) of the record at `offset` holding `value`
    in some replica; Nones when none holds it in an idempotent batch."""
    for r in replicas:
        if [offset, value] not in r["records"]:
            continue
        for base, last, pid, epoch, seq in r["writers"]:
            if base <= offset <= last:
                return [pid, epoch, seq + offset - base]
    return [None, None, None]


# -- inputs of the oracles that also need the sends -------------------------------------------------

def below_min_isr(obs: Observed, min_isr: int) -> list[dict]:
    """Spans of a partition's leaderAndISR version with fewer than `min_isr`
    in-sync replicas: from the first to the last sample that showed that
    version, with no gap of evidence between. An acks=all write acknowledged
    within a span (invoked at least the margin after it began) was
    acknowledged by too few replicas."""
    spans: list[dict] = []
    open_: dict[tuple[str, int], dict] = {}
    last_time = None
    for s in obs.versioned:
        if last_time is not None and s["time"] - last_time > MAX_SAMPLE_GAP_NS:
            open_.clear()
        last_time = s["time"]
        seen = set()
        for p in s["partitions"]:
            tp = _tp(p)
            seen.add(tp)
            cur = open_.get(tp)
            if cur is not None and cur["zk_version"] == p["zk_version"]:
                cur["end"] = s["time"]
                continue
            open_.pop(tp, None)
            if p["leader"] >= 0 and len(p["isr"]) < min_isr:
                span = {"topic": tp[0], "partition": tp[1], "start": s["time"], "end": s["time"],
                        "isr": p["isr"], "zk_version": p["zk_version"], "leader": p["leader"]}
                spans.append(span)
                open_[tp] = span
        for tp in set(open_) - seen:
            del open_[tp]
    return [sp for sp in spans if sp["end"] > sp["start"]]


def recovered_at(obs: Observed) -> int | None:
    r = obs.recovery
    return r.get("recovered_at") if r and r.get("recovered") else None


def checked(obs: Observed, *, exact_polls: int, idempotent_producers: int,
            final_complete: bool) -> dict[str, str]:
    """For each oracle, "checked" or why it had no input (summary.json `oracles`)."""
    def need(cond: bool, why: str) -> str:
        return "checked" if cond else f"no input: {why}"
    samples = len(obs.metadata)
    versioned = len(obs.versioned)
    unversioned = "fewer than two ZooKeeper metadata samples" + (
        " (Metadata answers carry no epochs or versions)" if samples > versioned else "")
    return {
        "read-uncommitted": need(exact_polls > 0, "no poll reported its fetch's log start offset"),
        "truncated-read": need(final_complete, "final reads incomplete"),
        "nonmonotonic-send": need(idempotent_producers > 0, "no idempotent producer"),
        "replica-divergence": need(bool(obs.replicas), "no replica files observed"),
        "isr-invariant": need(samples > 0, "no metadata samples"),
        "epoch-regression": need(versioned > 1, unversioned),
        "leaderless": need(samples > 1, "fewer than two metadata samples"),
        "stale-metadata": need(bool(obs.brokers) and bool((obs.recovery or {}).get("recovered")),
                               "no broker Metadata observed after a recovery"),
        "ack-below-min-isr": need(versioned > 1, unversioned),
        "unrecovered": need(obs.recovery is not None, "no recovery observation"),
        "resurrected": need(bool(obs.incarnations), "no topic was deleted and created again"),
    }


# -- fault coverage ---------------------------------------------------------------------------------

# After a fault stops, its effects may still show for a while (a session
# expires a few seconds after a kill, a leader moves after that).
EFFECT_TAIL_NS = 10 * NS
_NUMBER = r"(\d+)"


def _changes(obs: Observed, start: int, stop: int) -> dict[str, int]:
    """What the samples show changing within [start, stop]: leaders moved,
    ISRs shrunk, controller changes, brokers that left the live set."""
    inside = [s for s in obs.metadata if start <= s["time"] <= stop]
    before = [s for s in obs.metadata if s["time"] < start]
    if before:
        inside.insert(0, before[-1])
    out = {"leaders_moved": 0, "isr_shrinks": 0, "controller_changes": 0, "brokers_left": 0}
    for a, b in zip(inside, inside[1:]):
        pa = {_tp(p): p for p in a["partitions"]}
        for p in b["partitions"]:
            q = pa.get(_tp(p))
            if q is None:
                continue
            out["leaders_moved"] += p["leader"] != q["leader"]
            out["isr_shrinks"] += len(p["isr"]) < len(q["isr"])
        out["controller_changes"] += a.get("controller") != b.get("controller")
        out["brokers_left"] += len(set(a["live_brokers"]) - set(b["live_brokers"]))
    return out


def _injector_says(fault: str, detail: str | None) -> bool | None:
    """Whether the injector's own notes prove an effect (None: they cannot tell)."""
    import re
    d = detail or ""
    if fault == "crash-client":
        return True
    m = re.search(r"dropped " + _NUMBER + " packets", d)
    if m:
        return int(m.group(1)) > 0
    if "session 0x" in d and "expired" in d:
        return True
    if re.search(r"cut [1-9]\d* bytes|flipped bits \[\d|shifted the base offset", d):
        return True
    if "holds no batch, no base offset shifted" in d:
        return False
    if "unfsynced bytes dropped" in d:
        return bool(re.search(r": [1-9]\d*", d.split("unfsynced bytes dropped", 1)[1]))
    if "leaders moved:" in d or "reassignment done" in d:
        return True
    return None


def annotate_windows(obs: Observed, windows: list[dict]) -> None:
    """Add to each fault window what the cluster showed (`observed`) and
    whether the fault took effect (`took_effect`: True, False, or None when
    neither the injector nor the samples can tell): a planned fault that
    changed nothing must say so, never count as one that did."""
    for w in windows:
        if w["fault"] == "final-heal":
            w["observed"], w["took_effect"] = {}, None
            continue
        stop = (w["stop"] if w["stop"] is not None else w["start"]) + EFFECT_TAIL_NS
        seen = _changes(obs, w["start"], stop) if obs.metadata else {}
        says = _injector_says(w["fault"], w.get("stop_detail") or w.get("detail"))
        if says is not None:
            took = says or any(seen.values())
        elif seen:
            took = any(seen.values())
        else:
            took = None
        w["observed"], w["took_effect"] = seen, took
