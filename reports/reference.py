"""The reference checker: anomalies.md in plain Python, one run at a time.

`check` reads the run in one pass (reports/reference_analysis.py: the
Analysis), asks each anomaly type's reference function (reports/registry.py)
for its instances, and fills the Findings that summary.py turns into
summary.json. The Spark checker must agree with it exactly; the property
tests hold them to that.
"""

from __future__ import annotations

from reports import invariants, transactions
from reports.groups import status as group_status
from reports.observations import annotate_windows, checked
from reports.readers import RunInput, open_run
from reports.reference_analysis import analyze, latency, promises, timeline, windows
from reports.registry import ANOMALIES
from reports.summary import (DEFAULT_MAX_INSTANCES, GROUP_TYPES, TRANSACTION_TYPES, Findings,
                             final_reads_complete)


def check(run, max_instances: int | None = DEFAULT_MAX_INSTANCES) -> Findings:
    """Check one run directory (or an opened RunInput); raises HistoryError on bad input."""
    if not isinstance(run, RunInput):
        run = open_run(run)
    a = analyze(run)
    found = {e.name: sorted(e.reference(a), key=e.order) for e in ANOMALIES}

    f = Findings(run.run_id, run.run_json, run.idempotent, "reference")
    for name, items in found.items():
        f.anomaly_counts[name] = len(items)
        f.anomalies[name] = items if max_instances is None else items[:max_instances]
    # (duplicate's fatality: idempotent writes the client did not send twice)
    f.idempotent_duplicates = sum(d["idempotent"] and not d.get("resent") for d in found["duplicate"])
    f.events, f.end_time = a.events, a.end_time
    f.warnings = list(run.warnings)
    f.partitions = a.partitions
    f.counts = dict(a.counts)
    f.counts.update(
        acknowledged=sum(p["acknowledged"] for p in a.partitions),
        read=sum(len(v) for v in a.reads.values()),
        records=sum(p["records"] for p in a.partitions),
        lost=f.anomaly_counts["lost"], unseen=f.anomaly_counts["unseen"],
        duplicated=f.anomaly_counts["duplicate"])
    f.latency = latency(a)
    f.timeline = timeline(a)
    f.errors = a.errors
    f.windows = windows(a)
    annotate_windows(a.observed, f.windows)
    f.oracles = checked(
        a.observed, exact_polls=a.exact_polls,
        idempotent_producers=len({k[2] for k in a.idem_sends}),
        final_complete=bool(a.partitions) and final_reads_complete(a.partitions))
    f.oracles.update(dict.fromkeys(GROUP_TYPES, group_status(a.groups)))
    f.oracles.update(invariants.status(a.observed, promises(a)))
    f.oracles.update(transactions.status(TRANSACTION_TYPES, run.run_json, a.groups))
    return f
