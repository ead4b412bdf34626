"""One chaos run, composed in one place.

In the spirit of Jepsen's test map: a run is a cluster, a workload, a nemesis
schedule, a checker and an output directory. `RunSpec` is that map as plain
data (what `chaoslog run`, `chaoslog demo`, campaigns, replays, benches and
the pytest fixtures build), and `RunSpec.validate()` holds every rule of a
run; `Run` is the live run against one started cluster, with its steps in
the one right order:

    create_topics -> start_workload -> start_nemesis / inject ...
      -> finish: wait out the schedules, final heal, quiet period, stop the
         clients, final reads, close the history, run.json, evidence
      -> check: the checker's verdict

`execute(spec)` does all of it for a RunSpec, owning the cluster; the pytest
fixtures (harness/fixtures.py) drive the same steps one by one against the
`cluster` fixture, so a scripted scenario can act between them. Every Run
makes exactly one FaultContext (faults.injectors.base.FaultContext.create),
shared by its schedules and injected faults.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from cluster import admin
from cluster.config import BrokerConfig, ConfigError
from faults import injectors, recipes
from faults.heal import final_heal
from faults.injectors.base import FaultContext, FaultError, Injector
from faults.nemesis import Nemesis, Schedule, make_schedule, parse_weights
from faults.targets import Resolver, Target, TargetError, qualify
from harness.backends.base import ClusterError, ClusterSpec, coordination_of, mode_refusal
from harness.history import (HistoryRecorder, HistoryStats, collect_logs, dump_zookeeper,
                             new_run_id, utc_now_iso, write_run_json)
from harness.observer import (OBSERVATIONS, MetadataSampler, Observations, StateSampler,
                              await_recovery, metadata_state, observe_brokers, observe_replicas,
                              zookeeper_state)
from harness.resources import ResourceSampler
from harness.security import PLAINTEXT, ClientSecurity
from harness.topics import create_topics, wait_for_leaders
from harness.workload import FinalReads, Workload, WorkloadSpec
from harness.workload.clients import ProducerSettings
from harness.workload.runner import launcher_for
from reports.exit_codes import (EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED,
                                EXIT_UNKNOWN, of_verdict)

# How long a schedule may run past its nominal end (broker restarts under load).
SCHEDULE_OVERRUN_S = 120.0
# Until every partition of a new topic has a leader.
TOPIC_LEADERS_TIMEOUT_S = 60.0
# The bounds the checker applies (run.json `checks`, docs/history-format.md),
# sized for a loaded 2-core machine and the 6 s ZooKeeper session timeout:
# after the final heal the cluster must be fully replicated within
# RECOVERY_BOUND_S; a partition may go without a live leader for LEADERLESS_S
# while one of its ISR members is alive (two session timeouts and an election).
RECOVERY_BOUND_S = 60.0
# What a run takes besides its schedule and quiet period (cluster start,
# topics, final reads, evidence, the check) until runs show better (RunTimes).
RUN_OVERHEAD_S = 60.0
CHECKS = {"leaderless_s": 20.0, "ack_margin_s": 5.0, "recovery_grace_s": 5.0,
          "recovery_bound_s": RECOVERY_BOUND_S}


def log_line(msg: str) -> None:
    print(f"chaoslog: {msg}", file=sys.stderr, flush=True)


class Refused(ValueError):
    """Settings that cannot work; the message is the one-line reason, in the
    words of `chaoslog run`'s options (a spec's fields are named after them)."""


# The producer kinds of a mix (`--mix idempotent,1`; workload.mix = ["idempotent", "1"]).
MIX = {"all": {"acks": "all"}, "1": {"acks": "1"}, "0": {"acks": "0"},
       "idempotent": {"acks": "all", "idempotent": True, "max_in_flight": 5}}


def mix_of(kinds: Any, base: ProducerSettings) -> tuple[ProducerSettings, ...]:
    """Producers' settings in turn: a kind of MIX is `base` with its acks and
    idempotence; a ProducerSettings or a dict of its fields is taken as it is."""
    out = []
    for kind in kinds:
        if isinstance(kind, ProducerSettings):
            out.append(kind)
        elif isinstance(kind, Mapping):
            out.append(_producer(kind, "workload.mix"))
        elif str(kind) in MIX:
            out.append(ProducerSettings(**{**asdict(base), "retries": 0, "idempotent": False,
                                           **MIX[str(kind)]}))
        else:
            raise Refused(f"--mix: {kind!r} is not one of {', '.join(MIX)}")
    return tuple(out)


@dataclass
class Draw:
    """A nemesis schedule still to be drawn (faults.nemesis.make_schedule),
    as data: the `--faults`, `--seed`, `--duration`, `--interval`,
    `--fault-duration`, `--overlap`, pinned `--target` roles and `--param`
    values of `chaoslog run`. RunSpec.validate draws it."""
    faults: Any = ()                   # ["kill:3", "pause"] or {"kill": 3, "pause": 1}
    seed: int | None = None            # None: a random one (validate chooses it)
    duration_s: float = 60.0
    interval_s: tuple[float, float] = (5.0, 10.0)
    fault_duration_s: tuple[float, float] = (5.0, 15.0)
    overlap: int = 1
    targets: dict[str, str] = field(default_factory=dict)               # fault -> role
    params: dict[str, dict[str, Any]] = field(default_factory=dict)     # fault -> {key: value}

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["faults"] = dict(self.faults) if isinstance(self.faults, Mapping) else list(self.faults)
        d["interval_s"], d["fault_duration_s"] = list(self.interval_s), list(self.fault_duration_s)
        return d


def refuse_backend(system: str, backend: str | None) -> None:
    """Tansu and an external cluster run where they run: no --backend."""
    if system != "chaoslog" and backend not in (None, system):
        raise Refused(f"--backend {backend}: --target {system} runs where it runs; "
                      "drop --backend")


@dataclass
class RunSpec:
    """Everything one run is, as data (Jepsen's test map): the same spec
    gives the same schedule and the same settings (the cluster itself is not
    deterministic). Its defaults are those of `chaoslog run` with no option.
    `chaoslog run` maps its options onto one, campaigns build them from
    TOML tables of these fields (`from_data`), benches and the pytest
    fixtures build them in code; all of them call `validate()`, the one
    place a run's rules live."""
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    backend: str | None = None         # docker | local | tansu | external; None: docker when an engine answers
    replication_factor: int = 3
    workload: WorkloadSpec = field(default_factory=lambda: WorkloadSpec({"t": 3}))
    schedule: Schedule | Draw = field(default_factory=Draw)   # validate() draws a Draw
    quiet_s: float = 10.0              # between the final heal and the final reads
    final_timeout_s: float = 60.0
    settle_s: float = 10.0             # final reads: how long to wait for acknowledged ends
    mechanism: str = "auto"            # how partitions are made: iptables | proxy | auto
    checker: str | None = "spark"      # spark | reference | None (no analysis)
    out: Path | None = None            # default runs/RUN_ID
    # Every client's security settings (--client-config, a [client] table):
    # the password's source, never the password (harness/security.py).
    client: ClientSecurity = PLAINTEXT

    @property
    def seed(self) -> int | None:
        return self.schedule.seed

    def to_json(self) -> dict[str, Any]:
        return {"cluster": asdict(self.cluster), "backend": self.backend,
                "replication_factor": self.replication_factor,
                "workload": self.workload.to_json(), "schedule": self.schedule.to_json(),
                "quiet_s": self.quiet_s, "final_timeout_s": self.final_timeout_s,
                "settle_s": self.settle_s, "mechanism": self.mechanism, "checker": self.checker,
                "client": self.client.to_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RunSpec":
        """The spec `to_json` wrote (a run's run.json keeps it as `spec`,
        a shrink's spec.json is one): a replay of the whole run, settings and
        schedule. KeyError or ValueError when something is missing or wrong."""
        for key in ("cluster", "backend", "replication_factor", "workload", "schedule",
                    "quiet_s", "final_timeout_s", "settle_s", "mechanism"):
            d[key]   # noqa: B018 - a whole spec has every field: KeyError names the missing one
        workload = {k: v for k, v in d["workload"].items() if k not in WORKLOAD_DERIVED}
        return cls.from_data({**d, "workload": workload})

    @classmethod
    def from_data(cls, d: Mapping[str, Any]) -> "RunSpec":
        """A spec from plain data (a campaign's TOML tables): the fields of
        `to_json`, each one left out taking its default; `schedule` is a
        Schedule (it has `steps`) or a Draw. Refused names a field that is
        not one or a value of the wrong kind."""
        _known(d, RUN_FIELDS, "")
        backend = d.get("backend")
        cluster = d.get("cluster") or {}
        _table(cluster, "cluster")
        try:
            from harness.backends import spec_from_json
            cluster_spec = spec_from_json(str(backend), dict(cluster))
        except (TypeError, ClusterError) as e:
            raise Refused(f"cluster: {e}") from None
        plain: dict[str, Any] = {}
        for key, conv in (("replication_factor", int), ("quiet_s", float),
                          ("final_timeout_s", float), ("settle_s", float), ("mechanism", str)):
            if key in d:
                plain[key] = _value(d[key], conv, key)
        if "checker" in d:
            plain["checker"] = d["checker"]
        if d.get("client") is not None:
            plain["client"] = _client(d["client"])
        return cls(cluster=cluster_spec, backend=backend, workload=_workload(d.get("workload") or {}),
                   schedule=_schedule(d.get("schedule") or {}), **plain)

    def validate(self, cluster: Any = None) -> "RunSpec":
        """Every rule of a run, checked before anything starts; Refused says
        the first one broken, in one line. Returns the spec to run: the
        schedule drawn (a random seed if none is given), the backend chosen,
        the links proxied where the faults need it.

        With `cluster`, a started cluster (the pytest fixtures), its shape is
        given: what it refuses is what it declares (Cluster.refuses), and
        nothing about how to start it is decided here."""
        from harness.backends.external import ExternalSpec
        from harness.backends.tansu import TansuSpec
        spec, rf = self.cluster, self.replication_factor
        system = ("external" if isinstance(spec, ExternalSpec)
                  else "tansu" if isinstance(spec, TansuSpec) else "chaoslog")
        backend = self.backend
        if cluster is None and system != "chaoslog":
            refuse_backend(system, backend)
            if spec.broker_config:
                raise Refused(f"--broker-config: it configures the built-in broker, not "
                              f"{system}'s")
            if system == "tansu" and rf != 1:
                raise Refused(f"--replication-factor {rf}: tansu's brokers keep no replicas of "
                              "their own (one PostgreSQL stores every record); use "
                              "--replication-factor 1")
            backend = system
        if spec.brokers < 1:
            raise Refused(f"--brokers {spec.brokers}: at least 1")
        if cluster is None:
            try:
                spec.validate()
            except ClusterError as e:
                raise Refused(str(e)) from None
        if not 1 <= rf <= spec.brokers:
            raise Refused(f"--replication-factor {rf} with {spec.brokers} broker(s): it must be "
                          f"between 1 and the broker count")
        draw = self.schedule if isinstance(self.schedule, Draw) else None
        replay = self.schedule if isinstance(self.schedule, Schedule) else None
        if draw is not None and draw.duration_s <= 0:
            raise Refused("--duration must be positive")
        if replay is not None and (replay.duration_s <= 0 or replay.quiet_s < 0):
            raise Refused("the schedule's duration_s must be positive and quiet_s not negative")
        w = self.workload
        if w.producers < 1 or w.slots < 1 or w.consumers < 0 or w.fetchers < 0:
            raise Refused("--producers and --slots must be at least 1, --consumers and --fetchers "
                          "at least 0")
        if draw is not None and draw.overlap < 1:
            raise Refused(f"--overlap {draw.overlap}: at least 1 lane")
        if w.crash_every_s < 0:
            raise Refused("--crash-clients: seconds, 0 for never")
        if system == "chaoslog":
            try:
                BrokerConfig.from_dict(dict(spec.broker_config))
            except ConfigError as e:
                raise Refused(f"--broker-config: {e}") from None
        min_isr = int(spec.broker_config.get("min.insync.replicas", 1))
        if min_isr > rf:   # docs/design.md#acks: acks=all needs min.insync.replicas in the ISR
            raise Refused(f"min.insync.replicas={min_isr} is above --replication-factor {rf}: no "
                          f"acks=all write could ever succeed")
        try:
            weights = parse_weights([s.fault for s in replay.steps] if replay is not None
                                    else draw.faults)
        except FaultError as e:
            raise Refused(str(e)) from None
        if cluster is not None:
            backend = cluster.backend
        elif system == "chaoslog":
            backend = backend or _default_backend()
        used = sorted(recipes.faults_of(weights))   # the recipes' faults too
        if cluster is None and system == "chaoslog":
            # Links through the proxy when a fault needs them: link toxics on any
            # backend; partitions on the local backend (docker cuts them with iptables).
            # A started cluster (`cluster`) has the links it has.
            needs_link = any("proxy" in injectors.kind(f).needs for f in used)
            needs_net = any("net" in injectors.kind(f).needs for f in used)
            spec = replace(spec, proxied=spec.proxied or needs_link or self.mechanism == "proxy"
                           or (needs_net and backend == "local" and self.mechanism != "iptables"))
        targets = dict(draw.targets) if draw is not None else {}
        refuses = cluster.refuses if cluster is not None else _refusal(spec)
        if refuses is not None:
            # Drawn roles pinned to ones the target takes (V2: docs/design.md#v2); a
            # started cluster's draw avoids them instead (make_schedule's `refuses`).
            if cluster is None:
                targets = {**allowed_roles(refuses, weights, rf), **targets}
            refuse_unsupported(refuses, used, replay, targets)
        for f in used if cluster is None and system == "chaoslog" else ():
            why = injectors.unsupported(f, backend=backend, proxied=spec.proxied,
                                        zookeepers=spec.zookeepers)
            if why:
                raise Refused(f"{why} (backend {backend})")
        if self.mechanism == "iptables" and backend != "docker" and any(
                injectors.kind(f).family == "partition" for f in used):
            raise Refused("--mechanism iptables needs the docker backend")
        nodes = (cluster.spec if cluster is not None else spec).node_names()
        for step in replay.steps if replay is not None else ():
            if step.target:
                try:
                    Target.parse(step.target).check_against(nodes)
                except TargetError as e:
                    raise Refused(f"the schedule's {step.fault} at {step.at_s:g}s targets "
                                  f"{step.target}: {e}") from None
        for f, role in targets.items():
            if f not in weights:
                raise Refused(f"--target {f}={role}: {f} is not among --faults")
            if f in recipes.RECIPES:
                raise Refused(f"--target {f}={role}: {f} is a recipe, its steps choose their own "
                              f"roles")
            try:
                Target.parse(role).check_against(nodes)
            except TargetError as e:
                raise Refused(f"--target {f}={role}: {e}") from None
        if draw is not None:
            self._check_draw(draw, weights)
        schedule = replay or self._drawn(draw, weights, targets, spec,
                                         refuses if cluster is not None else None)
        if w.commit != "manual" and w.sub_via != "subscribe":
            raise Refused(f"--commit {w.commit}: only consumers of a group commit "
                          f"(--sub-via subscribe)")
        for t in w.topics:
            if not all(c.isalnum() or c in "._-" for c in t) or not 0 < len(t) <= 200:
                raise Refused(f"--topics: {t!r} is not a valid topic name")
        if self.client != PLAINTEXT:
            self._check_client(system)
        return replace(self, cluster=spec, backend=backend, schedule=schedule)

    def _check_client(self, system: str) -> None:
        """Client settings are for a cluster the harness did not start (a
        built-in cluster makes its clients' own); its workers run here, where
        the password's source is. The password is read once now, so a run
        without it is refused before anything starts."""
        if system != "external":
            raise Refused(f"--client-config goes with --target external, a cluster chaoslog did "
                          f"not start; the {system} target's clients connect as chaoslog set "
                          f"it up")
        if self.client.sasl:
            try:
                self.client.password()
            except ValueError as e:
                raise Refused(f"--client-config: {e}") from None

    @staticmethod
    def _check_draw(draw: Draw, weights: dict[str, float]) -> None:
        for key, params in draw.params.items():
            for k, v in params.items():
                if key not in weights or not k or key in recipes.RECIPES:
                    raise Refused(f"--param {key}{'.' + k if k else ''}={v}: expected "
                                  f"FAULT.KEY=VALUE for a fault among --faults (recipes take none)")
        for what, (lo, hi) in (("--interval", draw.interval_s),
                               ("--fault-duration", draw.fault_duration_s)):
            if lo > hi or lo < 0:
                raise Refused(f"{what} '{lo:g},{hi:g}': expected SECONDS or MIN,MAX with "
                              f"MIN <= MAX")

    def _drawn(self, draw: Draw, weights: dict[str, float], targets: dict[str, str],
               spec: ClusterSpec, refuses: Callable[[str, str | None], str | None] | None
               ) -> Schedule:
        import random
        seed = draw.seed if draw.seed is not None else random.SystemRandom().randrange(2**31)
        try:
            return make_schedule(seed, weights, duration_s=draw.duration_s,
                                 interval_s=draw.interval_s, fault_duration_s=draw.fault_duration_s,
                                 quiet_s=self.quiet_s, brokers=spec.brokers,
                                 zookeepers=spec.zookeepers,
                                 replication_factor=self.replication_factor, targets=targets,
                                 params=draw.params, overlap=draw.overlap,
                                 lag_s=recipes.lag_s_of(spec.broker_config), refuses=refuses)
        except FaultError as e:
            raise Refused(str(e)) from None


# -- a spec's data form: the fields `from_data` takes -------------------------------------

RUN_FIELDS = ("cluster", "backend", "replication_factor", "workload", "schedule", "quiet_s",
              "final_timeout_s", "settle_s", "mechanism", "checker", "client")
# Keys WorkloadSpec.to_json adds for readers of run.json; not fields.
WORKLOAD_DERIVED = ("acks", "idempotence", "partitions", "pipeline")


def _known(d: Any, fields: Any, where: str) -> None:
    _table(d, where or "a run's spec")
    unknown = sorted(set(d) - set(fields))
    if unknown:
        raise Refused(f"{where + '.' if where else ''}{unknown[0]}: not a field of "
                      f"{where or 'a run spec'} ({', '.join(fields)})")


def _table(d: Any, where: str) -> None:
    if not isinstance(d, Mapping):
        raise Refused(f"{where}: a table of fields, not {d!r}")


def _value(v: Any, conv: Callable[[Any], Any], where: str) -> Any:
    try:
        return conv(v)
    except (TypeError, ValueError):
        raise Refused(f"{where}: {v!r} is not {KINDS[conv]}") from None


KINDS = {int: "a whole number", float: "a number", str: "a text"}


def _producer(d: Any, where: str) -> ProducerSettings:
    _known(d, [f.name for f in fields(ProducerSettings)], where)
    try:
        return ProducerSettings(**d)
    except ValueError as e:
        raise Refused(f"{where}: {e}") from None


def _workload(d: Mapping[str, Any]) -> WorkloadSpec:
    _known(d, [f.name for f in fields(WorkloadSpec)], "workload")
    plain = dict(d)
    topics = plain.get("topics", {"t": 3})
    _table(topics, "workload.topics")
    plain["topics"] = {str(t): _value(n, int, f"workload.topics.{t}") for t, n in topics.items()}
    plain["producer"] = _producer(plain.get("producer") or {}, "workload.producer")
    plain["mix"] = mix_of(plain.get("mix") or (), plain["producer"])
    try:
        return WorkloadSpec(**plain)
    except (TypeError, ValueError) as e:
        raise Refused(f"workload: {e}") from None


def _client(d: Any) -> ClientSecurity:
    _table(d, "client")
    try:
        return ClientSecurity.from_data(d)
    except ValueError as e:
        raise Refused(f"client: {e}") from None


def _schedule(d: Mapping[str, Any]) -> Schedule | Draw:
    """A Schedule when `d` has steps (a replay), else the Draw it describes."""
    _table(d, "schedule")
    if "steps" in d:
        return Schedule.from_json(d)
    _known(d, [f.name for f in fields(Draw)], "schedule")
    plain = dict(d)
    for key in ("interval_s", "fault_duration_s"):
        if key in plain:   # SECONDS or [MIN, MAX]
            v = plain[key]
            pair = [v] if isinstance(v, (int, float, str)) else list(v)
            if len(pair) not in (1, 2):
                raise Refused(f"schedule.{key}: SECONDS or [MIN, MAX], not {v!r}")
            lo, hi = [_value(x, float, f"schedule.{key}") for x in (pair * 2)[:2]]
            plain[key] = (lo, hi)
    for key, conv in (("duration_s", float), ("overlap", int), ("seed", int)):
        if plain.get(key) is not None:
            plain[key] = _value(plain[key], conv, f"schedule.{key}")
    for key in ("targets", "params"):
        _table(plain.get(key, {}), f"schedule.{key}")
    return Draw(**plain)


# -- what a target refuses -------------------------------------------------------------

def _default_backend() -> str:
    try:
        from harness.backends import default_backend
        return default_backend()
    except Exception:  # noqa: BLE001 - no docker module or engine: local
        return "local"


def _refusal(spec: ClusterSpec) -> Callable[[str, str | None], str | None] | None:
    """What the target of `spec` refuses before it exists: `refuses(fault,
    target)`, the reason or None (harness.backends.base.Cluster.refuses);
    None when the built-in broker in controller coordination takes everything."""
    from harness.backends.external import ExternalCluster, ExternalSpec
    from harness.backends.tansu import TansuSpec, refusal
    if isinstance(spec, ExternalSpec):
        return ExternalCluster(spec).refuses
    if isinstance(spec, TansuSpec):
        return refusal
    return mode_refusal(coordination_of(spec.broker_config))


def allowed_roles(refuses: Callable[[str, str | None], str | None], weights: dict[str, float],
                  replication_factor: int) -> dict[str, str]:
    """For each drawn fault some of whose catalogue roles the target refuses
    (tansu: every role read from Metadata), the first role it takes, pinned:
    a drawn schedule then holds only steps the target can run."""
    pins = {}
    for fault in weights:
        if fault in recipes.RECIPES:
            continue
        roles = injectors.roles_for(fault, brokers=3, zookeepers=0,
                                    replication_factor=replication_factor)
        allowed = [r for r in roles if refuses(fault, r) is None]
        if allowed and len(allowed) < len(roles) and allowed[0] is not None:
            pins[fault] = allowed[0]
    return pins


def refuse_unsupported(refuses: Callable[[str, str | None], str | None], faults: list[str],
                       replay: Schedule | None, pins: dict[str, str]) -> None:
    """Every fault of the run (aimed at its pinned or replayed roles) the
    target can do, or Refused with the target's first reason."""
    aimed = [(s.fault, s.target) for s in replay.steps] if replay is not None else []
    aimed += [(f, pins.get(f)) for f in faults]
    for fault, target in aimed:
        why = refuses(fault, target)
        if why:
            raise Refused(why)


class RunTimes:
    """How long a whole run of a spec takes: its schedule and quiet period,
    plus the overhead around them (cluster start, topics, final reads,
    evidence, the check), learned from the runs made so far: the largest
    seen, RUN_OVERHEAD_S until one is. Budgets (campaigns, shrinks) start
    only runs that fit."""

    def __init__(self) -> None:
        self.overheads: list[float] = []

    def expected_s(self, spec: RunSpec) -> float:
        overhead = max(self.overheads) if self.overheads else RUN_OVERHEAD_S
        return spec.schedule.duration_s + spec.quiet_s + overhead

    def record(self, spec: RunSpec, elapsed_s: float) -> None:
        self.overheads.append(max(0.0, elapsed_s - spec.schedule.duration_s - spec.quiet_s))


class Run:
    """A run against a started cluster; its steps are methods, called in
    order by `execute` or by the pytest fixtures. `close()` (or leaving the
    `with` block) undoes whatever was started, whatever failed."""

    def __init__(self, run_dir: Path, cluster: Any, *, seed: int = 0, mechanism: str = "auto",
                 log: Callable[[str], None] = lambda m: None, run_id: str | None = None,
                 security: ClientSecurity = PLAINTEXT):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id or new_run_id()
        self.cluster = cluster
        self.seed = seed
        self.mechanism = mechanism
        # Every Kafka client's settings (the AdminClient, the workers): the
        # run's, else what a secure built-in cluster made for its clients.
        self.security = (security if security != PLAINTEXT
                         else getattr(cluster, "client_security", None) or PLAINTEXT)
        self.log = log
        self.phase = "starting"
        self.recorder = HistoryRecorder(self.run_dir / "history.jsonl")
        self.stats = HistoryStats()
        self.recorder.subscribe(self.stats)
        self.observations = Observations(self.run_dir / OBSERVATIONS, self.recorder.now)
        self.sampler: MetadataSampler | None = None
        self.state_sampler: StateSampler | None = None
        self.resources: ResourceSampler | None = None
        self.workload: Workload | None = None
        self.nemeses: list[Nemesis] = []
        self.injected: list[Injector] = []
        self.final: FinalReads | None = None
        self.outcome: dict[str, Any] = {}
        self.finished = False
        self._closed = False
        self._zk: Any = None
        self._faults: FaultContext | None = None
        self._default_partition: tuple[str, int] | None = None
        self._topics: set[str] | None = None      # the run's topics, once created
        self._groups: set[str] = set()            # its consumer groups
        self.started_at = utc_now_iso()
        self._lock = threading.Lock()
        self.meta: dict[str, Any] = {
            "cluster": {"backend": cluster.backend, "system": cluster.system,
                        "brokers": cluster.spec.brokers,
                        "zookeepers": cluster.spec.zookeepers,
                        "broker_config": dict(cluster.spec.broker_config),
                        "proxied": bool(cluster.spec.proxied),
                        "security": cluster.spec.security},
            # What every client connected with: the password's source, never the password.
            "client": self.security.to_json(),
            "workload": {}, "faults": [], "checks": dict(CHECKS)}
        self._write_meta(outcome="running")

    # -- shared pieces ------------------------------------------------------------

    @property
    def zk(self) -> Any:
        """A kazoo client of the cluster's ZooKeeper (made on first use)."""
        with self._lock:
            if self._zk is None:
                from kazoo.client import KazooClient
                zk = KazooClient(hosts=self.cluster.zookeeper_connect, timeout=10)
                zk.start(timeout=30)
                self._zk = zk
            return self._zk

    @property
    def faults(self) -> FaultContext:
        """The run's one FaultContext: every schedule and injected fault of
        the run uses it (one recorder, one stream of role choices)."""
        with self._lock:
            if self._faults is None:
                self._faults = FaultContext.create(
                    self.cluster, lambda: self.zk, seed=self.seed, recorder=self.recorder,
                    log=self.log, partition=self._default_partition, mechanism=self.mechanism,
                    topics=self._topics, observe=self.observations.write)
                self._faults.resolver.groups = set(self._groups)
            return self._faults

    def active_faults(self) -> list[dict[str, Any]]:
        active = [f for n in self.nemeses for f in n.active()]
        return active + [i.describe() for i in self.injected if i.active]

    # -- steps -----------------------------------------------------------------------

    def create_topics(self, topics: Mapping[str, int], replication_factor: int,
                      assignment: Mapping[str, Mapping[int, list[int]]] | None = None) -> None:
        """Create the topics through the cluster's admin API (harness/topics.py;
        `assignment` places replicas by hand: topic -> partition -> broker
        ids, the first the preferred leader) and wait until every partition
        has a leader. The first topic's partition 0 is
        the default partition of role targets."""
        placed = dict(assignment or {})
        for topic, n in topics.items():
            plan = placed.get(topic)
            if plan is not None and sorted(plan) != list(range(n)):
                raise ValueError(f"assignment of {topic!r} places partitions {sorted(plan)}, "
                                 f"topics says {n}")
        create_topics(self.cluster.bootstrap_servers, topics, replication_factor, placed,
                      timeout_s=TOPIC_LEADERS_TIMEOUT_S, security=self.security)
        if self.cluster.has_zookeeper:
            for topic in topics:
                admin.wait_for_leaders(self.zk, topic, timeout=TOPIC_LEADERS_TIMEOUT_S)
        else:
            wait_for_leaders(self.cluster, topics, timeout_s=TOPIC_LEADERS_TIMEOUT_S)
        self._topics = (self._topics or set()) | set(topics)
        if self._default_partition is None:
            self._default_partition = (sorted(topics)[0], 0)
        if self._faults is not None:
            self._faults.resolver.default_partition = self._default_partition
            self._faults.resolver.topics = set(self._topics)
        if self.sampler is None:
            self.sampler = MetadataSampler(self._state(), self.observations).start()
            self.resources = ResourceSampler(self.cluster, self.observations).start()
            if self.cluster.has_state_window:
                self.state_sampler = StateSampler(self.cluster, self.observations,
                                                  lambda: set(self._topics or ())).start()
        rf = len(next(iter(next(iter(placed.values())).values()))) if placed else replication_factor
        self.meta["cluster"]["replication_factor"] = rf
        self._write_meta(outcome="running")

    def start_workload(self, spec: WorkloadSpec) -> Workload:
        """Start the producers and consumers, recorded into the history."""
        if self.workload is not None:
            raise RuntimeError("a run has one workload")
        launch = launcher_for(self.cluster, self.run_dir / "workers")
        tag = self.run_id.rsplit("-", 1)[-1]
        # Worker names carry the run's id: a cluster shared by several runs
        # (module scope) must not meet a worker name twice (docker: container names).
        self.workload = Workload(self.recorder, lambda: self.cluster.bootstrap_servers, spec,
                                 launcher=lambda name, argv: launch(f"{tag}-{name}", argv),
                                 log=self.log, security=self.security)
        self.meta["workload"] = spec.to_json()
        if self.workload.pipeline_json():
            self.meta["workload"]["pipeline"] = self.workload.pipeline_json()
        self._write_meta(outcome="running")
        if spec.sub_via == "subscribe":
            self._groups.add(self.workload.group)
            if self._faults is not None:
                self._faults.resolver.groups = set(self._groups)
        self.phase = "workload"
        return self.workload.start()

    def start_nemesis(self, schedule: Schedule,
                      partition: tuple[str, int] | None = None) -> Nemesis:
        """Play a schedule in the background; `partition` is the default
        partition of its partition roles (leader, follower ...)."""
        for step in schedule.steps:
            self._refuse_unless_supported(step.fault, step.target)
        for fault in schedule.settings.get("faults", {}):
            self._refuse_unless_supported(fault, None)
        if self._faults is None:
            self.seed = schedule.seed  # role choices follow the first schedule's seed
        n = Nemesis(self.faults, schedule, partition=partition).start()
        self.nemeses.append(n)
        self.meta["schedule"] = schedule.to_json()
        self._note_faults({s.fault for s in schedule.steps} | set(schedule.settings.get("faults", {})))
        return n

    def inject(self, fault: str, target: str | None = None, *,
               partition: tuple[str, int] | None = None, **params: Any) -> Injector:
        """Start one fault of the catalogue now, against `target` (a role or
        a node name); returns the started injector (its stop() heals it
        early). Raises what the injector raises: a scripted scenario wants
        to know."""
        self._refuse_unless_supported(fault, target)
        inj = injectors.make(fault, self.faults, qualify(target, partition), **params)
        inj.start()
        self.injected.append(inj)
        self._note_faults({fault})
        return inj

    def _state(self, probe: bool = False) -> Callable[[], dict[str, Any]]:
        """How the cluster's state is read: ZooKeeper where the cluster has
        one the harness reads, else the brokers' Metadata about the run's
        topics (docs/targets.md, "One run, any target")."""
        if self.cluster.has_zookeeper:
            return lambda: zookeeper_state(self.zk)
        return lambda: metadata_state(self.cluster, self._topics or set(), probe=probe)

    def _refuse_unless_supported(self, fault: str, target: str | None) -> None:
        """A fault the cluster cannot run is refused before anything starts
        (FaultError naming the target system), never skipped."""
        why = self.cluster.refuses(fault, target)
        if why:
            raise FaultError(why)

    def resolve(self, target: str, partition: tuple[str, int] | None = None) -> list[str]:
        """The node names `target` denotes now (without drawing from the
        run's stream of role choices)."""
        import random
        default = partition or self._default_partition
        return Resolver(self.cluster, lambda: self.zk, random.Random(0), default).resolve(target)

    def heal(self, final: bool = True) -> list[str]:
        """Stop the schedules and heal the injected faults (latest first);
        with `final`, then heal everything and wait for every broker (the
        run's final heal, recorded as such)."""
        for n in self.nemeses:
            n.stop()
        for inj in reversed(self.injected):
            try:
                inj.stop()
            except Exception:  # noqa: BLE001 - the final heal is the backstop
                pass
        return final_heal(self.faults) if final else []

    def finish(self, *, quiet_s: float = 5.0, final_timeout_s: float = 60.0,
               settle_s: float = 5.0) -> "Run":
        """The end of a run in the one right order: every schedule plays to
        its end, the final heal at the schedule's duration, a quiet period,
        the clients stop, the final reads, the history closes, run.json and
        the evidence (node logs, the ZooKeeper tree) are written."""
        for n in self.nemeses:
            # A step that restarts a broker can overrun the next step's start
            # on a loaded machine; its later steps must still run rather than
            # be cancelled by the heal.
            remaining = n.t0 + n.schedule.duration_s - time.monotonic() if n.t0 else 0
            n.join(timeout=max(0.0, remaining) + SCHEDULE_OVERRUN_S)
        heal_at = max((n.t0 + n.schedule.duration_s for n in self.nemeses if n.t0), default=0.0)
        time.sleep(max(0.0, heal_at - time.monotonic()))
        self.phase = "final-heal"
        if self.workload is not None:
            self.workload.stop_crashing()
        healed_at = self.recorder.now()
        self.outcome["final_heal"] = self.heal(final=True)
        self.phase = "recovery"
        mode = coordination_of(self.cluster.spec.broker_config)
        recovery = await_recovery(self._state(probe=True), self.observations,
                                  [n.broker_id for n in self.cluster.brokers()],
                                  healed_at=healed_at, bound_s=RECOVERY_BOUND_S,
                                  controller=mode.has_controller)
        self.outcome["recovery"] = {k: recovery[k] for k in ("recovered", "detail")}
        self.phase = "quiet"
        time.sleep(quiet_s)
        if self.workload is not None:
            self.phase = "stopping"
            self.workload.stop()
            self.phase = "final-reads"
            ends = {tp: off + 1 for tp, off in self.stats.acked.items()}
            self.final = self.workload.final_reads(ends, timeout=final_timeout_s, settle_s=settle_s)
            self.outcome["final_reads"] = {"complete": self.final.complete,
                                           "partitions": self.final.partitions,
                                           "missing": self.final.missing}
            self.phase = "observing"
            topics = set(self.workload.spec.topics)
            if self.cluster.has_zookeeper:
                self.outcome["brokers_agree"] = observe_brokers(self.cluster, self.zk,
                                                                self.observations, topics)
            self._stop_sampler()
            try:
                self.outcome["replicas_read"] = observe_replicas(self.cluster, self.observations,
                                                                 topics)
            except ClusterError as e:   # a target whose replica files the harness cannot read
                self.outcome["replicas_read"] = f"not read: {e}"
        self.recorder.close(reason="run ended with the op outstanding")
        self.finished = True
        self._conclude("complete" if self.final and self.final.complete else "incomplete")
        return self

    def check(self, checker: str = "reference") -> Any:
        """The checker's verdict on this run (reports.analyze: also writes
        summary.json, report.html and junit.xml into the run directory)."""
        from reports import analyze
        (verdict,) = analyze([str(self.run_dir)], checker=checker)
        return verdict

    def verdict(self, checker: str | None = None) -> dict[str, Any]:
        """summary.json of the checker, as a dict (the reference checker by
        default: plain Python, fast on a suite's small history; env
        CHAOSLOG_CHECKER overrides)."""
        import os
        v = self.check(checker or os.environ.get("CHAOSLOG_CHECKER", "reference"))
        if v.summary is None:
            raise AssertionError(f"the checker could not judge {self.run_dir}: {v.verdict}: {v.error}")
        return v.summary

    def close(self, error: str | None = None) -> None:
        """Undo what the run started (workers, faults), close the history;
        a run that did not finish still leaves run.json and its evidence."""
        if self._closed:
            return
        self._closed = True
        if error:
            self.outcome["error"] = error
        try:
            if self.workload is not None:
                self.workload.kill_all()
            if not self.finished:
                self.heal(final=True)
        except Exception as e:  # noqa: BLE001 - cleanup goes on; the error is kept
            self.outcome["cleanup_error"] = f"{type(e).__name__}: {e}"
            self.log(f"cleaning up: {e}")
        finally:
            self._stop_sampler()
            self.observations.close()
            self.recorder.close(reason="run ended with the op outstanding")
            if not self.finished:
                self._conclude("failed" if error else "incomplete")
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
            self.phase = "done"

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(error=None if exc is None else f"{exc_type.__name__}: {exc}")

    # -- bookkeeping ---------------------------------------------------------------

    def _stop_sampler(self) -> None:
        if self.state_sampler is not None:
            self.state_sampler.stop()
            self.outcome["state_samples"] = {"written": self.state_sampler.samples,
                                             "failed": self.state_sampler.failures}
        if self.resources is not None:
            self.resources.stop()
            self.outcome["resource_samples"] = self.resources.samples
        if self.sampler is not None:
            self.sampler.stop()
            self.outcome["metadata_samples"] = {"written": self.sampler.samples,
                                                "failed": self.sampler.failures}

    def _note_faults(self, names: set[str]) -> None:
        self.meta["faults"] = sorted(set(self.meta["faults"]) | names)
        self._write_meta(outcome="running")

    def _write_meta(self, **extra: Any) -> None:
        write_run_json(self.run_dir, run=self.run_id, seed=self.seed, started_at=self.started_at,
                       **self.meta, **extra)

    def _conclude(self, status: str) -> None:
        """run.json's outcome and result, then the evidence."""
        self.phase = "evidence"
        self.outcome["nemesis"] = [{"done": n.done, "skipped": n.skipped, "errors": n.errors}
                                   for n in self.nemeses]
        self.outcome["injected"] = [i.describe() for i in self.injected]
        if self.workload is not None:
            self.meta["workload"]["clients"] = dict(self.workload.clients)
            if self.workload.replaced:
                self.outcome["replaced_clients"] = dict(self.workload.replaced)
        self.outcome["ops"] = {f"{f}:{t}": n for (f, t), n in sorted(self.stats.counts.items())}
        self.outcome["errors"] = dict(self.stats.errors)
        try:
            problems = collect_logs(self.cluster, self.run_dir)
            if problems:
                self.outcome["log_problems"] = problems
        except Exception as e:  # noqa: BLE001 - evidence, not a verdict
            self.outcome["log_problems"] = [str(e)]
        try:
            if self.cluster.has_zookeeper:
                dump_zookeeper(self.cluster.zookeeper_connect, self.run_dir)
        except Exception as e:  # noqa: BLE001
            self.outcome["zookeeper_dump"] = f"failed: {e}"
        self.outcome["status"] = status
        self._write_meta(outcome=status, result=self.outcome)


# -- the whole run, from a spec ---------------------------------------------------------

@dataclass
class RunResult:
    run_dir: Path
    exit_code: int                      # reports/exit_codes.py
    verdict: Any = None                 # reports' Verdict, when a checker ran
    outcome: dict[str, Any] = field(default_factory=dict)

    def fatal(self) -> set[str] | None:
        """The fatal anomaly types its verdict found; None when the run
        could not be judged (harness error, no checker)."""
        summary = getattr(self.verdict, "summary", None)
        return set(summary.get("fatal") or []) if summary else None


def execute(spec: RunSpec, *, log: Callable[[str], None] = log_line,
            on_start: Callable[[Run], None] | None = None) -> RunResult:
    """One whole run from a spec: validated (a spec built by hand too),
    cluster up, topics, workload, nemesis, finish, cluster down, checker.
    Everything started is undone, whatever fails. `on_start` sees the Run as
    soon as it exists (a progress line)."""
    from harness.backends import make_cluster

    run_id = new_run_id()
    run_dir = Path(spec.out) if spec.out else Path("runs") / run_id
    try:
        spec = spec.validate()
    except Refused as e:
        log(f"error: {e}")
        return RunResult(run_dir, EXIT_REFUSED, outcome={"error": str(e)})
    if (run_dir / "history.jsonl").exists():
        log(f"error: {run_dir} already holds a history")
        return RunResult(run_dir, EXIT_REFUSED)
    log(f"run {run_id} seed {spec.seed} -> {run_dir}")
    try:
        # Named after the run: clusters of concurrent runs never share a name.
        cluster = make_cluster(replace(spec.cluster, name=f"run-{run_id[-6:]}"), spec.backend)
    except Exception as e:  # noqa: BLE001 - ClusterError says what to do
        log(f"error: {e}")
        return RunResult(run_dir, EXIT_REFUSED)
    if spec.client != PLAINTEXT:   # the harness's own requests too (harness/kafka_wire.py)
        cluster.client_security = spec.client
    code = EXIT_ERROR
    run: Run | None = None
    try:
        log(f"reaching the external cluster at {getattr(spec.cluster, 'bootstrap', '')}"
            if spec.backend == "external" else
            f"starting {spec.cluster.brokers} {cluster.system} broker(s) on the "
            f"{cluster.backend} backend")
        try:
            cluster.start()
        except ClusterError as e:   # says what is wrong and what to do: no traceback
            log(f"error: {e}")
            return RunResult(run_dir, EXIT_REFUSED, outcome={"error": str(e)})
        with Run(run_dir, cluster, seed=spec.seed, mechanism=spec.mechanism, log=log,
                 run_id=run_id, security=spec.client) as run:
            run.meta["spec"] = spec.to_json()
            if on_start:
                on_start(run)
            run.create_topics(spec.workload.topics, spec.replication_factor)
            run.start_workload(spec.workload)
            run.start_nemesis(spec.schedule)
            run.finish(quiet_s=spec.quiet_s, final_timeout_s=spec.final_timeout_s,
                       settle_s=spec.settle_s)
        code = EXIT_OK if run.final and run.final.complete else EXIT_UNKNOWN
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        code = EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - recorded in run.json, then cleaned up
        import traceback
        log(f"run failed: {e}")
        traceback.print_exc(file=sys.stderr)
    finally:
        try:
            cluster.destroy()
        except Exception as e:  # noqa: BLE001
            log(f"destroying the cluster: {e}")
    outcome = run.outcome if run is not None else {}
    if code not in (EXIT_OK, EXIT_UNKNOWN) or not spec.checker:
        return RunResult(run_dir, code, outcome=outcome)
    log(f"checking the history ({spec.checker} checker)")
    verdict = run.check(spec.checker)
    return RunResult(run_dir, of_verdict(verdict.verdict), verdict, outcome)
