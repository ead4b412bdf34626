"""assert_valid: what makes a suite's run invalid (pure logic over a summary)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from reports.invariants import NOT_PROMISED
from suites.suite_helpers import assert_valid


def _run(oracles: dict[str, str], fatal: tuple[str, ...] = (), valid: bool | None = True):
    summary = {"valid": valid, "fatal": list(fatal), "oracles": oracles,
               "anomalies": {k: [{"k": 1}] for k in fatal},
               "anomaly_counts": {k: 1 for k in fatal}, "warnings": []}
    return SimpleNamespace(verdict=lambda checker=None: summary, meta={"workload": {}},
                           run_dir="/runs/x", seed=7)


def test_an_oracle_the_configuration_does_not_promise_leaves_the_run_valid():
    run = _run({"lost": "checked",
                "isr-behind-hw": f"{NOT_PROMISED}: replication.truncation=hw",
                "unclean-election": f"{NOT_PROMISED}: unclean.leader.election.enable=true"})
    assert assert_valid(run)["valid"] is True


def test_an_oracle_without_input_makes_the_run_invalid():
    run = _run({"lost": "checked",
                "isr-behind-hw": "no input: no broker-state samples"})
    with pytest.raises(AssertionError, match="oracles without input.*isr-behind-hw"):
        assert_valid(run)


def test_a_fatal_anomaly_is_named_with_its_seed():
    run = _run({"lost": "checked"}, fatal=("lost",), valid=False)
    with pytest.raises(AssertionError, match=r"seed 7.*\n.*lost \(1\)"):
        assert_valid(run)
