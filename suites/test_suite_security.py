"""Chaos on a secure cluster (docs/design.md#security), with
--chaoslog-security SASL_SSL (`make test-secure`): three brokers on SASL_SSL
(TLS, SCRAM-SHA-512 between brokers and for every client of the harness),
pressure from kills, a pause and a partition; the run must be
valid, and no password may be found anywhere in the run's directory or in
the warehouse it is loaded into. The cluster's passwords are random and
live only in files of its own directory (harness/backends/secure_cluster.py),
so finding either string anywhere else is a leak."""
from __future__ import annotations

from pathlib import Path

import pytest

from faults.nemesis import Schedule, Step
from suite_helpers import SAFE, assert_valid, cluster_view, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.any_security]

TOPIC = "secure"


@pytest.fixture
def cluster(cluster_factory, pytestconfig):
    if pytestconfig.getoption("--chaoslog-security") == "PLAINTEXT":
        pytest.skip("a secure cluster's run: with --chaoslog-security SASL_SSL (make test-secure)")
    return cluster_factory(brokers=3, broker_config=SAFE)


def _passwords(cluster) -> list[str]:
    return [p.read_text() for p in (cluster.security.dir / "secrets").glob("*.password")]


def _leaks(root: Path, secrets: list[str]) -> list[str]:
    """Every file under `root` that holds one of `secrets`."""
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [str(path) for s in secrets if s.encode() in data]
    return found


def test_a_chaos_run_on_a_sasl_ssl_cluster_is_valid_and_records_no_secret(
        cluster, workload, nemesis, history, spark, tmp_path):
    secrets = _passwords(cluster)
    assert len(secrets) == 2 and all(len(s) >= 20 for s in secrets)
    # An idempotent producer and a raw fetcher (harness/kafka_wire.py, its own
    # TLS and SASL) beside the clients, so that every oracle has its input.
    run = workload({TOPIC: 2}, replication_factor=3, acks="all", idempotent=True, rate=50,
                   producers=2, slots=4, consumers=1, fetchers=1)
    view = cluster_view(run)
    wait_for(lambda: view.fully_replicated({TOPIC: 2}), 60, "a full ISR on every partition")
    nem = nemesis(Schedule(0, 34.0, 3.0, [Step(2.0, "kill", 8.0, "leader"),
                                          Step(14.0, "pause", 6.0, "follower"),
                                          Step(24.0, "partition-isolate", 8.0, "leader")]),
                  partition=(TOPIC, 0))
    run.finish(quiet_s=3.0, final_timeout_s=60, settle_s=3.0)
    assert not nem.errors and len(nem.done) == 3, (nem.errors, nem.done)
    summary = assert_valid(run)
    assert summary["counts"]["acknowledged"] > 200, summary["counts"]   # the clients got in

    # The run names where the harness's password comes from, never the password.
    assert _leaks(history.run_dir, secrets) == []
    import json
    meta = json.loads((history.run_dir / "run.json").read_text())
    assert meta["cluster"]["security"] == cluster.spec.security
    assert meta["client"]["sasl.password.file"].endswith(".password")   # the source, by name

    from reports.warehouse import load
    warehouse = tmp_path / "warehouse"
    done = load(spark, [history.run_dir], warehouse)
    assert done["loaded"] == 1, done
    assert _leaks(warehouse, secrets) == []     # the files, whatever their encoding...
    for table in (p for p in warehouse.iterdir() if p.is_dir()):   # ...and every row's values
        rows = spark.read.parquet(str(table)).toJSON().collect()
        assert rows and not any(s in r for r in rows for s in secrets), table.name
