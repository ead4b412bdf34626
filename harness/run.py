"""`chaoslog run`, `chaoslog fault`, `chaoslog heal`.

run: one Jepsen-style test from the command line. Settings are checked before
anything starts (unknown faults, impossible replication factors, faults the
backend cannot do are refused in one line); then: cluster up, topics, the
workload and the nemesis, the final heal, a quiet period, final reads, logs and
a ZooKeeper dump into the run directory, the checker, the verdict.

fault/heal: one fault by hand against a cluster from `chaoslog cluster up`.
Active faults are written to a state file so that `chaoslog heal` in another
process knows what it is undoing; heal itself is stateless (heal_all), so it
also repairs faults whose process died.

Exit codes of run: 0 valid, 1 anomalies found, 2 settings refused,
3 verdict unknown (final reads incomplete or no checker), 4 the harness failed.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

EXIT_VALID, EXIT_INVALID, EXIT_REFUSED, EXIT_UNKNOWN, EXIT_HARNESS = 0, 1, 2, 3, 4


class Refused(ValueError):
    """Settings that cannot work; the message is the one-line reason."""


# -- argument parsing ---------------------------------------------------------------

def _kv_list(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise Refused(f"{what} {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _param_value(v: str) -> Any:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(v.lower(), v)


def _range(text: str, what: str) -> tuple[float, float]:
    try:
        parts = [float(x) for x in text.split(",")]
    except ValueError:
        raise Refused(f"{what} {text!r}: expected SECONDS or MIN,MAX") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or parts[0] > parts[1] or parts[0] < 0:
        raise Refused(f"{what} {text!r}: expected SECONDS or MIN,MAX with MIN <= MAX")
    return parts[0], parts[1]


def topics_of(text: str, partitions: int) -> dict[str, int]:
    """--topics: a count ("3": t0, t1, t2) or names ("orders,audit")."""
    text = text.strip()
    if text.isdigit():
        n = int(text)
        if n < 1:
            raise Refused("--topics: at least one topic")
        names = [f"t{i}" for i in range(n)] if n > 1 else ["t"]
    else:
        names = [t.strip() for t in text.split(",") if t.strip()]
    for t in names:
        if not all(c.isalnum() or c in "._-" for c in t) or len(t) > 200:
            raise Refused(f"--topics: {t!r} is not a valid topic name")
    if len(set(names)) != len(names):
        raise Refused("--topics: a topic is named twice")
    return {t: partitions for t in names}


def add_run_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run one chaos test: cluster, workload, faults, final reads, verdict",
                       description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("cluster")
    g.add_argument("--backend", choices=("docker", "local"), help="default: docker when an engine answers")
    g.add_argument("--brokers", type=int, default=3)
    g.add_argument("--zookeepers", type=int, default=1, choices=(1, 3))
    g.add_argument("--topics", default="1", help="a count or comma-separated names (default 1: topic t)")
    g.add_argument("--partitions", type=int, default=3)
    g.add_argument("--replication-factor", type=int, default=3)
    g.add_argument("--broker-config", nargs="*", metavar="KEY=VALUE", default=[])
    g = p.add_argument_group("workload")
    g.add_argument("--duration", type=float, default=60.0, help="seconds of workload and faults")
    g.add_argument("--rate", type=float, default=100.0, help="sends/s over all producers (0 = no limit)")
    g.add_argument("--client", choices=("confluent", "kafka-python"), default="confluent")
    g.add_argument("--acks", default="all", choices=("0", "1", "all", "-1"))
    g.add_argument("--idempotent", action="store_true")
    g.add_argument("--retries", type=int, default=0)
    g.add_argument("--max-in-flight", type=int, default=1)
    g.add_argument("--request-timeout-ms", type=int, default=5000)
    g.add_argument("--delivery-timeout-ms", type=int, default=15000)
    g.add_argument("--producers", type=int, default=2, help="producer processes")
    g.add_argument("--slots", type=int, default=4, help="logical client processes per producer")
    g.add_argument("--consumers", type=int, default=1, help="consumer processes")
    g = p.add_argument_group("faults")
    g.add_argument("--faults", default="", help="NAME[:WEIGHT][,NAME...] from the catalogue (--list-faults)")
    g.add_argument("--target", nargs="*", metavar="FAULT=ROLE", default=[], help="pin a fault's target role")
    g.add_argument("--param", nargs="*", metavar="FAULT.KEY=VALUE", default=[], help="fix a fault parameter")
    g.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    g.add_argument("--interval", default="5,10", help="seconds between faults: S or MIN,MAX")
    g.add_argument("--fault-duration", default="5,15", help="seconds a fault lasts: S or MIN,MAX")
    g.add_argument("--quiet", type=float, default=10.0, help="seconds between the final heal and final reads")
    g.add_argument("--final-timeout", type=float, default=60.0)
    g.add_argument("--mechanism", choices=("auto", "iptables", "proxy"), default="auto",
                   help="how partitions are made")
    g.add_argument("--print-schedule", action="store_true", help="print the schedule and exit")
    g.add_argument("--json", action="store_true", help="with --print-schedule: as JSON")
    g.add_argument("--list-faults", action="store_true", help="print the fault catalogue and exit")
    p.add_argument("--out", help="run directory (default runs/RUN_ID)")
    p.add_argument("--no-analysis", action="store_true")
    p.set_defaults(func=cmd_run)


def add_fault_parser(sub: Any) -> None:
    p = sub.add_parser("fault", help="apply one fault to a cluster from `chaoslog cluster up`")
    p.add_argument("fault", help="fault name (chaoslog run --list-faults)")
    p.add_argument("--target", help="role or node: leader[:T/P], controller, follower, random, broker-2, ...")
    p.add_argument("--name", default="chaoslog", help="cluster name")
    p.add_argument("--param", nargs="*", metavar="KEY=VALUE", default=[])
    p.add_argument("--partition", default=None, help="default TOPIC/PARTITION for partition roles")
    p.add_argument("--mechanism", choices=("auto", "iptables", "proxy"), default="auto")
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=cmd_fault)


def add_heal_parser(sub: Any) -> None:
    p = sub.add_parser("heal", help="heal every fault on a cluster from `chaoslog cluster up`")
    p.add_argument("--name", default="chaoslog", help="cluster name")
    p.set_defaults(func=cmd_heal)


def add_parser(sub: Any) -> None:
    """Register run, fault and heal (the console script calls this)."""
    add_run_parser(sub)
    add_fault_parser(sub)
    add_heal_parser(sub)


# -- settings --------------------------------------------------------------------------

def settings_from_args(a: argparse.Namespace) -> dict[str, Any]:
    """Everything `run` needs, validated; raises Refused with the reason."""
    from cluster.config import BrokerConfig, ConfigError
    from faults import injectors
    from faults.injectors.base import FaultError
    from faults.nemesis import parse_weights
    from faults.targets import Target, TargetError
    from harness.workload.clients import ProducerSettings

    if a.brokers < 1:
        raise Refused(f"--brokers {a.brokers}: at least 1")
    if a.partitions < 1:
        raise Refused(f"--partitions {a.partitions}: at least 1")
    if not 1 <= a.replication_factor <= a.brokers:
        raise Refused(f"--replication-factor {a.replication_factor} with {a.brokers} broker(s): "
                      f"it must be between 1 and the broker count")
    if a.duration <= 0:
        raise Refused("--duration must be positive")
    if a.producers < 1 or a.slots < 1 or a.consumers < 0:
        raise Refused("--producers and --slots must be at least 1, --consumers at least 0")
    broker_config = _kv_list(a.broker_config, "--broker-config")
    try:
        BrokerConfig.from_dict(dict(broker_config))
    except ConfigError as e:
        raise Refused(f"--broker-config: {e}") from None
    min_isr = int(broker_config.get("min.insync.replicas", 1))
    if min_isr > a.replication_factor:
        raise Refused(f"min.insync.replicas={min_isr} is above --replication-factor "
                      f"{a.replication_factor}: no acks=all write could ever succeed")
    try:
        weights = parse_weights([f for f in a.faults.split(",") if f.strip()])
    except FaultError as e:
        raise Refused(str(e)) from None
    backend = a.backend or _default_backend()
    # Links through the proxy when a fault needs them: link toxics on any
    # backend; partitions on the local backend (docker cuts them with iptables).
    needs_link = any("proxy" in injectors.kind(f).needs for f in weights)
    needs_net = any("net" in injectors.kind(f).needs for f in weights)
    proxied = needs_link or a.mechanism == "proxy" or (
        needs_net and backend == "local" and a.mechanism != "iptables")
    for f in weights:
        why = injectors.unsupported(f, backend=backend, proxied=proxied, zookeepers=a.zookeepers)
        if why:
            raise Refused(f"{why} (backend {backend})")
    if a.mechanism == "iptables" and backend != "docker" and any(
            injectors.kind(f).family == "partition" for f in weights):
        raise Refused("--mechanism iptables needs the docker backend")
    targets = _kv_list(a.target, "--target")
    nodes = [f"zk-{i}" for i in range(1, a.zookeepers + 1)] + [f"broker-{i}" for i in range(1, a.brokers + 1)]
    for f, role in targets.items():
        if f not in weights:
            raise Refused(f"--target {f}={role}: {f} is not among --faults")
        try:
            Target.parse(role).check_against(nodes)
        except TargetError as e:
            raise Refused(f"--target {f}={role}: {e}") from None
    params: dict[str, dict[str, Any]] = {}
    for key, v in _kv_list(a.param, "--param").items():
        f, _, k = key.partition(".")
        if f not in weights or not k:
            raise Refused(f"--param {key}={v}: expected FAULT.KEY=VALUE for a fault among --faults")
        params.setdefault(f, {})[k] = _param_value(v)
    try:
        producer = ProducerSettings(acks=a.acks, retries=a.retries, idempotent=a.idempotent,
                                    max_in_flight=a.max_in_flight,
                                    request_timeout_ms=a.request_timeout_ms,
                                    delivery_timeout_ms=a.delivery_timeout_ms)
    except ValueError as e:
        raise Refused(str(e)) from None
    return {
        "backend": backend, "proxied": proxied, "broker_config": broker_config,
        "weights": weights, "targets": targets, "params": params, "producer": producer,
        "topics": topics_of(a.topics, a.partitions),
        "interval": _range(a.interval, "--interval"),
        "fault_duration": _range(a.fault_duration, "--fault-duration"),
    }


def _default_backend() -> str:
    try:
        from harness.backends import default_backend
        return default_backend()
    except Exception:  # noqa: BLE001 - no docker module or engine: local
        return "local"


def schedule_from(a: argparse.Namespace, s: dict[str, Any], seed: int):
    from faults.nemesis import make_schedule
    return make_schedule(seed, s["weights"], duration_s=a.duration, interval_s=s["interval"],
                         fault_duration_s=s["fault_duration"], quiet_s=a.quiet, brokers=a.brokers,
                         zookeepers=a.zookeepers, replication_factor=a.replication_factor,
                         targets=s["targets"], params=s["params"])


# -- topics ---------------------------------------------------------------------------------

def create_topics(zk: Any, topics: dict[str, int], rf: int, brokers: int, timeout: float = 60.0) -> None:
    """Create the topics (cluster.admin when it is there) and wait until every
    partition has a leader."""
    from cluster import zkpaths
    try:
        from cluster.admin import create_topic
    except ImportError:
        create_topic = None
    for topic, n in topics.items():
        if create_topic is not None:
            create_topic(zk, topic, n, rf)
        else:
            # The seed's admin path: write the assignment, the controller does the rest.
            ids = list(range(1, brokers + 1))
            plan = {p: tuple(ids[(p + i) % len(ids)] for i in range(rf)) for p in range(n)}
            zk.create(zkpaths.topic_path(topic), zkpaths.TopicAssignment(plan).encode(), makepath=True)
    deadline = time.monotonic() + timeout
    pending = [(t, p) for t, n in topics.items() for p in range(n)]
    while pending:
        still = []
        for t, p in pending:
            data = zk.exists(zkpaths.leader_and_isr_path(t, p)) and zk.get(zkpaths.leader_and_isr_path(t, p))[0]
            if not data or zkpaths.LeaderAndIsr.decode(data).leader == zkpaths.NO_LEADER:
                still.append((t, p))
        pending = still
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"no leader after {timeout:.0f}s for {', '.join(f'{t}/{p}' for t, p in pending[:5])}")
        if pending:
            time.sleep(0.2)


# -- progress -------------------------------------------------------------------------------

class Progress:
    """One updating line on a terminal, a line every 5 s otherwise."""

    def __init__(self, stats: Any, nemesis_active: Any, stream=sys.stderr):
        self.stats = stats
        self.active = nemesis_active
        self.stream = stream
        self.tty = stream.isatty()
        self.phase = "starting"
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True, name="progress")

    def start(self) -> "Progress":
        self._thread.start()
        return self

    def line(self, rate: float) -> str:
        st = self.stats
        faults = ",".join(f"{a['fault']}({','.join(a['targets'])})" for a in self.active()) or "-"
        sends = st.counts.get(("send", "ok"), 0)
        return (f"[{time.monotonic() - self._t0:6.1f}s] {self.phase:<11} {rate:7.1f} ops/s  "
                f"acked {sends}  errors {st.failed()}  faults {faults}")

    def _run(self) -> None:
        period = 1.0 if self.tty else 5.0
        last_n, last_t = 0, time.monotonic()
        while not self._stop.wait(period):
            n, t = self.stats.completed(), time.monotonic()
            rate = (n - last_n) / max(1e-6, t - last_t)
            last_n, last_t = n, t
            if self.tty:
                self.stream.write("\r" + self.line(rate)[:200].ljust(120))
            else:
                self.stream.write(self.line(rate) + "\n")
            self.stream.flush()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def log_line(msg: str) -> None:
    print(f"chaoslog: {msg}", file=sys.stderr, flush=True)


# -- run -------------------------------------------------------------------------------------

def cmd_run(a: argparse.Namespace) -> int:
    if a.list_faults:
        from faults.injectors import CATALOGUE
        for k in CATALOGUE.values():
            roles = ",".join(r or "-" for r in k.roles)
            print(f"{k.name:<18} {k.family:<10} roles {roles:<32} {k.about}")
        return 0
    try:
        s = settings_from_args(a)
    except Refused as e:
        print(f"chaoslog run: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**31)
    schedule = schedule_from(a, s, seed)
    if a.print_schedule:
        print(schedule.dumps() if a.json else schedule.to_text())
        return 0
    return Runner(a, s, seed, schedule).run()


class Runner:
    """One run, step by step; every step after the cluster starts is undone
    in `finally` blocks, whatever fails."""

    def __init__(self, a: argparse.Namespace, s: dict[str, Any], seed: int, schedule: Any):
        from harness.history import new_run_id
        self.a, self.s, self.seed, self.schedule = a, s, seed, schedule
        self.run_id = new_run_id()
        self.run_dir = Path(a.out) if a.out else Path("runs") / self.run_id
        self.outcome: dict[str, Any] = {}

    def run(self) -> int:
        from harness.backends import make_cluster
        from harness.backends.base import ClusterSpec
        from harness.history import write_run_json

        a, s = self.a, self.s
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if (self.run_dir / "history.jsonl").exists():
            print(f"chaoslog run: error: {self.run_dir} already holds a history", file=sys.stderr)
            return EXIT_REFUSED
        spec = ClusterSpec(name=f"run-{self.run_id[-6:]}", brokers=a.brokers, zookeepers=a.zookeepers,
                           broker_config=dict(s["broker_config"]), proxied=s["proxied"])
        cluster_meta = {"backend": s["backend"], "brokers": a.brokers, "zookeepers": a.zookeepers,
                        "replication_factor": a.replication_factor, "broker_config": s["broker_config"],
                        "proxied": s["proxied"]}
        from harness.workload import WorkloadSpec
        wspec = WorkloadSpec(s["topics"], client=a.client, producers=a.producers, slots=a.slots,
                             consumers=a.consumers, rate=a.rate, producer=s["producer"])
        write_run_json(self.run_dir, run=self.run_id, seed=self.seed, cluster=cluster_meta,
                       workload=wspec.to_json(), faults=sorted(s["weights"]),
                       schedule=self.schedule.to_json(), outcome="running")
        log_line(f"run {self.run_id} seed {self.seed} -> {self.run_dir}")
        try:
            cluster = make_cluster(spec, s["backend"])
        except Exception as e:  # noqa: BLE001 - ClusterError says what to do
            print(f"chaoslog run: error: {e}", file=sys.stderr)
            return EXIT_REFUSED
        code = EXIT_HARNESS
        try:
            log_line(f"starting {a.brokers} broker(s) on the {s['backend']} backend")
            cluster.start()
            self.execute(cluster, wspec)
            code = self.analyze()
        except KeyboardInterrupt:
            log_line("interrupted; cleaning up")
            self.outcome["error"] = "interrupted"
            code = 130
        except Exception as e:  # noqa: BLE001 - recorded, then cleaned up
            self.outcome["error"] = f"{type(e).__name__}: {e}"
            log_line(f"run failed: {e}")
            traceback.print_exc(file=sys.stderr)
        finally:
            self.collect(cluster)
            try:
                cluster.destroy()
            except Exception as e:  # noqa: BLE001
                log_line(f"destroying the cluster: {e}")
        return code

    def execute(self, cluster: Any, wspec: Any) -> None:
        from kazoo.client import KazooClient

        from faults.injectors.base import FaultContext
        from faults.nemesis import Nemesis
        from faults.targets import Resolver
        from harness.history import HistoryRecorder, HistoryStats
        from harness.workload import Workload
        from harness.workload.runner import launcher_for

        a, s = self.a, self.s
        zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
        zk.start(timeout=30)
        self.zk = zk
        try:
            create_topics(zk, s["topics"], a.replication_factor, a.brokers)
            first = sorted(s["topics"])[0]
            recorder = HistoryRecorder(self.run_dir / "history.jsonl")
            stats = HistoryStats()
            recorder.subscribe(stats)
            self.recorder, self.stats = recorder, stats
            # A second stream from the seed for role choices, apart from the
            # schedule's own draws.
            rng = random.Random(self.seed * 2 + 1)
            ctx = FaultContext(cluster, Resolver(cluster, zk, rng, (first, 0)), rng, recorder=recorder,
                               log=log_line, mechanism=a.mechanism)
            nemesis = Nemesis(ctx, self.schedule)
            workload = Workload(recorder, lambda: cluster.bootstrap_servers, wspec,
                                launcher=launcher_for(cluster, self.run_dir / "workers"), log=log_line)
            progress = Progress(stats, nemesis.active).start()
            try:
                progress.phase = "workload"
                workload.start()
                nemesis.start()
                time.sleep(a.duration)
                progress.phase = "final-heal"
                healed = nemesis.final_heal()
                self.outcome["final_heal"] = healed
                progress.phase = "quiet"
                time.sleep(a.quiet)
                progress.phase = "stopping"
                workload.stop()
                progress.phase = "final-reads"
                ends = {tp: off + 1 for tp, off in stats.acked.items()}
                fr = workload.final_reads(ends, timeout=a.final_timeout)
                self.outcome["final_reads"] = {"complete": fr.complete, "partitions": fr.partitions,
                                               "missing": fr.missing}
            finally:
                progress.stop()
                nemesis.stop()
                workload.kill_all()
                recorder.close(reason="run ended with the op outstanding")
            self.outcome["nemesis"] = {"done": nemesis.done, "skipped": nemesis.skipped,
                                       "errors": nemesis.errors}
            self.outcome["ops"] = {f"{f}:{t}": n for (f, t), n in sorted(stats.counts.items())}
            self.outcome["errors"] = stats.errors
        finally:
            try:
                from faults.injectors import heal_all
                heal_all(cluster)
            except Exception:  # noqa: BLE001
                pass

    def collect(self, cluster: Any) -> None:
        from harness.history import collect_logs, dump_zookeeper, update_run_json
        try:
            problems = collect_logs(cluster, self.run_dir)
            if problems:
                self.outcome["log_problems"] = problems
        except Exception as e:  # noqa: BLE001
            self.outcome["log_problems"] = [str(e)]
        try:
            dump_zookeeper(cluster.zookeeper_connect, self.run_dir)
        except Exception as e:  # noqa: BLE001
            self.outcome["zookeeper_dump"] = f"failed: {e}"
        zk = getattr(self, "zk", None)
        if zk is not None:
            try:
                zk.stop()
                zk.close()
            except Exception:  # noqa: BLE001
                pass
        fr = self.outcome.get("final_reads")
        status = "failed" if "error" in self.outcome else (
            "complete" if fr and fr["complete"] else "incomplete")
        update_run_json(self.run_dir, outcome=status, result=self.outcome)
        self.outcome["status"] = status

    def analyze(self) -> int:
        fr = self.outcome.get("final_reads") or {}
        if self.a.no_analysis:
            log_line(f"history in {self.run_dir}/history.jsonl (analysis skipped)")
            return EXIT_VALID if fr.get("complete") else EXIT_UNKNOWN
        return analyze_and_print(self.run_dir)


def analyze_and_print(run_dir: Path) -> int:
    """Run the checker on the run directory and print its summary and report path."""
    from reports import analyze
    from reports.cli import print_verdict
    (verdict,) = analyze([run_dir])
    print_verdict(verdict)
    return {"valid": EXIT_VALID, "invalid": EXIT_INVALID, "unknown": EXIT_UNKNOWN}.get(
        verdict.verdict, EXIT_HARNESS)


# -- fault / heal by hand ---------------------------------------------------------------------

def fault_state_path(name: str) -> Path:
    home = Path(os.environ.get("CHAOSLOG_HOME", Path.home() / ".chaoslog"))
    return home / "faults" / f"{name}.json"


def _load_state(name: str) -> list[dict[str, Any]]:
    p = fault_state_path(name)
    try:
        return json.loads(p.read_text())
    except (FileNotFoundError, ValueError):
        return []


def _save_state(name: str, active: list[dict[str, Any]]) -> None:
    p = fault_state_path(name)
    p.parent.mkdir(parents=True, exist_ok=True)
    if not active:
        p.unlink(missing_ok=True)
        return
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(active, indent=1))
    tmp.replace(p)


def _context(cluster: Any, zk: Any, seed: int | None, partition: str | None, mechanism: str):
    from faults.injectors.base import FaultContext
    from faults.targets import Resolver
    rng = random.Random(seed)
    default = None
    if partition:
        t, _, p = partition.rpartition("/")
        default = (t, int(p))
    else:
        from cluster import zkpaths
        try:
            topics = sorted(zk.get_children(zkpaths.TOPICS))
            default = (topics[0], 0) if topics else None
        except Exception:  # noqa: BLE001
            default = None
    return FaultContext(cluster, Resolver(cluster, zk, rng, default), rng, log=log_line,
                        mechanism=mechanism)


def cmd_fault(a: argparse.Namespace) -> int:
    from kazoo.client import KazooClient

    from faults import injectors
    from faults.injectors.base import FaultError
    from faults.targets import Target, TargetError
    from harness.backends import attach

    try:
        kind = injectors.kind(a.fault)
        params = {k: _param_value(v) for k, v in _kv_list(a.param, "--param").items()}
        if a.target:
            Target.parse(a.target)
        if a.partition and not a.partition.rpartition("/")[2].isdigit():
            raise Refused(f"--partition {a.partition!r}: expected TOPIC/PARTITION")
    except (FaultError, TargetError, Refused) as e:
        print(f"chaoslog fault: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    cluster = attach(a.name)
    why = injectors.unsupported(a.fault, backend=cluster.backend, proxied=bool(cluster.spec.proxied),
                                zookeepers=cluster.spec.zookeepers)
    if why:
        print(f"chaoslog fault: error: {why}", file=sys.stderr)
        return EXIT_REFUSED
    target = a.target or next((r for r in kind.roles if r), None)
    zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
    zk.start(timeout=15)
    try:
        ctx = _context(cluster, zk, a.seed, a.partition, a.mechanism)
        try:
            inj = injectors.make(a.fault, ctx, target, **params)
            if a.target:
                inj.target.check_against(cluster.spec.node_names()) if inj.target else None
            inj.start()
        except (FaultError, TargetError) as e:
            print(f"chaoslog fault: error: {e}", file=sys.stderr)
            return EXIT_REFUSED
        if hasattr(inj, "done"):  # a bounce: it runs its rounds, then it is over
            while not inj.done():
                time.sleep(0.2)
            inj.stop()
        d = inj.describe()
        if inj.active:
            active = _load_state(a.name)
            active.append({**d, "params": params, "started_at": time.time()})
            _save_state(a.name, active)
            print(f"{d['fault']} on {', '.join(d['targets'])}: active; undo with "
                  f"`chaoslog heal --name {a.name}`")
        else:
            print(f"{d['fault']} on {', '.join(d['targets'])}: done ({d['detail']})")
        return 0
    finally:
        zk.stop()
        zk.close()


def cmd_heal(a: argparse.Namespace) -> int:
    from kazoo.client import KazooClient

    from faults.injectors.base import FaultContext
    from faults.nemesis import final_heal
    from faults.targets import Resolver
    from harness.backends import attach

    cluster = attach(a.name)
    before = _load_state(a.name)
    zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
    try:
        zk.start(timeout=15)
    except Exception:  # noqa: BLE001 - ZooKeeper itself may be what is broken
        zk = None
    try:
        rng = random.Random(0)
        ctx = FaultContext(cluster, Resolver(cluster, zk, rng), rng, log=lambda m: None)
        done = final_heal(ctx, wait_registered=zk is not None)
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
    _save_state(a.name, [])
    for f in before:
        print(f"healed {f['fault']} on {', '.join(f['targets'])}")
    for line in done:
        print(line)
    if not before and not done:
        print("nothing to heal")
    return 0
