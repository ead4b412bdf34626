"""summary.json of a few generated histories, byte for byte as the checkers wrote
it before the checker was reorganized around reports/registry.py (golden/).

A change to the checkers that changes what they write shows up here; when the
change is meant, write the files again and look at their diff:

    .venv/bin/python tests/reports/test_reports_golden.py --write
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from reports_histgen import INJECTIONS, SimulatedRun, run_json, write_run

from reports import api, reference
from reports.summary import build_summary

GOLDEN = Path(__file__).parent / "golden"
CAPPED = 1  # max_instances of the "-capped" files


def histories(root: Path) -> dict[str, Path]:
    """The generated runs: every client-read anomaly with complete final reads;
    an idempotent producer and incomplete final reads, in Parquet parts;
    damaged reads in JSONL parts."""
    runs = {}
    sim = SimulatedRun(random.Random(3), inject=list(INJECTIONS), n_ops=80).simulate()
    runs["all-injected"] = write_run(root / "all-injected", sim.events, run_json(run="all-injected"))
    sim = SimulatedRun(random.Random(11), inject=["lost", "duplicate", "poll-skip"],
                       complete_final=False).simulate()
    runs["incomplete"] = write_run(root / "incomplete", sim.events,
                                   run_json(run="incomplete", idempotent=True), fmt="parquet", parts=2)
    sim = SimulatedRun(random.Random(5), inject=["inconsistent-offset", "phantom-read"]).simulate()
    sim.mess_up(4)
    runs["messy"] = write_run(root / "messy", sim.events, run_json(run="messy"), parts=3)
    return runs


def text(summary: dict) -> str:
    """summary.json as api.analyze writes it, without the checker's name."""
    summary = {k: v for k, v in summary.items() if k != "checker"}
    return json.dumps(summary, indent=1) + "\n"


def golden(name: str) -> str:
    return (GOLDEN / f"{name}.summary.json").read_text()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return histories(tmp_path_factory.mktemp("golden"))


@pytest.mark.parametrize("name", ["all-injected", "incomplete", "messy"])
def test_the_reference_checker_writes_what_it_wrote(runs, name):
    assert text(build_summary(reference.check(runs[name]))) == golden(name)
    capped = build_summary(reference.check(runs[name], max_instances=CAPPED))
    assert text(capped) == golden(f"{name}-capped")


def test_the_spark_checker_writes_what_it_wrote(spark, runs):
    for kw, suffix in (({}, ""), ({"max_instances": CAPPED}, "-capped")):
        found = api.findings(list(runs.values()), spark=spark, **kw)
        for name, f in zip(runs, found):
            assert text(build_summary(f)) == golden(name + suffix), name + suffix


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        for name, run in histories(Path(d)).items():
            (GOLDEN / f"{name}.summary.json").write_text(text(build_summary(reference.check(run))))
            (GOLDEN / f"{name}-capped.summary.json").write_text(
                text(build_summary(reference.check(run, max_instances=CAPPED))))
