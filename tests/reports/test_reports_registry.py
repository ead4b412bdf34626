"""reports/registry.py: one complete entry per anomaly type, the same types
(and fatality) as docs/anomalies.md."""

from __future__ import annotations

import re
from pathlib import Path

from reports import reference_analysis, registry, spark_analysis
from reports.registry import ANOMALIES, NAMES, Context
from reports.summary import ANOMALY_TYPES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "anomalies.md"


def test_every_type_has_a_function_in_each_checker_and_a_report_section():
    """Each checker's function is named after the type (lost-unreplicated:
    lost_unreplicated), and no two types share one."""
    for e in ANOMALIES:
        fn = e.name.replace("-", "_")
        assert e.reference is getattr(reference_analysis, fn, None), e.name
        assert e.spark is getattr(spark_analysis, fn, None), e.name
        assert e.title and callable(e.line) and isinstance(e.context, Context), e.name
        assert e.evidence in (registry.HISTORY, registry.OBSERVATIONS, registry.GROUPS,
                              registry.INCARNATIONS, registry.TRANSACTIONS), e.name
    assert len(set(NAMES)) == len(NAMES) == len({e.reference for e in ANOMALIES})
    assert ANOMALY_TYPES == NAMES


def _documented() -> dict[str, str]:
    """Anomaly type -> its "fatal?" cell, from the tables of docs/anomalies.md
    (a type's first row: `duplicate` has a second, refined one)."""
    out = {}
    for line in DOCS.read_text().splitlines():
        m = re.match(r"\| `([a-z-]+)`[^|]*\|[^|]*\| ([^|]+) \|", line)
        if m:
            out.setdefault(m.group(1), m.group(2))
    return out


def test_docs_anomalies_md_lists_the_registry_s_types_with_their_fatality():
    docs = _documented()
    assert set(docs) == set(NAMES)
    rules = {"yes": registry.always, "no": registry.never,
             "yes, if final reads completed": registry.once_final_reads_complete}
    for e in ANOMALIES:
        want = registry.idempotent_writes if docs[e.name].startswith("yes when") else rules[docs[e.name]]
        assert e.fatal is want, (e.name, docs[e.name])
