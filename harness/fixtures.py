"""pytest fixtures for chaos suites: `history`, `workload`, `nemesis`.

They compose with the `cluster` fixture of the chaoslog plugin, so that a
suite test states only what differs: broker config (a marker), faults, the
expected verdict.

    @pytest.mark.broker_config(**{"min.insync.replicas": 2})
    def test_no_loss_under_leader_kills(workload, nemesis):
        run = workload(topics={"t": 3}, acks="all")
        nemesis(["kill", "pause"], duration=30, seed=7)
        assert run.finish().verdict()["valid"] is True

`chaos_run` holds the per-test state the three share. `history` is a HistoryRecorder writing into the test's own run directory
(tmp_path: history.jsonl, run.json, logs/, zookeeper.json). `workload(...)`
creates the topics, starts producers and consumers and returns a
WorkloadRun; `nemesis(...)` starts a seeded schedule (or a list of faults)
and is always healed at teardown, even when the test fails. WorkloadRun.finish
does the end of a run in the one right order: wait out the schedule, final
heal, quiet period, stop the clients, final reads, close the history, write
run.json, collect logs and the ZooKeeper tree.
"""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import pytest

from harness.history import (HistoryRecorder, HistoryStats, collect_logs, dump_zookeeper,
                             new_run_id, write_run_json)


class _Run:
    """Per-test state shared by the three fixtures."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.run_id = new_run_id()
        self.recorder = HistoryRecorder(run_dir / "history.jsonl")
        self.stats = HistoryStats()
        self.recorder.subscribe(self.stats)
        self.cluster: Any = None
        self.nemeses: list[Any] = []
        self.workloads: list["WorkloadRun"] = []
        self.seed: int | None = None
        self.faults: list[str] = []
        self.meta_workload: dict[str, Any] = {}
        self.meta_cluster: dict[str, Any] = {}
        self.finished = False
        self._zk = None

    def zk(self) -> Any:
        if self._zk is None:
            from kazoo.client import KazooClient
            self._zk = KazooClient(hosts=self.cluster.zookeeper_connect, timeout=10)
            self._zk.start(timeout=30)
        return self._zk

    def heal(self) -> None:
        from faults.nemesis import final_heal
        for n in self.nemeses:
            n.stop()
        if self.nemeses:
            final_heal(self.nemeses[0].ctx)

    def write_meta(self, **extra: Any) -> None:
        write_run_json(self.run_dir, run=self.run_id, seed=self.seed, cluster=self.meta_cluster,
                       workload=self.meta_workload, faults=self.faults, **extra)

    def close(self) -> None:
        for w in self.workloads:
            w.workload.kill_all()
        try:
            self.heal()
        finally:
            self.recorder.close(reason="test ended with the op outstanding")
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
            if not (self.run_dir / "run.json").exists():
                self.write_meta(outcome="incomplete")


@pytest.fixture
def chaos_run(tmp_path: Path):
    run = _Run(tmp_path)
    yield run
    run.close()


@pytest.fixture
def history(chaos_run: _Run) -> HistoryRecorder:
    """The test's HistoryRecorder (its file: history.run_dir / "history.jsonl")."""
    rec = chaos_run.recorder
    rec.run_dir = chaos_run.run_dir  # type: ignore[attr-defined]
    rec.stats = chaos_run.stats      # type: ignore[attr-defined]
    return rec


class WorkloadRun:
    """A started workload plus what it takes to end the run properly."""

    def __init__(self, run: _Run, workload: Any):
        self.run = run
        self.workload = workload
        self.final: Any = None

    def finish(self, *, quiet: float = 5.0, final_timeout: float = 60.0, settle_s: float = 5.0) -> "WorkloadRun":
        run = self.run
        for n in run.nemeses:   # let every schedule play to its end
            remaining = n.t0 + n.schedule.duration_s - time.monotonic() if n.t0 else 0
            if remaining > 0:
                time.sleep(remaining)
        run.heal()
        time.sleep(quiet)
        self.workload.stop()
        ends = {tp: off + 1 for tp, off in run.stats.acked.items()}
        self.final = self.workload.final_reads(ends, timeout=final_timeout, settle_s=settle_s)
        run.recorder.close()
        run.write_meta(outcome="complete" if self.final.complete else "incomplete",
                       result={"final_reads": {"complete": self.final.complete,
                                               "partitions": self.final.partitions,
                                               "missing": self.final.missing},
                               "nemesis": [{"done": n.done, "skipped": n.skipped, "errors": n.errors}
                                           for n in run.nemeses]})
        try:
            collect_logs(run.cluster, run.run_dir)
            dump_zookeeper(run.cluster.zookeeper_connect, run.run_dir)
        except Exception:  # noqa: BLE001 - evidence, not a verdict
            pass
        run.finished = True
        return self

    def verdict(self) -> dict[str, Any]:
        """summary.json of the checker (reports.analyze), as a dict."""
        return verdict(self.run.run_dir)


def verdict(run_dir: Path) -> dict[str, Any]:
    import json
    try:
        from reports import analyze
    except ImportError:
        pytest.skip("the checker (reports.analyze) is not available yet")
    result = analyze([str(run_dir)], out=str(run_dir))
    if isinstance(result, dict) and "valid" in result:
        return result
    return json.loads((Path(run_dir) / "summary.json").read_text())


@pytest.fixture
def workload(cluster: Any, chaos_run: _Run):
    """Factory: workload(topics={"t": 3}, replication_factor=3, client="confluent",
    acks="all", idempotent=False, retries=0, rate=100, producers=2, slots=4,
    consumers=1) -> WorkloadRun, already running."""
    from harness.run import create_topics
    from harness.workload import Workload, WorkloadSpec
    from harness.workload.clients import ProducerSettings
    from harness.workload.runner import launcher_for

    run = chaos_run
    run.cluster = cluster

    def start(topics: Mapping[str, int] | None = None, *, replication_factor: int | None = None,
              client: str = "confluent", acks: str = "all", idempotent: bool = False,
              retries: int = 0, max_in_flight: int = 1, request_timeout_ms: int = 5000,
              delivery_timeout_ms: int = 15000, rate: float = 100.0, producers: int = 2,
              slots: int = 4, consumers: int = 1) -> WorkloadRun:
        topics = dict(topics or {"t": 3})
        brokers = len(cluster.brokers())
        rf = replication_factor or min(3, brokers)
        create_topics(run.zk(), topics, rf, brokers)
        spec = WorkloadSpec(topics, client=client, producers=producers, slots=slots, consumers=consumers,
                            rate=rate, producer=ProducerSettings(
                                acks=acks, retries=retries, idempotent=idempotent,
                                max_in_flight=max_in_flight, request_timeout_ms=request_timeout_ms,
                                delivery_timeout_ms=delivery_timeout_ms))
        run.meta_workload = spec.to_json()
        run.meta_cluster = {"backend": cluster.backend, "brokers": brokers,
                            "zookeepers": cluster.spec.zookeepers, "replication_factor": rf,
                            "broker_config": dict(cluster.spec.broker_config)}
        w = Workload(run.recorder, lambda: cluster.bootstrap_servers, spec,
                     launcher=launcher_for(cluster, run.run_dir / "workers"))
        w.start()
        wr = WorkloadRun(run, w)
        run.workloads.append(wr)
        return wr

    yield start
    for wr in run.workloads:
        wr.workload.kill_all()


@pytest.fixture
def nemesis(cluster: Any, chaos_run: _Run):
    """Factory: nemesis(faults_or_schedule, duration=30, seed=0, interval=(5, 10),
    fault_duration=(5, 15), targets=None, params=None, partition=("t", 0))
    -> a running Nemesis. Always healed at teardown."""
    from faults.injectors.base import FaultContext
    from faults.nemesis import Nemesis, Schedule, make_schedule
    from faults.targets import Resolver

    run = chaos_run
    run.cluster = cluster

    def start(faults: Iterable[str] | Mapping[str, float] | Schedule, *, duration: float = 30.0,
              seed: int = 0, interval: tuple[float, float] = (5.0, 10.0),
              fault_duration: tuple[float, float] = (5.0, 15.0), quiet: float = 5.0,
              targets: Mapping[str, str] | None = None,
              params: Mapping[str, Mapping[str, Any]] | None = None,
              partition: tuple[str, int] = ("t", 0), mechanism: str = "auto") -> Nemesis:
        if isinstance(faults, Schedule):
            schedule = faults
        else:
            schedule = make_schedule(seed, faults, duration_s=duration, interval_s=interval,
                                     fault_duration_s=fault_duration, quiet_s=quiet,
                                     brokers=len(cluster.brokers()), zookeepers=cluster.spec.zookeepers,
                                     targets=targets, params=params)
        run.seed = schedule.seed
        run.faults = sorted(set(run.faults) | {s.fault for s in schedule.steps}
                            | set(schedule.settings.get("faults", {})))
        rng = random.Random(schedule.seed * 2 + 1)
        ctx = FaultContext(cluster, Resolver(cluster, run.zk(), rng, partition), rng,
                           recorder=run.recorder, log=lambda m: None, mechanism=mechanism)
        n = Nemesis(ctx, schedule).start()
        run.nemeses.append(n)
        return n

    yield start
    run.heal()
