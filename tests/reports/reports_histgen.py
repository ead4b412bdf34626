"""Histories for the checker's tests: a builder for hand-crafted ones, and a
small simulated log that produces random valid histories with known anomalies.

The simulator is deliberately simple: one authoritative log per partition, a
few producers and consumers, re-seeks, fail/info outcomes, nemesis windows and
a final-read phase. Anomalies are injected as faults of the simulated log
(a write acknowledged but stored nowhere, a retry stored twice, a replica that
returns another value, a failed write that was stored anyway, a value nobody
sent, a consumer going backwards or skipping), each chosen so that it produces
exactly one anomaly instance of its type and nothing else. `expected` lists
them in the form the checkers report.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from reports.schema import arrow_schema
from reports.summary import ANOMALY_TYPES

HOLE = object()  # a log slot whose value is gone (acknowledged, then lost)


class HistoryBuilder:
    """Append events in order; `index` and `time` are filled in."""

    def __init__(self, step_ns: int = 1_000_000):
        self.events: list[dict] = []
        self.time = 0
        self.step = step_ns
        self.next_op = 0

    def add(self, **ev) -> dict:
        if "time" in ev:
            self.time = max(self.time, ev["time"])
        else:
            self.time += self.step
        ev = {"index": len(self.events), "time": self.time, **{k: v for k, v in ev.items() if k != "time"}}
        self.events.append(ev)
        return ev

    def op_id(self) -> int:
        self.next_op += 1
        return self.next_op - 1

    # invocations and completions, for interleaving
    def invoke_send(self, process, value, topic="t", partition=0, **kw):
        op = kw.pop("op", None)
        op = self.op_id() if op is None else op
        self.add(process=process, op=op, type="invoke", f="send", topic=topic,
                 partition=partition, value=value, **kw)
        return op

    def complete_send(self, op, process, value, outcome="ok", offset=None, topic="t", partition=0,
                      error=None, **kw):
        ev = dict(process=process, op=op, type=outcome, f="send", topic=topic, partition=partition,
                  value=value, **kw)
        if outcome == "ok":
            ev["offset"] = offset
        else:
            ev["error"] = error or ("NOT_ENOUGH_REPLICAS" if outcome == "fail" else "timeout")
        return self.add(**ev)

    def invoke_poll(self, process, position=None, topic="t", partition=0, final=None, **kw):
        op = self.op_id()
        ev = dict(process=process, op=op, type="invoke", f="poll", topic=topic, partition=partition,
                  offset=position, **kw)
        if final:
            ev["final"] = True
        self.add(**ev)
        return op

    def complete_poll(self, op, process, records=(), hw=None, outcome="ok", topic="t", partition=0,
                      final=None, error=None, **kw):
        ev = dict(process=process, op=op, type=outcome, f="poll", topic=topic, partition=partition, **kw)
        if outcome == "ok":
            ev["records"] = [list(r) for r in records]
            ev["high_watermark"] = hw if hw is not None else (max([o for o, _ in records], default=-1) + 1)
        else:
            ev["error"] = error or "timeout"
        if final:
            ev["final"] = True
        return self.add(**ev)

    # whole ops
    def send(self, process, value, outcome="ok", offset=None, topic="t", partition=0, error=None):
        op = self.invoke_send(process, value, topic, partition)
        self.complete_send(op, process, value, outcome, offset, topic, partition, error)
        return op

    def poll(self, process, records=(), position=None, hw=None, outcome="ok", topic="t", partition=0,
             final=False, error=None):
        op = self.invoke_poll(process, position, topic, partition, final=final)
        self.complete_poll(op, process, records, hw, outcome, topic, partition, final=final, error=error)
        return op

    def nemesis(self, fault, phase, targets=("broker-1",), detail=None):
        ev = dict(process=-1, op=self.op_id(), type="info", f="nemesis", fault=fault, phase=phase,
                  targets=list(targets))
        if detail is not None:
            ev["detail"] = detail
        return self.add(**ev)


def run_json(run="run-1", seed=1, idempotent=False, faults=("kill",), **extra) -> dict:
    meta = {
        "format": 1,
        "run": run,
        "seed": seed,
        "started_at": "2024-01-01T00:00:00Z",
        "cluster": {"brokers": 3, "replication_factor": 3, "broker_config": {}},
        "workload": {"client": "sim", "acks": "all", "idempotence": idempotent,
                     "topics": {"t": 1}},
        "faults": list(faults),
    }
    meta.update(extra)
    return meta


def write_run(run_dir, events, meta=None, fmt="jsonl", parts=1) -> Path:
    """Write a run directory: run.json and history.jsonl, or history/ part files."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps(meta or run_json(run=run_dir.name)))
    if fmt == "jsonl" and parts == 1:
        with open(run_dir / "history.jsonl", "w") as fh:
            for ev in events:
                fh.write(json.dumps(ev, separators=(",", ":")) + "\n")
        return run_dir
    d = run_dir / "history"
    d.mkdir(exist_ok=True)
    size = max(1, -(-len(events) // parts))
    chunks = [events[i : i + size] for i in range(0, len(events), size)] or [[]]
    for i, chunk in enumerate(chunks):
        if fmt == "jsonl":
            with open(d / f"part-{i:05d}.jsonl", "w") as fh:
                for ev in chunk:
                    fh.write(json.dumps(ev, separators=(",", ":")) + "\n")
        else:
            write_parquet(d / f"part-{i:05d}.parquet", chunk)
    return run_dir


def write_parquet(path, events) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema()
    cols = {name: [ev.get(name) for ev in events] for name in schema.names}
    pq.write_table(pa.table(cols, schema=schema), path)


# ---------------------------------------------------------------------------
# The simulated log

INJECTIONS = (
    "lost", "unseen", "duplicate", "inconsistent-offset", "aborted-read", "phantom-read",
    "nonmonotonic-poll", "poll-skip",
)


class SimulatedRun:
    """A random run of a replicated log, with chosen anomalies injected.

    `rng` drives every choice (hypothesis passes its own Random, so failures
    shrink and replay). After `simulate()`, `events` is the history and
    `expected` maps each anomaly type to the (topic, partition, key) tuples
    the checkers must report: key is the value (lost, unseen, duplicate,
    aborted-read, phantom-read: value and offset), the offset
    (inconsistent-offset) or (process, offset, previous) for poll anomalies.
    """

    def __init__(self, rng: random.Random, inject=(), n_ops=None, complete_final=True,
                 partitions=None, messy=False):
        self.rng = rng
        self.inject = list(inject)
        self.n_ops = n_ops if n_ops is not None else rng.randint(5, 60)
        self.complete_final = complete_final
        topics = ["t", "u"][: rng.randint(1, 2)]
        self.tps = partitions or [(t, p) for t in topics for p in range(rng.randint(1, 2))]
        self.messy = messy
        self.b = HistoryBuilder(step_ns=rng.choice([1_000_000, 50_000_000, 300_000_000]))
        self.log = {tp: [] for tp in self.tps}
        self.next_value = 1
        self.next_process = 0
        self.expected = {k: set() for k in INJECTIONS}
        self.unappended_info = {tp: [] for tp in self.tps}  # info sends never stored
        self.failed_stored = []
        self.producers = [self._new_process() for _ in range(rng.randint(1, 3))]
        self.consumers = {}  # process -> {tp: next position}
        for _ in range(rng.randint(1, 3)):
            self.consumers[self._new_process()] = {tp: 0 for tp in self.tps}
        self.open_faults = []
        self.done_injections = set()

    def _new_process(self):
        self.next_process += 1
        return self.next_process - 1

    def _value(self):
        self.next_value += 1
        return self.next_value - 1

    # -- producers ----------------------------------------------------------

    def _send(self, want=None):
        rng, b = self.rng, self.b
        tp = rng.choice(self.tps)
        i = rng.randrange(len(self.producers))
        proc = self.producers[i]
        value = self._value()
        op = b.invoke_send(proc, value, *tp)
        if rng.random() < 0.2:
            self._maybe_nemesis()
        log = self.log[tp]
        outcome = rng.choices(["ok", "fail", "info"], [8, 1, 1])[0]
        if want in ("lost", "duplicate"):
            outcome = "ok"
        if want == "aborted-read":
            outcome = "fail"
        if outcome == "ok":
            offset = len(log)
            if want == "lost":
                log.append(HOLE)
                self.expected["lost"].add((*tp, value))
            else:
                log.append(value)
                if want == "duplicate":
                    log.append(value)  # a retry stored twice
                    self.expected["duplicate"].add((*tp, value))
            b.complete_send(op, proc, value, "ok", offset, *tp)
        elif outcome == "fail":
            if want == "aborted-read":
                offset = len(log)
                log.append(value)  # refused, yet stored
                self.expected["aborted-read"].add((*tp, value, offset))
            b.complete_send(op, proc, value, "fail", None, *tp)
        else:
            if rng.random() < 0.5:
                log.append(value)
            else:
                self.unappended_info[tp].append(value)
            b.complete_send(op, proc, value, "info", None, *tp)
            self.producers[i] = self._new_process()  # retired after info

    # -- consumers ----------------------------------------------------------

    def _poll(self, want=None, consumer=None, tp=None, final=False):
        """One poll; returns False if the wanted injection was not possible here."""
        rng, b = self.rng, self.b
        proc = consumer if consumer is not None else rng.choice(list(self.consumers))
        state = self.consumers[proc]
        tp = tp or rng.choice(self.tps)
        log = self.log[tp]
        pos = state[tp]
        explicit = pos if rng.random() < 0.5 else None
        if not final and rng.random() < 0.15 and want is None:
            pos = explicit = rng.randint(0, len(log))  # a re-seek
        while pos < len(log) and log[pos] is HOLE:
            pos += 1
            explicit = pos  # the client seeks past a hole
        if explicit is None and pos != state[tp]:
            explicit = pos
        op = b.invoke_poll(proc, explicit, *tp, final=final)
        outcome = "ok" if final else rng.choices(["ok", "fail", "info"], [10, 1, 1])[0]
        if want is not None:
            outcome = "ok"
        if outcome != "ok":
            b.complete_poll(op, proc, outcome=outcome, topic=tp[0], partition=tp[1], final=final)
            if outcome == "info":
                del self.consumers[proc]
                self.consumers[self._new_process()] = {t: 0 for t in self.tps}
            else:
                state[tp] = pos
            return want is None
        k = rng.randint(0, 6) if not final else rng.randint(1, 6)
        records = []
        o = pos
        while o < len(log) and len(records) < k and log[o] is not HOLE:
            records.append([o, log[o]])
            o += 1
        ok_injected = want is None
        if want == "nonmonotonic-poll" and records:
            back = rng.randint(records[0][0], records[-1][0])
            prev = records[-1][0]
            records.append([back, log[back]])
            o = back + 1
            self.expected["nonmonotonic-poll"].add((*tp, proc, back, prev))
            ok_injected = True
        elif want == "poll-skip" and len(records) >= 3:
            gone = records.pop(1)
            self.expected["poll-skip"].add((*tp, proc, records[1][0], records[0][0]))
            assert gone[0] == records[0][0] + 1
            ok_injected = True
        elif want == "inconsistent-offset" and records and self.unappended_info[tp]:
            w2 = self.unappended_info[tp].pop()
            j = rng.randrange(len(records))
            records[j] = [records[j][0], w2]
            self.expected["inconsistent-offset"].add((*tp, records[j][0]))
            ok_injected = True
        b.complete_poll(op, proc, records, hw=len(log), topic=tp[0], partition=tp[1], final=final)
        state[tp] = o
        return ok_injected

    # -- nemesis ------------------------------------------------------------

    def _maybe_nemesis(self):
        rng = self.rng
        if self.open_faults and rng.random() < 0.5:
            fault, targets = self.open_faults.pop(rng.randrange(len(self.open_faults)))
            self.b.nemesis(fault, "stop", targets)
        else:
            fault = rng.choice(["kill", "partition", "pause"])
            targets = [f"broker-{rng.randint(1, 3)}"]
            self.b.nemesis(fault, "start", targets)
            self.open_faults.append((fault, targets))

    # -- the run --------------------------------------------------------------

    def simulate(self) -> "SimulatedRun":
        rng = self.rng
        plan = list(self.inject)
        late = [k for k in plan if k == "unseen"]
        plan = [k for k in plan if k != "unseen"]
        # Injections that need records to exist go after some sends.
        slots = sorted(rng.sample(range(self.n_ops), min(len(plan), self.n_ops))) if plan else []
        for step in range(self.n_ops):
            want = None
            if plan and slots and step >= slots[0]:
                want = plan[0]
            if want is None:
                r = rng.random()
                if r < 0.45:
                    self._send()
                elif r < 0.95:
                    self._poll()
                else:
                    self._maybe_nemesis()
                continue
            if self._inject(want):
                plan.pop(0)
                slots.pop(0)
        # Injections not placed yet (e.g. nothing to read then): keep trying.
        tries = 0
        while plan and tries < 200:
            tries += 1
            if not self._inject(plan[0]):
                self._send()
                continue
            plan.pop(0)
        assert not plan, f"could not inject {plan}"
        # A partition never ends with a hole, so final reads read past every hole.
        for tp in self.tps:
            if self.log[tp] and self.log[tp][-1] is HOLE:
                self._send_to(tp)
        if not self.complete_final:
            self._send_to(self.tps[0])  # written, and its final read will not happen
        # Writes acknowledged at the end of a partition, then truncated away.
        beyond = {tp: 0 for tp in self.tps}
        for _ in late:
            tp = rng.choice(self.tps)
            proc = self.producers[0]
            value = self._value()
            op = self.b.invoke_send(proc, value, *tp)
            self.b.complete_send(op, proc, value, "ok", len(self.log[tp]) + beyond[tp], *tp)
            beyond[tp] += 1
            self.expected["unseen"].add((*tp, value))
        while self.open_faults:
            fault, targets = self.open_faults.pop()
            self.b.nemesis(fault, "stop", targets)
        self._final_reads()
        return self

    def _send_to(self, tp):
        proc = self.producers[0]
        value = self._value()
        op = self.b.invoke_send(proc, value, *tp)
        self.b.complete_send(op, proc, value, "ok", len(self.log[tp]), *tp)
        self.log[tp].append(value)

    def _inject(self, want) -> bool:
        if want in ("lost", "duplicate", "aborted-read"):
            self._send(want)
            return True
        if want == "phantom-read":
            tp = self.rng.choice(self.tps)
            value = -self._value()  # nobody sends negative values
            offset = len(self.log[tp])
            self.log[tp].append(value)
            self.expected["phantom-read"].add((*tp, value, offset))
            return True
        if want == "inconsistent-offset":
            tp = self.rng.choice(self.tps)
            if not self.unappended_info[tp]:
                # make one: an info send the broker never stored
                proc = self.producers[0]
                value = self._value()
                op = self.b.invoke_send(proc, value, *tp)
                self.b.complete_send(op, proc, value, "info", None, *tp)
                self.producers[0] = self._new_process()
                self.unappended_info[tp].append(value)
            if not any(v is not HOLE for v in self.log[tp]):
                self._send_to(tp)
            return self._poll_at_start(want, tp)
        if want in ("nonmonotonic-poll", "poll-skip"):
            tp = self.rng.choice(self.tps)
            while sum(1 for v in self.log[tp] if v is not HOLE) < 4:
                self._send_to(tp)
            return self._poll_at_start(want, tp)
        raise ValueError(want)

    def _poll_at_start(self, want, tp) -> bool:
        """A fresh consumer reads tp, from the start of its longest run without holes."""
        proc = self._new_process()
        self.consumers[proc] = {t: 0 for t in self.tps}
        log, best, start = self.log[tp], (0, 0), None
        for i, v in enumerate(log + [HOLE]):
            if v is HOLE:
                if start is not None and i - start > best[1] - best[0]:
                    best = (start, i)
                start = None
            elif start is None:
                start = i
        self.consumers[proc][tp] = best[0]
        return self._poll(want, consumer=proc, tp=tp)

    def _final_reads(self):
        proc = self._new_process()
        self.consumers[proc] = {tp: 0 for tp in self.tps}
        for i, tp in enumerate(self.tps):
            log = self.log[tp]
            stop_early = not self.complete_final and i == 0
            if stop_early:
                continue  # this partition's final read times out: the run is incomplete
            guard = 0
            while self.consumers[proc][tp] < len(log):
                guard += 1
                assert guard < 10_000
                self._poll(consumer=proc, tp=tp, final=True)
            if not log:
                self._poll(consumer=proc, tp=tp, final=True)  # an empty partition: hw 0

    def mess_up(self, n: int = 3) -> "SimulatedRun":
        """Random damage to some reads (for comparing checkers, not for expectations)."""
        rng = self.rng
        polls = [e for e in self.b.events if e["f"] == "poll" and e["type"] == "ok" and e["records"]]
        for _ in range(min(n, len(polls))):
            e = rng.choice(polls)
            recs = e["records"]
            how = rng.choice(["swap", "repeat", "drop", "value", "offset"])
            i = rng.randrange(len(recs))
            if how == "swap" and len(recs) > 1:
                j = rng.randrange(len(recs))
                recs[i], recs[j] = recs[j], recs[i]
            elif how == "repeat":
                recs.insert(i, list(recs[i]))
            elif how == "drop" and len(recs) > 1:
                recs.pop(i)
            elif how == "value":
                recs[i] = [recs[i][0], rng.randint(-3, self.next_value + 3)]
            elif how == "offset":
                recs[i] = [max(0, recs[i][0] + rng.randint(-3, 3)), recs[i][1]]
        return self

    @property
    def events(self):
        return self.b.events

    # -- expected, as the checkers spell it ---------------------------------

    def expected_keys(self) -> dict:
        return {k: sorted(v) for k, v in self.expected.items()}


def reported_keys(summary: dict) -> dict:
    """The anomalies of a summary, reduced to the keys `SimulatedRun.expected` uses."""
    a = summary["anomalies"]
    out = {
        "lost": sorted((x["topic"], x["partition"], x["value"]) for x in a["lost"]),
        "unseen": sorted((x["topic"], x["partition"], x["value"]) for x in a["unseen"]),
        "duplicate": sorted((x["topic"], x["partition"], x["value"]) for x in a["duplicate"]),
        "inconsistent-offset": sorted((x["topic"], x["partition"], x["offset"]) for x in a["inconsistent-offset"]),
        "aborted-read": sorted((x["topic"], x["partition"], x["value"], x["offset"]) for x in a["aborted-read"]),
        "phantom-read": sorted((x["topic"], x["partition"], x["value"], x["offset"]) for x in a["phantom-read"]),
        "nonmonotonic-poll": sorted((x["topic"], x["partition"], x["process"], x["offset"], x["previous"])
                                    for x in a["nonmonotonic-poll"]),
        "poll-skip": sorted((x["topic"], x["partition"], x["process"], x["offset"], x["previous"])
                            for x in a["poll-skip"]),
    }
    return out


def only(summary, **expected):
    """All anomaly types not named are empty; the named ones have exactly these keys."""
    for kind in ANOMALY_TYPES:
        got = summary["anomalies"][kind]
        want = expected.get(kind.replace("-", "_"), [])
        assert len(got) == len(want), (kind, got)
        for g, w in zip(got, want):
            for k, v in w.items():
                assert g[k] == v, (kind, k, g)
