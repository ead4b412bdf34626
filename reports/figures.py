"""The figures of a run besides its anomalies, as both checkers compute them:
ops counted by outcome, latency percentiles by nearest rank, fault windows.

Below the registry (reports/registry.py): the checkers' analyses and
summary.py import it, it imports nothing of theirs.
"""

from __future__ import annotations

import math

OUTCOMES = ("ok", "fail", "info", "pending")
CLIENT_FUNCTIONS = ("send", "poll")
PERCENTILES = ((0.5, "p50_ns"), (0.9, "p90_ns"), (0.99, "p99_ns"), (0.999, "p999_ns"))
NS_PER_SECOND = 1_000_000_000


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
