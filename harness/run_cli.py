"""`chaoslog run`: one chaos run from the command line.

The options map onto a RunSpec (harness/run.py), field by field: the CLI
only reads their text (KEY=VALUE, S or MIN,MAX, a count or names, the files
--spec, --schedule and --commands name) and calls RunSpec.validate, where
every rule of a run lives (unknown faults, impossible replication factors,
faults the backend cannot do: refused in one line). Then harness.run.execute
does the run: cluster up, topics, the workload and the nemesis, the final
heal, a quiet period, final reads, logs and a ZooKeeper dump into the run
directory, the checker, the verdict.

Exit codes (reports/exit_codes.py): 0 valid, 1 anomalies found, 2 settings
refused, 3 verdict unknown (final reads incomplete or no checker), 4 the
harness failed.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from cluster.protocol.sasl import SECURITY_PROTOCOLS
from faults import injectors, recipes
from faults.injectors.base import FaultError
from faults.nemesis import Schedule
from harness.backends.base import ClusterSpec
from harness.progress import Progress
from harness.run import Draw, Refused, RunSpec, execute, log_line, mix_of, refuse_backend
from harness.security import PLAINTEXT, ClientSecurity
from harness.workload import WorkloadSpec
from harness.workload.clients import CLIENTS, ProducerSettings
from harness.workload.group import COMMIT_MODES, SUB_VIA
from reports.exit_codes import EXIT_ERROR, EXIT_OK, EXIT_REFUSED


# -- reading the options' text ------------------------------------------------------------

def kv_list(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise Refused(f"{what} {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def param_value(v: str) -> Any:
    """A --param value: int, float, true/false, or the text."""
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(v.lower(), v)


def _range(text: str, what: str) -> tuple[float, float]:
    """S or MIN,MAX (RunSpec.validate checks MIN <= MAX)."""
    try:
        parts = [float(x) for x in text.split(",")]
    except ValueError:
        raise Refused(f"{what} {text!r}: expected SECONDS or MIN,MAX") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2:
        raise Refused(f"{what} {text!r}: expected SECONDS or MIN,MAX with MIN <= MAX")
    return parts[0], parts[1]


def topics_of(text: str, partitions: int) -> dict[str, int]:
    """--topics: a count ("3": t0, t1, t2) or names ("orders,audit")."""
    text = text.strip()
    if partitions < 1:
        raise Refused(f"--partitions {partitions}: at least 1")
    if text.isdigit():
        n = int(text)
        if n < 1:
            raise Refused("--topics: at least one topic")
        names = [f"t{i}" for i in range(n)] if n > 1 else ["t"]
    else:
        names = [t.strip() for t in text.split(",") if t.strip()]
    if len(set(names)) != len(names):
        raise Refused("--topics: a topic is named twice")
    return {t: partitions for t in names}


# -- the system under test ---------------------------------------------------------------

SYSTEMS = ("chaoslog", "tansu", "external")


def target_system(items: list[str]) -> tuple[str, list[str]]:
    """--target: a bare word names the system under test, FAULT=ROLE items
    pin roles. Returns (system, the FAULT=ROLE items)."""
    systems = [i for i in items if "=" not in i]
    for word in systems:
        if word not in SYSTEMS:
            raise Refused(f"--target {word}: a system is one of {', '.join(SYSTEMS)}; a pinned "
                          f"role is FAULT=ROLE")
    if len(set(systems)) > 1:
        raise Refused(f"--target names two systems ({', '.join(systems)})")
    return (systems[0] if systems else "chaoslog"), [i for i in items if "=" in i]


def cluster_of(system: str, a: argparse.Namespace, broker_config: dict[str, str],
               client: ClientSecurity = PLAINTEXT) -> ClusterSpec:
    """The cluster spec of --target and the cluster options."""
    if system != "external" and (a.bootstrap or a.commands):
        raise Refused("--bootstrap and --commands go with --target external")
    if system == "external":
        refuse_backend(system, a.backend)   # before asking the cluster for its brokers
        return external_spec(a, broker_config, client)
    if a.security != "PLAINTEXT" and system != "chaoslog":
        raise Refused(f"--security makes the built-in brokers' listener; for --target {system} "
                      f"give the clients' settings with --client-config")
    if system == "tansu":
        from harness.backends.tansu import TansuSpec
        return TansuSpec(brokers=a.brokers, broker_config=broker_config)
    return ClusterSpec(brokers=a.brokers, zookeepers=a.zookeepers, broker_config=broker_config,
                       security=a.security)


def external_spec(a: argparse.Namespace, broker_config: dict[str, str],
                  client: ClientSecurity = PLAINTEXT) -> Any:
    """The external cluster of --bootstrap and --commands, its brokers listed
    by its own Metadata (so that targets can be checked now)."""
    from harness.backends.base import ClusterError, broker_id_of
    from harness.backends.external import ExternalSpec, discover, load_commands
    if not a.bootstrap:
        raise Refused("--target external needs --bootstrap HOST:PORT[,HOST:PORT...]")
    try:
        commands, per_node, proxies = load_commands(a.commands) if a.commands else ({}, {}, {})
        # With the proxy in front of every broker, the command file names them
        # (the cluster may answer only once the proxy is up, at the run's start).
        ids = (sorted(broker_id_of(n) for n in proxies) if proxies
               else sorted(discover(a.bootstrap, security=client)))
        spec = ExternalSpec(bootstrap=a.bootstrap, commands=commands, node_commands=per_node,
                            broker_ids=ids, brokers=len(ids), proxies=proxies,
                            proxied=bool(proxies), broker_config=broker_config)
        for table, nodes in (("nodes", per_node), ("proxy", proxies)):
            unknown = sorted(set(nodes) - set(spec.node_names()))
            if unknown:
                raise ClusterError(f"--commands {a.commands}: [{table}.{unknown[0]}] is not a "
                                   f"broker of the cluster ({', '.join(spec.node_names())})")
    except ClusterError as e:
        raise Refused(str(e)) from None
    return spec


def client_config(path: str | None) -> ClientSecurity:
    """--client-config: every client's security settings, from the file."""
    if not path:
        return PLAINTEXT
    try:
        return ClientSecurity.from_file(path)
    except ValueError as e:
        raise Refused(f"--client-config {path}: {e}") from None


# -- the parser --------------------------------------------------------------------------

def add_parser(sub: Any) -> None:
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
    g.add_argument("--security", choices=SECURITY_PROTOCOLS, default="PLAINTEXT",
                   help="the built-in brokers' listener: with TLS and SASL the cluster makes "
                        "its own CA and users, and every client of the run uses them "
                        "(docs/design.md#security)")
    g.add_argument("--bootstrap", metavar="HOST:PORT,...",
                   help="with --target external: the client addresses of a cluster the "
                        "harness did not start (docs/targets.md)")
    g.add_argument("--commands", metavar="FILE",
                   help="with --target external: the command file (TOML) that kills, stops, "
                        "starts, pauses and resumes its brokers, and may place the proxy "
                        "between the clients and them (docs/targets.md)")
    g.add_argument("--client-config", metavar="FILE",
                   help="the clients' security settings (TLS, SASL): Kafka client properties, "
                        "or TOML with a [client] table; the password comes from "
                        "sasl.password.env or sasl.password.file (docs/targets.md)")
    g = p.add_argument_group("workload")
    g.add_argument("--duration", type=float, default=60.0, help="seconds of workload and faults")
    g.add_argument("--rate", type=float, default=100.0, help="sends/s over all producers (0 = no limit)")
    g.add_argument("--client", choices=CLIENTS, default="confluent")
    g.add_argument("--acks", default="all", choices=("0", "1", "all", "-1"))
    g.add_argument("--idempotent", action="store_true")
    g.add_argument("--retries", type=int, default=0)
    g.add_argument("--max-in-flight", type=int, default=1)
    g.add_argument("--request-timeout-ms", type=int, default=5000)
    g.add_argument("--delivery-timeout-ms", type=int, default=15000)
    g.add_argument("--producers", type=int, default=2, help="producer processes")
    g.add_argument("--slots", type=int, default=4, help="logical client processes per producer")
    g.add_argument("--consumers", type=int, default=1, help="consumer processes")
    g.add_argument("--fetchers", type=int, default=0,
                   help="consumers that fetch through the protocol itself (exact fetch responses)")
    g.add_argument("--mix", default="",
                   help="producers' settings in turn: all, 1, 0 (acks) or idempotent "
                        "(acks=all, idempotence, 5 in flight), e.g. idempotent,1,all")
    g.add_argument("--sub-via", choices=SUB_VIA, default="assign",
                   help="consumers: assign partitions themselves, or subscribe as one consumer "
                        "group of the run (commits and rebalances go to groups.jsonl)")
    g.add_argument("--commit", choices=COMMIT_MODES, default="manual",
                   help="with --sub-via subscribe: commit after each poll (manual), the client's "
                        "auto-commit (auto), or never (none)")
    g.add_argument("--transactions", action="store_true",
                   help="producers write in transactions (confluent), consumers and final reads "
                        "read at read_committed (docs/history-format.md, Transactions)")
    g.add_argument("--abort-ratio", type=float, default=0.2,
                   help="with --transactions: the share of transactions aborted on purpose")
    g.add_argument("--pipeline", default="", metavar="TOPIC",
                   help="with --transactions: a consume-transform-produce pipeline reads the "
                        "other topics and writes TOPIC (one of --topics)")
    g.add_argument("--crash-clients", type=float, default=0.0, metavar="SECONDS",
                   help="kill a client process about this often and start a new one (0: never)")
    g = p.add_argument_group("faults")
    g.add_argument("--faults", default="",
                   help="NAME[:WEIGHT][,NAME...]: faults and recipes of the catalogue (--list-faults)")
    g.add_argument("--target", nargs="*", metavar="SYSTEM|FAULT=ROLE", default=[],
                   help="the system under test: chaoslog (the built-in cluster, default), "
                        "tansu (its opt-in image, docs/targets.md) or external (with "
                        "--bootstrap); and/or FAULT=ROLE to pin a fault's role")
    g.add_argument("--param", nargs="*", metavar="FAULT.KEY=VALUE", default=[], help="fix a fault parameter")
    g.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    g.add_argument("--interval", default="5,10", help="seconds between faults: S or MIN,MAX")
    g.add_argument("--overlap", type=int, default=1,
                   help="lanes of faults running side by side (1: one fault at a time)")
    g.add_argument("--fault-duration", default="5,15", help="seconds a fault lasts: S or MIN,MAX")
    g.add_argument("--quiet", type=float, default=10.0, help="seconds between the final heal and final reads")
    g.add_argument("--final-timeout", type=float, default=60.0)
    g.add_argument("--mechanism", choices=("auto", "iptables", "proxy"), default="auto",
                   help="how partitions are made")
    g.add_argument("--schedule", metavar="FILE",
                   help="replay this schedule as it is (from --print-schedule --json, a run's "
                        "run.json, or its run directory) instead of drawing one")
    g.add_argument("--spec", metavar="FILE",
                   help="replay a whole run, settings and schedule: a run directory, its "
                        "run.json, or the spec.json of `chaoslog shrink`")
    g.add_argument("--print-schedule", action="store_true", help="print the schedule and exit")
    g.add_argument("--json", action="store_true", help="with --print-schedule: as JSON")
    g.add_argument("--list-faults", action="store_true", help="print the fault catalogue and exit")
    p.add_argument("--out", help="run directory (default runs/RUN_ID)")
    p.add_argument("--no-analysis", action="store_true")
    p.set_defaults(func=cmd_run)


# -- options -> RunSpec ---------------------------------------------------------------------

# Options that draw a schedule: a replayed one (--schedule) comes as it is.
DRAWING = {"faults": "", "target": [], "param": [], "seed": None, "interval": "5,10",
           "overlap": 1, "fault_duration": "5,15"}


def _read_json(option: str, path: str) -> Any:
    """A JSON file, or a run directory's run.json."""
    p = Path(path)
    if p.is_dir():
        p = p / "run.json"
    try:
        return json.loads(p.read_text())
    except OSError as e:
        raise Refused(f"{option} {path}: cannot read {p}: {e.strerror}") from None
    except ValueError as e:
        raise Refused(f"{option} {path}: {p} is not JSON ({e})") from None


def load_spec(path: str) -> RunSpec:
    """The whole run to replay, settings and schedule: a spec.json written by
    `chaoslog shrink`, a run's run.json (its `spec`) or its run directory."""
    d = _read_json("--spec", path)
    if isinstance(d, dict) and "cluster" in d and isinstance(d.get("spec"), dict):
        d = d["spec"]   # a run.json
    try:
        spec = RunSpec.from_json(d)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise Refused(f"--spec {path}: not a run's spec (missing or bad field {e}); a run made by "
                      f"`chaoslog run` keeps it in its run.json") from None
    _check_faults("--spec", path, spec.schedule)
    return spec


def _check_faults(option: str, path: str, schedule: Any) -> None:
    """The file's faults are the catalogue's (named with the file)."""
    for step in getattr(schedule, "steps", ()):
        try:
            injectors.kind(step.fault)
        except FaultError as e:
            raise Refused(f"{option} {path}: {e}") from None


def load_schedule(path: str) -> Schedule:
    """The schedule to replay: a file of `--print-schedule --json`, a run's
    run.json (its `schedule`), or a run directory (its run.json)."""
    d = _read_json("--schedule", path)
    if isinstance(d, dict) and "steps" not in d and isinstance(d.get("schedule"), dict):
        d = d["schedule"]   # a run.json
    try:
        schedule = Schedule.from_json(d)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise Refused(f"--schedule {path}: not a schedule (missing or bad field {e})") from None
    _check_faults("--schedule", path, schedule)
    return schedule


# Options --spec leaves as they are: where the run goes and how it is checked.
NOT_IN_A_SPEC = {"spec", "out", "no_analysis", "backend", "print_schedule", "json", "func",
                 "command", "list_faults"}


def replay_spec(a: argparse.Namespace, defaults: argparse.Namespace) -> RunSpec:
    """--spec: the run of the file, only its output and checking chosen here."""
    given = [f"--{k.replace('_', '-')}" for k, v in vars(a).items()
             if k not in NOT_IN_A_SPEC and v != getattr(defaults, k, v)]
    if given:
        raise Refused(f"--spec replays a whole run as it is: drop {', '.join(sorted(given))}")
    spec = load_spec(a.spec)
    return replace(spec, backend=a.backend or spec.backend,
                   out=Path(a.out) if a.out else None,
                   checker=None if a.no_analysis else (spec.checker or "spark"))


def spec_of_options(a: argparse.Namespace) -> RunSpec:
    """The options as a RunSpec, field by field, not yet validated."""
    if getattr(a, "spec", None):
        return replay_spec(a, _defaults())
    replay = load_schedule(a.schedule) if a.schedule else None
    client = client_config(a.client_config)
    system, pins = target_system(a.target)
    if replay is not None:
        given = [f"--{k.replace('_', '-')}" for k, default in DRAWING.items()
                 if (pins if k == "target" else getattr(a, k)) != default]
        if given:
            raise Refused(f"--schedule replays a schedule as it is: drop {', '.join(given)}")
    params: dict[str, dict[str, Any]] = {}
    for key, v in kv_list(a.param, "--param").items():
        f, _, k = key.partition(".")
        params.setdefault(f, {})[k] = param_value(v)
    try:
        producer = ProducerSettings(acks=a.acks, retries=a.retries, idempotent=a.idempotent,
                                    max_in_flight=a.max_in_flight,
                                    request_timeout_ms=a.request_timeout_ms,
                                    delivery_timeout_ms=a.delivery_timeout_ms)
        workload = WorkloadSpec(topics_of(a.topics, a.partitions), client=a.client,
                                producers=a.producers, slots=a.slots, consumers=a.consumers,
                                rate=a.rate, producer=producer,
                                mix=mix_of([k.strip() for k in a.mix.split(",") if k.strip()],
                                           producer),
                                fetchers=a.fetchers, crash_every_s=a.crash_clients,
                                sub_via=a.sub_via, commit=a.commit,
                                transactions=a.transactions, abort_ratio=a.abort_ratio,
                                pipeline_output=a.pipeline)
    except ValueError as e:
        raise Refused(str(e)) from None
    schedule = replay or Draw(faults=[f for f in a.faults.split(",") if f.strip()], seed=a.seed,
                              duration_s=a.duration,
                              interval_s=_range(a.interval, "--interval"),
                              fault_duration_s=_range(a.fault_duration, "--fault-duration"),
                              overlap=a.overlap, targets=kv_list(pins, "--target"),
                              params=params)
    return RunSpec(cluster=cluster_of(system, a, kv_list(a.broker_config, "--broker-config"),
                                      client),
                   backend=a.backend, replication_factor=a.replication_factor,
                   workload=workload, schedule=schedule,
                   quiet_s=replay.quiet_s if replay is not None else a.quiet,
                   final_timeout_s=a.final_timeout, mechanism=a.mechanism,
                   checker=None if a.no_analysis else "spark",
                   out=Path(a.out) if a.out else None, client=client)


def spec_from_args(a: argparse.Namespace) -> RunSpec:
    """Everything `run` needs, checked (RunSpec.validate); Refused says why not."""
    return spec_of_options(a).validate()


def _defaults() -> argparse.Namespace:
    """The options of `chaoslog run` as they are when none is given."""
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["run"])


def print_catalogue() -> None:
    for k in injectors.CATALOGUE.values():
        roles = ",".join(r or "-" for r in k.roles)
        print(f"{k.name:<18} {k.family:<10} roles {roles:<32} {k.about}")
    print("\nrecipes (drawn like a fault: a sequence of faults, the later aimed at the roles "
          "the earlier made):")
    for r in recipes.RECIPES.values():
        print(f"{r.name:<34} {r.about}")


def print_schedule(schedule: Schedule, as_json: bool) -> None:
    print(schedule.dumps() if as_json else schedule.to_text())


def cmd_run(a: argparse.Namespace) -> int:
    if a.list_faults:
        print_catalogue()
        return EXIT_OK
    try:
        spec = spec_from_args(a)
    except Refused as e:
        print(f"chaoslog run: error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    if a.print_schedule:
        print_schedule(spec.schedule, a.json)
        return EXIT_OK
    return run_and_report(spec)


def run_and_report(spec: RunSpec) -> int:
    """execute() with a progress line, then the verdict printed."""
    from reports.cli import print_verdict

    progress: list[Progress] = []
    try:
        result = execute(spec, log=log_line,
                         on_start=lambda run: progress.append(Progress(run).start()))
    finally:
        for p in progress:
            p.stop()
    if result.verdict is not None:
        print_verdict(result.verdict)
    elif spec.checker is None and result.exit_code in (0, 3):
        log_line(f"history in {result.run_dir}/history.jsonl (analysis skipped)")
    return result.exit_code if result.exit_code is not None else EXIT_ERROR
