"""The harness side of a workload: start worker processes, read their JSON
lines, and record them in the history.

Each worker's stream is read by a thread of its own; events go to the
HistoryRecorder, which numbers them under one lock at receipt. A worker's
logical process is the actor (worker id, slot); the recorder retires its
process id after an `info`. When a stream ends with ops still open (the
worker crashed or was killed), those ops are completed as `info`: their
outcome is unknown.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from contracts.deadline import Deadline
from harness.security import PLAINTEXT, ClientSecurity
from harness.workload.clients import CLIENTS, EXIT_FATAL, ProducerSettings
from harness.workload.group import COMMIT_MODES, GROUP_CLIENTS, SUB_VIA

WORKER_MODULE = "harness.workload.worker"
TRANSACTIONAL_CLIENTS = ("confluent", "aiokafka")


@dataclass
class WorkloadSpec:
    topics: dict[str, int]                     # topic -> partition count
    client: str = "confluent"
    producers: int = 2                         # worker processes
    slots: int = 4                             # logical processes per producer
    consumers: int = 1                         # consumer worker processes (the client library)
    rate: float = 100.0                        # sends/s over all producers; 0 = no limit
    poll_rate: float = 0.0                     # polls/s per consumer worker; 0 = no limit
    producer: ProducerSettings = field(default_factory=ProducerSettings)
    # Producer i runs with mix[i % len(mix)] instead of `producer`: acks=1,
    # acks=all and idempotent producers in one run.
    mix: tuple[ProducerSettings, ...] = ()
    fetchers: int = 0                          # consumers that fetch through the protocol itself
    crash_every_s: float = 0.0                 # kill a client worker this often, start a new one
    sub_via: str = "assign"                    # consumers: assign partitions, or subscribe in a group
    commit: str = "manual"                     # group members: auto, manual or none
    # Producers send in transactions (confluent); consumers and final reads
    # read at read_committed (docs/history-format.md, "Transactions").
    transactions: bool = False
    abort_ratio: float = 0.2                   # transactions aborted on purpose
    # A consume-transform-produce pipeline (transactions): it reads every
    # other topic, which the producers write, and writes this one.
    pipeline_output: str = ""

    def __post_init__(self) -> None:
        if self.client not in CLIENTS:
            raise ValueError(f"unknown client {self.client!r}: {', '.join(CLIENTS)}")
        if self.sub_via not in SUB_VIA:
            raise ValueError(f"sub_via is {' or '.join(SUB_VIA)}, not {self.sub_via!r}")
        if self.commit not in COMMIT_MODES:
            raise ValueError(f"commit is {', '.join(COMMIT_MODES)}, not {self.commit!r}")
        if self.sub_via == "subscribe" and self.commit not in GROUP_CLIENTS.get(self.client, ()):
            raise ValueError(f"--sub-via subscribe with --client {self.client} commits "
                             f"{' or '.join(GROUP_CLIENTS.get(self.client, ()))}, not {self.commit}")
        if self.transactions and (self.client not in TRANSACTIONAL_CLIENTS
                                  or self.sub_via != "assign"):
            raise ValueError(f"transactions are written by the producers of "
                             f"{' and '.join(TRANSACTIONAL_CLIENTS)} and read by assigned "
                             f"consumers (--sub-via assign), not --client {self.client} "
                             f"--sub-via {self.sub_via}")
        if self.pipeline_output and self.client != "confluent":
            raise ValueError("the pipeline is confluent-kafka's (--client confluent)")
        if self.pipeline_output and (not self.transactions
                                     or self.pipeline_output not in self.topics
                                     or len(self.topics) < 2):
            raise ValueError(f"the pipeline's output {self.pipeline_output!r} must be one of "
                             f"two or more topics of a transactional workload")
        if not 0 <= self.abort_ratio <= 1:
            raise ValueError(f"abort_ratio is a share between 0 and 1, not {self.abort_ratio}")
        if not self.topics or any(n < 1 for n in self.topics.values()):
            raise ValueError("a workload needs at least one topic with at least one partition")

    def partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, n in sorted(self.topics.items()) for p in range(n)]

    def written(self) -> list[tuple[str, int]]:
        """The partitions the producers write (all but a pipeline's output)."""
        return [(t, p) for t, p in self.partitions() if t != self.pipeline_output]

    def producer_settings(self, i: int) -> ProducerSettings:
        return self.mix[i % len(self.mix)] if self.mix else self.producer

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        settings = [self.producer_settings(i) for i in range(self.producers)]
        d["acks"] = settings[0].acks if len({s.acks for s in settings}) == 1 else "mixed"
        # Run-wide idempotence (duplicates fatal everywhere) only when every
        # producer is; `clients` says it per producer.
        d["idempotence"] = all(s.idempotent for s in settings)
        d["partitions"] = [f"{t}/{p}" for t, p in self.partitions()]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "WorkloadSpec":
        """The spec `to_json` wrote (its derived keys are ignored)."""
        plain = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        plain["topics"] = {str(t): int(n) for t, n in d["topics"].items()}
        plain["producer"] = ProducerSettings(**d.get("producer") or {})
        plain["mix"] = tuple(ProducerSettings(**m) for m in d.get("mix") or ())
        return cls(**plain)


class WorkerHandle(Protocol):
    name: str

    def lines(self) -> Iterator[str]: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float) -> int | None: ...


Launcher = Callable[[str, list[str]], WorkerHandle]


def launcher_for(cluster: Any, log_dir: Path) -> Launcher:
    """Workers run where the cluster runs them: local subprocesses (local and
    external backends), or containers on the cluster's network (docker). A local worker
    also stops when the harness dies (--stdin-stop: its stdin pipe closes)."""
    extra = ["--stdin-stop"] if cluster.local_workers else []

    def launch(name: str, argv: list[str]) -> WorkerHandle:
        return cluster.start_worker(name, [WORKER_MODULE, *argv, *extra], log_dir / f"{name}.log")
    return launch


class _Stream:
    """Reads one worker's lines into the recorder. `client` names the client
    instance (`producer-3`): the `node` of its sends in the history."""

    def __init__(self, wid: int, client: str, handle: WorkerHandle, recorder: Any,
                 log: Callable[[str], None],
                 on_status: Callable[[dict[str, Any]], None] | None = None,
                 on_exit: Callable[["_Stream", int | None], None] | None = None,
                 respawn: tuple[Any, ...] = ()):
        self.wid = wid
        self.client = client
        self.handle = handle
        self.recorder = recorder
        self.log = log
        self.on_status = on_status
        self.on_exit = on_exit
        self.open: dict[tuple[int, int], int] = {}   # (slot, seq) -> op
        self.open_commits: dict[int, dict[str, Any]] = {}  # commit ref -> its invoke
        # (kind, role, client, argv, settings): how to start it again (crash-clients)
        self.respawn = respawn
        self.thread = threading.Thread(target=self._run, name=f"read-{handle.name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for line in self.handle.lines():
                try:
                    self._line(line)
                except Exception as e:  # noqa: BLE001 - one bad line is not the end of the stream
                    self.log(f"{self.handle.name}: cannot record {line.strip()[:200]!r}: {e!r}")
        except Exception as e:  # noqa: BLE001 - a broken stream ends like a dead worker
            self.log(f"{self.handle.name}: stream error {e!r}")
        for (slot, seq), op in sorted(self.open.items()):
            self.recorder.complete(op, "info", error="worker-exited")
        self.open.clear()
        for ref, inv in sorted(self.open_commits.items()):
            self.recorder.group_event(member=self.client, kind="commit", type="info",
                                      commit=ref, group=inv.get("group"), error="worker-exited")
        self.open_commits.clear()
        if self.on_exit is not None:
            self.on_exit(self, self.handle.wait(10))

    def _line(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        try:
            ev = json.loads(line)
            if not isinstance(ev, dict):
                raise ValueError("not an object")
        except ValueError:
            self.log(f"{self.handle.name}: {line[:200]}")
            return
        t = ev.pop("type", None)
        if t == "invoke":
            key = (ev.pop("slot"), ev.pop("seq"))
            if ev.get("f") == "send":
                ev["node"] = self.client
            self.open[key] = self.recorder.invoke((self.wid, key[0]), ev.pop("f"), **ev)
        elif t in ("ok", "fail", "info"):
            key = (ev.pop("slot"), ev.pop("seq"))
            op = self.open.pop(key, None)
            if op is None:
                self.log(f"{self.handle.name}: completion of unknown op {key}")
                return
            self.recorder.complete(op, t, **ev)
        elif t == "group":
            self._group(ev)
        elif t == "status":
            if self.on_status:
                self.on_status(ev)
        elif t == "log":
            self.log(f"{self.handle.name}: {ev.get('msg')}")


    def _group(self, ev: dict[str, Any]) -> None:
        """A group member's assign, revoke or commit: a line of groups.jsonl.
        A commit still open when the worker dies ends as info (unknown)."""
        if ev.get("kind") == "commit":
            ev["type"] = ev.pop("outcome", None)  # (a worker line's own `type` is "group")
            if ev["type"] == "invoke":
                self.open_commits[ev.get("commit")] = ev
            else:
                self.open_commits.pop(ev.get("commit"), None)
        self.recorder.group_event(member=self.client, **ev)


@dataclass
class FinalReads:
    complete: bool
    partitions: dict[str, dict[str, Any]]      # "t/0" -> status line
    missing: list[str]                          # partitions without a status (reader died / timeout)


class Workload:
    """Producers and consumers against one cluster, recorded into `recorder`."""

    def __init__(self, recorder: Any, bootstrap: str | Callable[[], str], spec: WorkloadSpec, *,
                 launcher: Launcher, log: Callable[[str], None] = lambda m: None,
                 security: ClientSecurity = PLAINTEXT):
        self.recorder = recorder
        self._bootstrap = bootstrap
        self.spec = spec
        self.launch = launcher
        self.log = log
        # Workers get the settings' JSON, which names the password's source:
        # each reads the password itself, so no command line carries it.
        self._security = ([] if security == PLAINTEXT
                          else ["--security", json.dumps(security.to_json())])
        self._next_wid = 1
        self.streams: list[_Stream] = []
        # Every client instance started: name -> its settings (run.json's
        # workload.clients; the checker reads per-producer idempotence there).
        self.clients: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._crasher: threading.Thread | None = None
        # Producers replaced after a fatal client error: old instance -> new.
        self.replaced: dict[str, str] = {}

    @property
    def group(self) -> str:
        """The run's consumer group: named after the run directory, so that
        runs against one cluster never share offsets."""
        run_dir = getattr(self.recorder, "run_dir", None)
        return f"chaoslog-{Path(run_dir).name}" if run_dir is not None else "chaoslog-group"

    @property
    def pipeline_group(self) -> str:
        return f"{self.group}-pipeline"

    def pipeline_json(self) -> dict[str, Any] | None:
        """run.json's workload.pipeline (docs/history-format.md, "Transactions")."""
        out = self.spec.pipeline_output
        if not out:
            return None
        return {"input": sorted({t for t, _ in self.spec.written()}), "output": out,
                "group": self.pipeline_group}

    @property
    def bootstrap(self) -> str:
        return self._bootstrap() if callable(self._bootstrap) else self._bootstrap

    def _spawn(self, kind: str, role: str, client: str, argv: list[str],
               settings: dict[str, Any] | None = None, on_status=None) -> _Stream:
        """Start one worker process: `kind` names the client instance
        (`producer-3`, `fetcher-5`), `role` is the worker's role."""
        with self._lock:
            wid = self._next_wid
            self._next_wid += 1
        name = f"{kind}-{wid}"
        handle = self.launch(name, [role, "--bootstrap", self.bootstrap, "--client", client,
                                    "--worker-id", str(wid), *self._security, *argv])
        s = _Stream(wid, name, handle, self.recorder, self.log, on_status,
                    on_exit=self._replace_if_fatal if role in ("producer", "pipeline") else None,
                    respawn=(kind, role, client, argv, settings))
        with self._lock:
            self.streams.append(s)
            if settings is not None:
                self.clients[name] = settings
        return s

    def start(self, duration: float = 0.0) -> "Workload":
        """Start producers, consumers and fetchers; they stop by themselves
        after `duration` seconds (0 = only when stopped). With
        `crash_every_s`, a thread kills a client worker now and then and
        starts a new one in its place (Jepsen's crash-clients)."""
        parts = [f"{t}/{p}" for t, p in self.spec.written()]
        per_rate = self.spec.rate / self.spec.producers if self.spec.producers else 0
        common = ["--duration", str(duration)]
        for i in range(self.spec.producers):
            s = self.spec.producer_settings(i)
            # Rotate the partition order so producers spread over partitions.
            mine = parts[i % len(parts):] + parts[:i % len(parts)]
            self._spawn("producer", "producer", self.spec.client, [
                *common, "--partitions", ",".join(mine), "--slots", str(self.spec.slots),
                "--rate", str(per_rate), "--acks", s.acks, "--retries", str(s.retries),
                "--max-in-flight", str(s.max_in_flight),
                "--request-timeout-ms", str(s.request_timeout_ms),
                "--delivery-timeout-ms", str(s.delivery_timeout_ms),
                *(["--idempotent"] if s.idempotent else []), *self._transactional()],
                {"role": "producer", "client": self.spec.client, **asdict(s),
                 **({"transactional": True, "idempotent": True} if self.spec.transactions
                    else {})})
        for kind, client, n in (("consumer", self.spec.client, self.spec.consumers),
                                ("fetcher", "raw", self.spec.fetchers)):
            for i in range(n):
                # Group members subscribe to every topic; the coordinator splits the partitions.
                group = self.group if kind == "consumer" and self.spec.sub_via == "subscribe" else ""
                mine = parts if group else parts[i::n]
                if mine:
                    extra = ["--group", group, "--commit", self.spec.commit] if group else []
                    settings = {"role": kind, "client": client,
                                **({"group": group, "commit": self.spec.commit} if group else {})}
                    if kind == "consumer":
                        extra += self._isolation()
                    self._spawn(kind, "consumer", client, [
                        *common, "--partitions", ",".join(mine),
                        "--rate", str(self.spec.poll_rate), *extra], settings)
        if self.spec.pipeline_output:
            self._spawn("pipeline", "pipeline", self.spec.client, [
                *common, "--partitions", ",".join(parts), "--group", self.pipeline_group,
                "--output", self.spec.pipeline_output, "--output-partitions",
                str(self.spec.topics[self.spec.pipeline_output]), *self._transactional()],
                {"role": "pipeline", "client": self.spec.client, "group": self.pipeline_group})
        if self.spec.crash_every_s > 0:
            self._crasher = threading.Thread(target=self._crash_loop, name="crash-clients",
                                             daemon=True)
            self._crasher.start()
        return self

    def _transactional(self) -> list[str]:
        if not self.spec.transactions:
            return []
        return ["--transactions", "--abort-ratio", str(self.spec.abort_ratio)]

    def _isolation(self) -> list[str]:
        return ["--isolation", "read_committed"] if self.spec.transactions else []

    def _replace_if_fatal(self, stream: _Stream, code: int | None) -> None:
        """A producer that stopped at an error its client cannot recover from
        (librdkafka's fatal errors: its idempotent producer's state is gone)
        is replaced by a new instance, as an application restarts its
        producer; `replaced` keeps who replaced whom."""
        if code != EXIT_FATAL or self._stopping.is_set():
            return
        new = self._spawn(*stream.respawn)
        self.log(f"{stream.client} stopped at a fatal client error; {new.client} replaces it")
        with self._lock:
            self.replaced[stream.client] = new.client
        if self._stopping.is_set():          # stop() began meanwhile: it did not see `new`
            new.handle.terminate()

    def _crash_loop(self) -> None:
        import random
        rng = random.Random(self.spec.crash_every_s)
        period = self.spec.crash_every_s
        while not self._stopping.wait(rng.uniform(0.5 * period, 1.5 * period)):
            with self._lock:
                live = [s for s in self.streams if s.respawn[0] != "final"
                        and s.thread.is_alive()]
            if live:
                self.crash_client(rng.choice(live))

    def crash_client(self, victim: _Stream) -> _Stream:
        """SIGKILL one client worker (its open ops end as info: their outcome
        is unknown) and start a new instance in its place; recorded as a
        `crash-client` fault window."""
        self.recorder.nemesis("crash-client", "start", [victim.client], "SIGKILL")
        victim.handle.kill()
        victim.handle.wait(10)
        victim.thread.join(10)
        kind, role, client, argv, settings = victim.respawn
        new = self._spawn(kind, role, client, argv, settings)
        self.recorder.nemesis("crash-client", "stop", [victim.client],
                              f"replaced by {new.client}")
        return new

    def stop_crashing(self) -> None:
        """No more client crashes (the faults of a run end at its final heal)."""
        self._stopping.set()
        if self._crasher is not None:
            self._crasher.join(30)

    def stop(self, drain_s: float = 5.0) -> None:
        """Ask every worker to stop, wait for them to drain, kill stragglers;
        returns when every stream is read to its end."""
        self.stop_crashing()
        with self._lock:
            live = [s for s in self.streams if s.thread.is_alive()]
        for s in live:
            s.handle.terminate()
        deadline = Deadline(drain_s + 10)
        for s in live:
            if s.handle.wait(max(0.1, deadline.remaining())) is None:
                self.log(f"{s.handle.name}: did not stop, killing it")
                s.handle.kill()
                s.handle.wait(5)
        for s in live:
            s.thread.join(10)

    def final_reads(self, min_end: dict[tuple[str, int], int] | None = None, *,
                    timeout: float = 60.0, settle_s: float = 10.0, readers: int = 0) -> FinalReads:
        """Read every partition from its beginning (polls marked final) until
        complete or `timeout`. `min_end`: partition -> acknowledged log end
        (highest acknowledged offset + 1)."""
        parts = self.spec.partitions()
        n = readers or min(len(parts), 4)
        statuses: dict[str, dict[str, Any]] = {}
        lock = threading.Lock()

        def on_status(ev: dict[str, Any]) -> None:
            with lock:
                statuses[f"{ev['topic']}/{ev['partition']}"] = ev

        streams = []
        for i in range(n):
            mine = parts[i::n]
            if not mine:
                continue
            ends = ",".join(f"{t}/{p}={(min_end or {}).get((t, p), 0)}" for t, p in mine)
            streams.append(self._spawn("final", "final", self.spec.client, [
                "--partitions", ",".join(f"{t}/{p}" for t, p in mine), "--timeout", str(timeout),
                "--settle-s", str(settle_s), "--min-end", ends, *self._isolation()],
                on_status=on_status))
        for s in streams:
            s.thread.join(timeout + 30)
            if s.thread.is_alive():
                s.handle.kill()
                s.thread.join(10)
            s.handle.wait(5)
        names = [f"{t}/{p}" for t, p in parts]
        missing = [p for p in names if p not in statuses]
        complete = not missing and all(statuses[p].get("complete") for p in names)
        return FinalReads(complete, statuses, missing)

    def kill_all(self) -> None:
        self._stopping.set()
        with self._lock:
            streams = list(self.streams)
        for s in streams:
            s.handle.kill()
        for s in streams:
            s.handle.wait(5)
