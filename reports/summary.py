"""From what a checker found to the verdict and `summary.json` (anomalies.md).

Both checkers (reference.py, spark_checker.py) fill the same `Findings`; this
module holds the rules that do not depend on how the findings were computed:
which anomalies are fatal, when final reads completed, the verdict, the fault
windows, and the exact shape of summary.json. Keeping them in one place is
what makes the two checkers comparable field by field.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

# Judged from a consumer group's commits and rebalances (groups.jsonl; reports/groups.py).
GROUP_TYPES = ("commit-regressed", "group-skipped", "resume-past-commit")
# Judged only where a topic was deleted and created again (reports/incarnations.py).
INCARNATION_TYPES = ("resurrected",)

ANOMALY_TYPES = (
    "lost",
    "unseen",
    "duplicate",
    "inconsistent-offset",
    "aborted-read",
    "phantom-read",
    "nonmonotonic-poll",
    "poll-skip",
    # chaoslog's oracles beyond the clients' reads (docs/anomalies.md)
    "lost-unreplicated",
    "read-uncommitted",
    "truncated-read",
    "resurrected",
    "nonmonotonic-send",
    "ack-below-min-isr",
    "replica-divergence",
    "isr-invariant",
    "epoch-regression",
    "leaderless",
    "stale-metadata",
    "unrecovered",
    *GROUP_TYPES,
)

# Fatal only under a condition (see `fatal_types`): `duplicate` when the
# producer was idempotent, `unseen` and `truncated-read` when the final reads
# completed; `lost-unreplicated` never (acks=1 promises nothing). Every other
# type is always fatal.
CONDITIONALLY_FATAL = ("duplicate", "unseen", "truncated-read", "lost-unreplicated")
ALWAYS_FATAL = tuple(t for t in ANOMALY_TYPES if t not in CONDITIONALLY_FATAL)

# Judged from observations.jsonl (reports/observations.py).
OBSERVATION_TYPES = ("replica-divergence", "isr-invariant", "epoch-regression", "leaderless",
                     "stale-metadata", "unrecovered")

# The anomaly types judged from the history alone, always checked.
HISTORY_ORACLES = ("lost", "unseen", "duplicate", "inconsistent-offset", "aborted-read",
                   "phantom-read", "nonmonotonic-poll", "poll-skip", "lost-unreplicated")

OUTCOMES = ("ok", "fail", "info", "pending")
CLIENT_FUNCTIONS = ("send", "poll")
PERCENTILES = ((0.5, "p50_ns"), (0.9, "p90_ns"), (0.99, "p99_ns"), (0.999, "p999_ns"))
NS_PER_SECOND = 1_000_000_000
DEFAULT_MAX_INSTANCES = 10_000


def sort_key(kind: str):
    """Canonical order of the instances of an anomaly type (both checkers use it before capping)."""
    if kind in ("lost", "unseen", "lost-unreplicated", "truncated-read", "ack-below-min-isr"):
        return lambda a: (a["topic"], a["partition"], a["offset"], a["value"])
    if kind in ("commit-regressed", "resume-past-commit"):
        return lambda a: (a["topic"], a["partition"], a["group"], a["seq"])
    if kind == "group-skipped":
        return lambda a: (a["topic"], a["partition"], a["group"], a["offset"], a["value"])
    if kind == "read-uncommitted":
        return lambda a: (a["topic"], a["partition"], a["offset"], a["value"], a["index"])
    if kind == "nonmonotonic-send":
        return lambda a: (a["topic"], a["partition"], a["node"], a["index"])
    if kind in OBSERVATION_TYPES:
        return lambda a: (a["topic"] or "", a["partition"] if a["partition"] is not None else -1,
                          a["time"], json.dumps(a, sort_keys=True, default=str))
    if kind == "duplicate":
        return lambda a: (a["topic"], a["partition"], a["value"])
    if kind == "inconsistent-offset":
        return lambda a: (a["topic"], a["partition"], a["offset"])
    if kind in ("aborted-read", "phantom-read", "resurrected"):
        return lambda a: (a["topic"], a["partition"], a["value"], a["offset"])
    return lambda a: (a["topic"], a["partition"], a["process"], a["index"], a["offset"], a["previous"])


def nearest_rank(sorted_values: list, p: float):
    """The p-quantile by nearest rank: the smallest value with at least p of the values at or below it.

    Spark's percentile_approx gives exactly this on small inputs, and within its
    stated relative error on large ones.
    """
    if not sorted_values:
        return None
    # Same float arithmetic as Spark's QuantileSummaries (rank = ceil(p * n)).
    k = max(1, math.ceil(p * len(sorted_values)))
    return sorted_values[k - 1]


def fault_windows(nemesis: list[dict], end_time: int) -> list[dict]:
    """Pair nemesis `start`s with their `stop`s into fault windows.

    A stop closes the oldest open start of the same fault, preferring one with
    the same targets; a start never stopped runs to the end of the history
    (`stopped: false`). Windows are numbered in order of their start.
    """
    open_: list[dict] = []
    windows: list[dict] = []
    for ev in sorted(nemesis, key=lambda e: e["index"]):
        if ev.get("phase") == "start":
            w = {
                "id": len(windows),
                "fault": ev.get("fault"),
                "targets": list(ev.get("targets") or []),
                "start": ev["time"],
                "stop": None,
                "start_index": ev["index"],
                "stop_index": None,
                "stopped": False,
                "detail": ev.get("detail"),
                "stop_detail": None,  # what the injector noted at the heal (its effect)
            }
            windows.append(w)
            open_.append(w)
        elif ev.get("phase") == "stop":
            same = [w for w in open_ if w["fault"] == ev.get("fault")]
            if not same:
                continue
            targets = list(ev.get("targets") or [])
            exact = [w for w in same if w["targets"] == targets]
            w = (exact or same)[0]
            w["stop"], w["stop_index"], w["stopped"] = ev["time"], ev["index"], True
            w["stop_detail"] = ev.get("detail")
            open_.remove(w)
    for w in open_:
        w["stop"] = max(end_time, w["start"])
    return windows


@dataclass
class Findings:
    """What a checker computed for one run; `build_summary` turns it into summary.json."""

    run_id: str
    run_json: dict
    idempotent: bool
    checker: str
    events: int = 0
    end_time: int = 0
    anomalies: dict = field(default_factory=lambda: {k: [] for k in ANOMALY_TYPES})
    anomaly_counts: dict = field(default_factory=lambda: {k: 0 for k in ANOMALY_TYPES})
    counts: dict = field(default_factory=dict)
    partitions: list = field(default_factory=list)
    timeline: list = field(default_factory=list)
    latency: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    windows: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    # duplicates of values whose producer was idempotent, but for those the
    # client re-sent as new writes (fatal)
    idempotent_duplicates: int = 0
    oracles: dict = field(default_factory=dict)   # anomaly type -> "checked" | "no input: ..."


def empty_counts() -> dict:
    return {
        "send": {o: 0 for o in OUTCOMES},
        "poll": {o: 0 for o in OUTCOMES},
        "acknowledged": 0,
        "read": 0,
        "records": 0,
        "lost": 0,
        "unseen": 0,
        "duplicated": 0,
    }


def final_reads_complete(partitions: list[dict]) -> bool:
    """anomalies.md: complete when every partition written or read had a complete
    final poll, but those of a topic incarnation deleted before the end."""
    return all(p["final_complete"] or p.get("deleted") for p in partitions)


def fatal_types(findings: Findings, final_complete: bool) -> list[str]:
    fatal = list(ALWAYS_FATAL)
    # A duplicate the client re-sent as a new write (observations.py,
    # writers_of_duplicates) is reported, not fatal.
    dups = findings.anomalies["duplicate"]
    all_resent = (bool(dups) and len(dups) == findings.anomaly_counts["duplicate"]
                  and all(d.get("resent") for d in dups))
    if findings.idempotent_duplicates or (findings.idempotent and not all_resent):
        fatal.append("duplicate")
    if final_complete:
        fatal.extend(("unseen", "truncated-read"))
    return [k for k in ANOMALY_TYPES if k in fatal]


def verdict_of(valid) -> str:
    return {True: "valid", False: "invalid", None: "unknown"}[valid]


def attribute_windows(findings: Findings) -> list[dict]:
    """Add to each fault window the anomalies whose witness time falls inside it.

    An anomaly's `time` is when a client could first see it (the
    acknowledgement of a lost write, the read that showed the second value...).
    """
    out = []
    for w in findings.windows:
        w = dict(w)
        inside = {}
        for kind in ANOMALY_TYPES:
            n = sum(1 for a in findings.anomalies[kind] if w["start"] <= a["time"] <= w["stop"])
            inside[kind] = n
        w["anomalies"] = inside
        out.append(w)
    return out


def build_summary(findings: Findings) -> dict:
    """summary.json exactly as anomalies.md fixes it, plus the extra fields reports use."""
    complete = final_reads_complete(findings.partitions)
    fatal = fatal_types(findings, complete)
    fatal_found = [k for k in fatal if findings.anomaly_counts[k] > 0]
    if fatal_found:
        valid = False
    elif complete:
        valid = True
    else:
        valid = None
    counts = {**empty_counts(), **findings.counts}
    sends = counts["send"]
    polls = counts["poll"]

    def availability(c):
        done = c["ok"] + c["fail"] + c["info"]
        return None if done == 0 else c["ok"] / done

    warnings = list(findings.warnings)
    if not findings.partitions:
        warnings.append("no send or poll in the history: nothing was checked")
    truncated = [k for k in ANOMALY_TYPES if findings.anomaly_counts[k] > len(findings.anomalies[k])]
    return {
        "format": 1,
        "run": findings.run_id,
        "valid": valid,
        "verdict": verdict_of(valid),
        "checker": findings.checker,
        "counts": counts,
        "anomalies": {k: list(findings.anomalies[k]) for k in ANOMALY_TYPES},
        "anomaly_counts": dict(findings.anomaly_counts),
        "anomalies_truncated": truncated,
        "fatal": fatal_found,
        "fatal_types": fatal,
        "idempotent": findings.idempotent,
        "final_reads": {"complete": complete, "partitions": findings.partitions},
        "availability": {"send": availability(sends), "poll": availability(polls)},
        "latency": findings.latency,
        "errors": findings.errors,
        "timeline": findings.timeline,
        "fault_windows": attribute_windows(findings),
        "events": findings.events,
        "duration_ns": findings.end_time,
        "warnings": warnings,
        "oracles": {**{k: "checked" for k in HISTORY_ORACLES}, **findings.oracles},
    }


def write_json(path: Path, data: dict) -> None:
    """Write atomically: a reader never sees half a summary."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=False)
        fh.write("\n")
    os.replace(tmp, path)
