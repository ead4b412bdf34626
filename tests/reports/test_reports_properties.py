"""Property tests: random valid histories with known injected anomalies.

The simulated log (reports_histgen.SimulatedRun) injects each anomaly type as
a fault that produces exactly one instance and nothing else. Both checkers
must report exactly the injected instances; and on any history, injected,
incomplete or randomly damaged, the two checkers must produce the same summary.
The Spark checker checks a whole batch of histories per example (one set of
Spark jobs), so its example count stays small.
"""

from __future__ import annotations

import random
import tempfile

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from reports_histgen import INJECTIONS, SimulatedRun, reported_keys, run_json, write_run

from reports import reference
from reports.summary import build_summary
from reports.validate import validate

injections = st.lists(st.sampled_from(INJECTIONS), max_size=10)


def _expected_validity(sim, idempotent):
    exp = sim.expected_keys()
    if any(exp[k] for k in exp if k != "duplicate") or (exp["duplicate"] and idempotent):
        return False
    return True


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False), inject=injections, idempotent=st.booleans(),
       fmt=st.sampled_from(["jsonl", "parquet"]))
def test_reference_reports_exactly_the_injected(rng, inject, idempotent, fmt):
    sim = SimulatedRun(rng, inject=inject).simulate()
    with tempfile.TemporaryDirectory() as d:
        write_run(d, sim.events, run_json(run="sim", idempotent=idempotent), fmt=fmt, parts=2 if fmt == "parquet" else 1)
        assert validate(d) == []  # the generator writes valid histories
        s = build_summary(reference.check(d))
    assert reported_keys(s) == sim.expected_keys()
    assert s["valid"] is _expected_validity(sim, idempotent)


@settings(max_examples=60, deadline=None)
@given(rng=st.randoms(use_true_random=False))
def test_reference_incomplete_final_reads_never_valid(rng):
    sim = SimulatedRun(rng, complete_final=False).simulate()
    with tempfile.TemporaryDirectory() as d:
        write_run(d, sim.events, run_json(run="sim"))
        s = build_summary(reference.check(d))
    assert s["final_reads"]["complete"] is False
    assert s["valid"] is not True
    if s["valid"] is None:
        assert not s["fatal"]


# A seed rather than st.randoms(): twelve simulations drawing lazily from one
# hypothesis buffer overrun it and get retried; a failing batch still names
# its seeds, which replay exactly.
one_run = st.tuples(
    st.integers(0, 2**32 - 1),  # seeds the simulation
    injections,
    st.booleans(),  # idempotent producer
    st.sampled_from(["complete", "complete", "incomplete", "messy"]),
    st.sampled_from(["jsonl", "jsonl", "parquet", "parts"]),
)


@settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(one_run, min_size=12, max_size=12))
def test_spark_equals_reference_and_the_injected(spark, tmp_path_factory, batch):
    from reports import api

    root = tmp_path_factory.mktemp("batch")
    dirs, sims = [], []
    for i, (seed, inject, idempotent, kind, fmt) in enumerate(batch):
        sim = SimulatedRun(random.Random(seed), inject=inject,
                           complete_final=kind != "incomplete").simulate()
        if kind == "messy":
            sim.mess_up(4)
        d = root / f"run-{i}"
        parts = {"jsonl": 1, "parquet": 1, "parts": 3}[fmt]
        write_run(d, sim.events, run_json(run=f"run-{i}", idempotent=idempotent),
                  fmt="parquet" if fmt == "parquet" else "jsonl", parts=parts)
        dirs.append(d)
        sims.append((sim, kind, idempotent))
    results = api.findings(dirs, spark=spark)
    for d, res, (sim, kind, idempotent) in zip(dirs, results, sims):
        got = build_summary(res)
        want = build_summary(reference.check(d))
        assert got.pop("checker") == "spark" and want.pop("checker") == "reference"
        assert got == want, d
        if kind == "complete":
            assert reported_keys(got) == sim.expected_keys(), d
            assert got["valid"] is _expected_validity(sim, idempotent)
