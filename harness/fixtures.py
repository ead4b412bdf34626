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

Scripted scenarios whose next step depends on what the cluster did (wait
until the ISR has shrunk, then isolate the leader) use `nemesis.inject(...)`:
one fault from the catalogue, started now against an explicit target,
recorded in the history like a scheduled one, healed by the final heal.

    cut = nemesis.inject("partition-isolate", "broker-2", among="brokers")
    ...  # poll ZooKeeper until the ISR is [2]
    nemesis.inject("partition-isolate", "broker-2")
"""
from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import pytest

from harness.history import (HistoryRecorder, HistoryStats, collect_logs, dump_zookeeper,
                             new_run_id, write_run_json)


# How long a schedule may run past its nominal end (broker restarts under load).
SCHEDULE_OVERRUN_S = 120.0


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
        self._ctx: Any = None
        self.injected: list[Any] = []   # faults started by nemesis.inject, in order

    def zk(self) -> Any:
        if self._zk is None:
            from kazoo.client import KazooClient
            self._zk = KazooClient(hosts=self.cluster.zookeeper_connect, timeout=10)
            self._zk.start(timeout=30)
        return self._zk

    def fault_context(self, partition: tuple[str, int] = ("t", 0), mechanism: str = "auto",
                      seed: int = 0) -> Any:
        """The FaultContext that injected faults share (made on first use)."""
        if self._ctx is None:
            from faults.injectors.base import FaultContext
            from faults.targets import Resolver
            rng = random.Random(seed * 2 + 1)
            self._ctx = FaultContext(self.cluster, Resolver(self.cluster, self.zk(), rng, partition),
                                     rng, recorder=self.recorder, log=lambda m: None,
                                     mechanism=mechanism)
        return self._ctx

    def heal(self, final: bool = True) -> None:
        """Stop the schedules and heal the injected faults (latest first);
        with `final`, then heal_all and wait for every broker (the run's
        final heal, recorded as such)."""
        from faults.nemesis import final_heal
        for n in self.nemeses:
            n.stop()
        for inj in reversed(self.injected):
            try:
                inj.stop()
            except Exception:  # noqa: BLE001 - final_heal is the backstop
                pass
        ctx = self.nemeses[0].ctx if self.nemeses else self._ctx
        if final and ctx is not None:
            final_heal(ctx)

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
        for n in run.nemeses:
            # Let every schedule play to its end: a step that restarts a broker
            # can overrun the next step's start on a loaded machine, and its
            # later steps must still run rather than be cancelled by the heal.
            remaining = n.t0 + n.schedule.duration_s - time.monotonic() if n.t0 else 0
            n.join(timeout=max(0.0, remaining) + SCHEDULE_OVERRUN_S)
        # A schedule's final heal is at its duration (Schedule.describe's
        # heal_at_s), also when its last fault ended earlier.
        heal_at = max((n.t0 + n.schedule.duration_s for n in run.nemeses if n.t0), default=0.0)
        time.sleep(max(0.0, heal_at - time.monotonic()))
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
                                           for n in run.nemeses],
                               "injected": [inj.describe() for inj in run.injected]})
        try:
            collect_logs(run.cluster, run.run_dir)
            dump_zookeeper(run.cluster.zookeeper_connect, run.run_dir)
        except Exception:  # noqa: BLE001 - evidence, not a verdict
            pass
        run.finished = True
        return self

    def verdict(self, checker: str | None = None) -> dict[str, Any]:
        """summary.json of the checker (reports.analyze), as a dict."""
        return verdict(self.run.run_dir, checker)


def verdict(run_dir: Path, checker: str | None = None) -> dict[str, Any]:
    """Check one run directory with reports.analyze and return its summary
    (also written to RUN_DIR/summary.json, with report.html and junit.xml).
    `checker`: "reference" (the default: plain Python, fast on the small
    histories of a suite) or "spark"; env CHAOSLOG_CHECKER overrides the default."""
    from reports import analyze

    checker = checker or os.environ.get("CHAOSLOG_CHECKER", "reference")
    (v,) = analyze([str(run_dir)], checker=checker)
    if v.summary is None:
        raise AssertionError(f"the checker could not judge {run_dir}: {v.verdict}: {v.error}")
    return v.summary


@pytest.fixture
def workload(cluster: Any, chaos_run: _Run):
    """Factory: workload(topics={"t": 3}, replication_factor=3, client="confluent",
    acks="all", idempotent=False, retries=0, rate=100, producers=2, slots=4,
    consumers=1, assignment=None) -> WorkloadRun, already running.
    `assignment` places replicas by hand: {topic: {partition: [broker ids]}}
    (the first id is the preferred leader); other topics are spread as usual."""
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
              slots: int = 4, consumers: int = 1,
              assignment: Mapping[str, Mapping[int, list[int]]] | None = None) -> WorkloadRun:
        topics = dict(topics or {"t": 3})
        brokers = len(cluster.brokers())
        rf = replication_factor or min(3, brokers)
        placed = dict(assignment or {})
        for topic, plan in placed.items():
            from cluster.admin import create_topic
            if len(plan) != topics.get(topic):
                raise ValueError(f"assignment of {topic!r} has {len(plan)} partitions, "
                                 f"topics says {topics.get(topic)}")
            create_topic(run.zk(), topic, len(plan), 0, replica_assignment=dict(plan))
            rf = len(next(iter(plan.values())))
        create_topics(run.zk(), {t: n for t, n in topics.items() if t not in placed}, rf, brokers)
        if placed:  # wait for the leaders of the placed topics too
            _wait_leaders(run.zk(), {t: topics[t] for t in placed})
        spec = WorkloadSpec(topics, client=client, producers=producers, slots=slots, consumers=consumers,
                            rate=rate, producer=ProducerSettings(
                                acks=acks, retries=retries, idempotent=idempotent,
                                max_in_flight=max_in_flight, request_timeout_ms=request_timeout_ms,
                                delivery_timeout_ms=delivery_timeout_ms))
        run.meta_workload = spec.to_json()
        run.meta_cluster = {"backend": cluster.backend, "brokers": brokers,
                            "zookeepers": cluster.spec.zookeepers, "replication_factor": rf,
                            "broker_config": dict(cluster.spec.broker_config)}
        launch = launcher_for(cluster, run.run_dir / "workers")
        tag = run.run_id.rsplit("-", 1)[-1]
        # Worker names carry the run's id: a cluster shared by several runs
        # (module scope) must not meet a worker name twice (docker: container names).
        w = Workload(run.recorder, lambda: cluster.bootstrap_servers, spec,
                     launcher=lambda name, argv: launch(f"{tag}-{name}", argv))
        w.start()
        wr = WorkloadRun(run, w)
        run.workloads.append(wr)
        return wr

    yield start
    for wr in run.workloads:
        wr.workload.kill_all()


class NemesisFactory:
    """What the `nemesis` fixture yields.

    nemesis(faults_or_schedule, duration=30, seed=0, ...) starts a schedule
    (seeded, from fault names or weights, or a Schedule of explicit Steps).
    nemesis.inject(fault, target, **params) starts one fault now and returns
    its injector (call .stop() to heal it early); nemesis.resolve(target)
    says which nodes a role denotes right now. Everything is healed at the
    end of the run (WorkloadRun.finish) and at teardown."""

    def __init__(self, cluster: Any, run: _Run):
        self.cluster = cluster
        self.run = run

    def __call__(self, faults: Iterable[str] | Mapping[str, float] | Any, *, duration: float = 30.0,
                 seed: int = 0, interval: tuple[float, float] = (5.0, 10.0),
                 fault_duration: tuple[float, float] = (5.0, 15.0), quiet: float = 5.0,
                 targets: Mapping[str, str] | None = None,
                 params: Mapping[str, Mapping[str, Any]] | None = None,
                 partition: tuple[str, int] = ("t", 0), mechanism: str = "auto") -> Any:
        from faults.injectors.base import FaultContext
        from faults.nemesis import Nemesis, Schedule, make_schedule
        from faults.targets import Resolver

        run, cluster = self.run, self.cluster
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

    def inject(self, fault: str, target: str | None = None, *, partition: tuple[str, int] = ("t", 0),
               mechanism: str = "auto", **params: Any) -> Any:
        """Start one fault of the catalogue now, against `target` (a role or a
        node name); returns the started Injector. Raises what the injector
        raises (FaultError, TargetError): a scripted scenario wants to know."""
        from faults import injectors
        run = self.run
        ctx = run.fault_context(partition, mechanism)
        ctx.resolver.default_partition = partition
        ctx.mechanism = mechanism
        inj = injectors.make(fault, ctx, target, **params)
        inj.start()
        run.injected.append(inj)
        if fault not in run.faults:
            run.faults = sorted(set(run.faults) | {fault})
        return inj

    def heal(self) -> None:
        """Heal every fault started so far (injected ones latest first, and
        the schedules'), now; the run goes on."""
        self.run.heal(final=False)

    def resolve(self, target: str, partition: tuple[str, int] = ("t", 0)) -> list[str]:
        """The node names `target` denotes now (faults.targets syntax)."""
        from faults.targets import Resolver
        return Resolver(self.cluster, self.run.zk(), random.Random(0), partition).resolve(target)


def _wait_leaders(zk: Any, topics: Mapping[str, int], timeout: float = 60.0) -> None:
    from cluster import zkpaths
    deadline = time.monotonic() + timeout
    pending = [(t, p) for t, n in topics.items() for p in range(n)]
    while pending:
        still = []
        for t, p in pending:
            path = zkpaths.leader_and_isr_path(t, p)
            data = zk.exists(path) and zk.get(path)[0]
            if not data or zkpaths.LeaderAndIsr.decode(data).leader == zkpaths.NO_LEADER:
                still.append((t, p))
        pending = still
        if pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no leader after {timeout:.0f}s for {pending[:5]}")
            time.sleep(0.2)


@pytest.fixture
def nemesis(cluster: Any, chaos_run: _Run):
    """Factory: nemesis(faults_or_schedule, duration=30, seed=0, interval=(5, 10),
    fault_duration=(5, 15), targets=None, params=None, partition=("t", 0))
    -> a running Nemesis; nemesis.inject(fault, target, **params) -> a started
    Injector. Always healed at teardown."""
    run = chaos_run
    run.cluster = cluster
    yield NemesisFactory(cluster, run)
    run.heal()
