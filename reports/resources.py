"""The cluster's resources over a run, for the report: summary.json `resources`.

observations.jsonl holds a `resources` sample every 10 s (memory, file
descriptors and threads of each node's process, ZooKeeper's watch count;
docs/history-format.md). Nothing is judged from them: a leak shows as a line
that only climbs, which a person sees at once on the report's charts and no
threshold would say as well. Only the `resources` lines are parsed: the
file also holds every replica's records, and the checkers have read it all
already (and reported any damage in it).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reports.observations import OBSERVATIONS_FILE
from reports.figures import NS_PER_SECOND

METRICS = ("rss_kb", "fds", "threads")
_MARKER = b'"resources"'   # cheap filter; the kind is checked once parsed


def read_samples(run_dir: Path) -> list[dict[str, Any]]:
    """The run's `resources` observations in time order (none: [])."""
    path = Path(run_dir) / OBSERVATIONS_FILE
    if not path.is_file():
        return []
    out = []
    with open(path, "rb") as fh:
        for raw in fh:
            if _MARKER not in raw:
                continue
            try:
                obs = json.loads(raw)
            except ValueError:
                continue   # a line cut by a crash
            if (isinstance(obs, dict) and obs.get("kind") == "resources"
                    and isinstance(obs.get("time"), int)):
                out.append(obs)
    return sorted(out, key=lambda o: o["time"])


def resource_series(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """{"seconds": [...], "nodes": {name: {metric: [value or None]}},
    "zk_watches": [...]}, one entry per sample (None where a node was not
    seen), or None without samples."""
    if not samples:
        return None
    names = sorted({n for s in samples for n in (s.get("nodes") or {})})
    nodes = {n: {m: [((s.get("nodes") or {}).get(n) or {}).get(m) for s in samples]
                 for m in METRICS} for n in names}
    return {"seconds": [round(s["time"] / NS_PER_SECOND, 1) for s in samples],
            "nodes": nodes, "zk_watches": [s.get("zk_watches") for s in samples]}
