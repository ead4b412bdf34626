"""pytest fixtures for chaos suites: `chaos_run`, `workload`, `nemesis`, `history`.

They are thin adapters over harness.run.Run, the one composition of a run
that `chaoslog run` and `chaoslog demo` use too, bound to the `cluster`
fixture of the chaoslog plugin and to the test's own directory (tmp_path:
history.jsonl, run.json, logs/, zookeeper.json). A suite test states only
what differs: broker config (a marker), faults, the expected verdict. What
it asks for becomes a RunSpec, checked by the same RunSpec.validate as a
`chaoslog run` (against the started cluster: harness.run.Refused says why not).

    @pytest.mark.broker_config(**{"min.insync.replicas": 2})
    def test_no_loss_under_leader_kills(workload, nemesis):
        run = workload(topics={"t": 3}, acks="all")
        nemesis(["kill", "pause"], duration=30, seed=7)
        assert run.finish().verdict()["valid"] is True

`workload(...)` creates the topics, starts producers and consumers and
returns the Run; `nemesis(...)` starts a seeded schedule (or a Schedule of
explicit steps); `run.finish()` does the end of a run in the one right order
(Run.finish) and `run.verdict()` runs the checker. Everything is healed and
stopped at teardown, even when the test fails.

Scripted scenarios whose next step depends on what the cluster did (wait
until the ISR has shrunk, then isolate the leader) use `nemesis.inject(...)`:
one fault from the catalogue, started now against an explicit target,
recorded in the history like a scheduled one, healed by the final heal.

    cut = nemesis.inject("partition-isolate", "broker-2", among="brokers")
    ...  # poll ZooKeeper until the ISR is [2]
    nemesis.inject("partition-isolate", "broker-2")
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import pytest

from faults.nemesis import Nemesis, Schedule
from harness.history import HistoryRecorder
from harness.run import Draw, Run, RunSpec
from harness.workload import WorkloadSpec
from harness.workload.clients import ProducerSettings


def checked(run: Run, replication_factor: int, workload: WorkloadSpec | None,
            schedule: Schedule | Draw, quiet_s: float = 10.0) -> RunSpec:
    """The spec of what a test asks of its Run, validated against the Run's
    started cluster (RunSpec.validate): the same rules as `chaoslog run`."""
    spec = RunSpec(cluster=run.cluster.spec, backend=run.cluster.backend,
                   replication_factor=replication_factor,
                   workload=workload or WorkloadSpec({"t": 3}), schedule=schedule,
                   quiet_s=quiet_s)
    return spec.validate(cluster=run.cluster)


def replication_factor_of(run: Run) -> int:
    """The run's replication factor once its topics exist, else the default."""
    return run.meta["cluster"].get("replication_factor") or min(3, run.cluster.spec.brokers)


@pytest.fixture
def chaos_run(cluster: Any, tmp_path: Path):
    """The test's Run against the `cluster` fixture, closed at teardown."""
    run = Run(tmp_path, cluster)
    yield run
    run.close()


@pytest.fixture
def history(chaos_run: Run) -> HistoryRecorder:
    """The test's HistoryRecorder (its directory: history.run_dir)."""
    return chaos_run.recorder


@pytest.fixture
def workload(chaos_run: Run):
    """Factory: workload(topics={"t": 3}, replication_factor=3, client="confluent",
    acks="all", idempotent=False, retries=0, rate=100, producers=2, slots=4,
    consumers=1, fetchers=0, mix=(), crash_every_s=0, sub_via="assign",
    commit="manual", transactions=False, abort_ratio=0.2, assignment=None) -> the Run,
    its workload running.
    `assignment` places replicas by hand: {topic: {partition: [broker ids]}}
    (the first id is the preferred leader); other topics are spread as usual.
    `mix`: producer settings in turn (ProducerSettings or dicts of its
    fields), instead of acks/idempotent/... for all. `sub_via="subscribe"`:
    the consumers are one consumer group that commits (`commit`). `transactions`:
    the producers write in transactions, aborting `abort_ratio` of them, and
    the consumers read at read_committed."""
    run = chaos_run

    def start(topics: Mapping[str, int] | None = None, *, replication_factor: int | None = None,
              client: str = "confluent", acks: str = "all", idempotent: bool = False,
              retries: int = 0, max_in_flight: int = 1, request_timeout_ms: int = 5000,
              delivery_timeout_ms: int = 15000, rate: float = 100.0, producers: int = 2,
              slots: int = 4, consumers: int = 1, fetchers: int = 0,
              mix: Iterable[ProducerSettings | Mapping[str, Any]] = (),
              crash_every_s: float = 0.0, sub_via: str = "assign", commit: str = "manual",
              transactions: bool = False, abort_ratio: float = 0.2,
              assignment: Mapping[str, Mapping[int, list[int]]] | None = None) -> Run:
        topics = dict(topics or {"t": 3})
        rf = replication_factor or min(3, run.cluster.spec.brokers)
        base = dict(acks=acks, retries=retries, idempotent=idempotent,
                    max_in_flight=max_in_flight, request_timeout_ms=request_timeout_ms,
                    delivery_timeout_ms=delivery_timeout_ms)
        spec = checked(run, rf, WorkloadSpec(
            topics, client=client, producers=producers, slots=slots, consumers=consumers,
            rate=rate, producer=ProducerSettings(**base), fetchers=fetchers,
            mix=tuple(m if isinstance(m, ProducerSettings) else ProducerSettings(**{**base, **m})
                      for m in mix),
            crash_every_s=crash_every_s, sub_via=sub_via, commit=commit,
            transactions=transactions, abort_ratio=abort_ratio),
            Schedule(seed=0, duration_s=1.0, quiet_s=0.0, steps=[]))
        run.create_topics(topics, rf, assignment)
        run.start_workload(spec.workload)
        return run

    return start


class NemesisFactory:
    """What the `nemesis` fixture yields.

    nemesis(faults_or_schedule, duration=30, seed=0, ...) starts a schedule
    (seeded, from fault names or weights, or a Schedule of explicit Steps).
    nemesis.inject(fault, target, **params) starts one fault now and returns
    its injector (call .stop() to heal it early); nemesis.resolve(target)
    says which nodes a role denotes right now; nemesis.heal() heals what was
    started so far while the run goes on. `nemesis.run` is the Run."""

    def __init__(self, run: Run):
        self.run = run

    def __call__(self, faults: Iterable[str] | Mapping[str, float] | Schedule, *,
                 duration: float = 30.0, seed: int = 0,
                 interval: tuple[float, float] = (5.0, 10.0),
                 fault_duration: tuple[float, float] = (5.0, 15.0), quiet: float = 5.0,
                 targets: Mapping[str, str] | None = None,
                 params: Mapping[str, Mapping[str, Any]] | None = None,
                 partition: tuple[str, int] | None = None, overlap: int = 1) -> Nemesis:
        run = self.run
        asked = faults if isinstance(faults, Schedule) else Draw(
            faults=faults, seed=seed, duration_s=duration, interval_s=tuple(interval),
            fault_duration_s=tuple(fault_duration), overlap=overlap, targets=dict(targets or {}),
            params={f: dict(p) for f, p in (params or {}).items()})
        spec = checked(run, replication_factor_of(run),
                       run.workload.spec if run.workload is not None else None, asked, quiet)
        return run.start_nemesis(spec.schedule, partition=partition)

    def inject(self, fault: str, target: str | None = None, *,
               partition: tuple[str, int] | None = None, **params: Any) -> Any:
        return self.run.inject(fault, target, partition=partition, **params)

    def heal(self) -> None:
        self.run.heal(final=False)

    def resolve(self, target: str, partition: tuple[str, int] | None = None) -> list[str]:
        return self.run.resolve(target, partition)


@pytest.fixture
def nemesis(chaos_run: Run) -> NemesisFactory:
    """Factory: nemesis(faults_or_schedule, duration=30, seed=0, interval=(5, 10),
    fault_duration=(5, 15), targets=None, params=None, partition=None, overlap=1)
    -> a running Nemesis; nemesis.inject(fault, target, **params) -> a started
    Injector. Always healed at teardown (chaos_run closes the Run)."""
    return NemesisFactory(chaos_run)
