"""pytest fixtures for chaos suites: `chaos_run`, `workload`, `nemesis`, `history`.

They are thin adapters over harness.run.Run, the one composition of a run
that `chaoslog run` and `chaoslog demo` use too, bound to the `cluster`
fixture of the chaoslog plugin and to the test's own directory (tmp_path:
history.jsonl, run.json, logs/, zookeeper.json). A suite test states only
what differs: broker config (a marker), faults, the expected verdict.

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

from faults import recipes
from faults.nemesis import Nemesis, Schedule, make_schedule
from harness.history import HistoryRecorder
from harness.run import Run
from harness.workload import WorkloadSpec
from harness.workload.clients import ProducerSettings


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
    commit="manual", assignment=None) -> the Run, its workload running.
    `assignment` places replicas by hand: {topic: {partition: [broker ids]}}
    (the first id is the preferred leader); other topics are spread as usual.
    `mix`: producer settings in turn (ProducerSettings or dicts of its
    fields), instead of acks/idempotent/... for all. `sub_via="subscribe"`:
    the consumers are one consumer group that commits (`commit`)."""
    run = chaos_run

    def start(topics: Mapping[str, int] | None = None, *, replication_factor: int | None = None,
              client: str = "confluent", acks: str = "all", idempotent: bool = False,
              retries: int = 0, max_in_flight: int = 1, request_timeout_ms: int = 5000,
              delivery_timeout_ms: int = 15000, rate: float = 100.0, producers: int = 2,
              slots: int = 4, consumers: int = 1, fetchers: int = 0,
              mix: Iterable[ProducerSettings | Mapping[str, Any]] = (),
              crash_every_s: float = 0.0, sub_via: str = "assign", commit: str = "manual",
              assignment: Mapping[str, Mapping[int, list[int]]] | None = None) -> Run:
        topics = dict(topics or {"t": 3})
        rf = replication_factor or min(3, run.cluster.spec.brokers)
        run.create_topics(topics, rf, assignment)
        base = dict(acks=acks, retries=retries, idempotent=idempotent,
                    max_in_flight=max_in_flight, request_timeout_ms=request_timeout_ms,
                    delivery_timeout_ms=delivery_timeout_ms)
        run.start_workload(WorkloadSpec(
            topics, client=client, producers=producers, slots=slots, consumers=consumers,
            rate=rate, producer=ProducerSettings(**base), fetchers=fetchers,
            mix=tuple(m if isinstance(m, ProducerSettings) else ProducerSettings(**{**base, **m})
                      for m in mix),
            crash_every_s=crash_every_s, sub_via=sub_via, commit=commit))
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
        spec = self.run.cluster.spec
        schedule = faults if isinstance(faults, Schedule) else make_schedule(
            seed, faults, duration_s=duration, interval_s=interval, fault_duration_s=fault_duration,
            quiet_s=quiet, brokers=spec.brokers, zookeepers=spec.zookeepers, targets=targets,
            params=params, overlap=overlap, lag_s=recipes.lag_s_of(spec.broker_config),
            refuses=self.run.cluster.refuses)
        return self.run.start_nemesis(schedule, partition=partition)

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
