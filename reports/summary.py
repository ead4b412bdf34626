"""From what a checker found to the verdict and `summary.json` (anomalies.md).

Both checkers (reference.py, spark_checker.py) fill the same `Findings`; this
module holds the rules that do not depend on how the findings were computed:
when final reads completed, which anomalies are fatal (each type's rule is in
reports/registry.py), the verdict, the fault windows' anomalies, and the exact
shape of summary.json. Keeping them in one place is what makes the two
checkers comparable field by field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from reports.figures import empty_counts
from reports.registry import ANOMALIES, GROUPS, INCARNATIONS, NAMES, TRANSACTIONS, of_evidence

# Every anomaly type, in the order of the registry (summary.json's keys, the report's rows).
ANOMALY_TYPES = NAMES
# Judged from a consumer group's commits and rebalances (groups.jsonl; reports/groups.py).
GROUP_TYPES = of_evidence(GROUPS)
# Judged only where a topic was deleted and created again (reports/incarnations.py).
INCARNATION_TYPES = of_evidence(INCARNATIONS)
# Judged only in a transactional run (reports/transactions.py).
TRANSACTION_TYPES = of_evidence(TRANSACTIONS)

DEFAULT_MAX_INSTANCES = 10_000


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


def final_reads_complete(partitions: list[dict]) -> bool:
    """anomalies.md: complete when every partition written or read had a complete
    final poll, but those of a topic incarnation deleted before the end."""
    return all(p["final_complete"] or p.get("deleted") for p in partitions)


def fatal_types(findings: Findings, final_complete: bool) -> list[str]:
    """The types fatal in this run, by each type's rule (reports/registry.py)."""
    return [e.name for e in ANOMALIES if e.fatal(findings, final_complete)]


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
        # (an oracle is checked unless its checker said which input it lacked)
        "oracles": {**{k: "checked" for k in ANOMALY_TYPES if k not in findings.oracles},
                    **findings.oracles},
    }


def write_json(path: Path, data: dict) -> None:
    """Write atomically: a reader never sees half a summary."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=False)
        fh.write("\n")
    os.replace(tmp, path)
