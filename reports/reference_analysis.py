"""The reference checker's analysis of one run: anomalies.md in plain Python.

`analyze` reads the events once, in `index` order, into an `Analysis`: dicts
keyed the way the definitions speak (per topic-partition: value -> where it
was read, offset -> which values were seen there; per process and
partition: the last offset returned and whether it re-seeked), the counts
and latencies, and the observations and group events beside the history.
Then one pure function per anomaly type, named after it (`lost`,
`poll_skip`, ...; reports/registry.py lists them), turns the Analysis into
that type's instances. It exists to be obviously right, not fast; the Spark
checker (reports/spark_analysis.py) must agree with it exactly.

Witnesses: every instance names the event that first showed it (`index`,
`time`, `op`, `process`); "first" is the smallest completion index, ties
broken by value or offset. Fault windows count an instance by that time.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from reports import invariants, observations, transactions
from reports.figures import (CLIENT_FUNCTIONS, NS_PER_SECOND, PERCENTILES, empty_counts,
                             fault_windows, nearest_rank)
from reports.groups import commit_regressions, final_commits, read_groups, resume_candidates
from reports.incarnations import Incarnations, split
from reports.observations import Observed, read_incarnations, read_observations
from reports.readers import RunInput, iter_judged_events
from reports.transactions import ABORTED, COMMITTED, READ_COMMITTED


@dataclass
class _Op:
    """An invocation joined with its completion (None while pending)."""

    f: str
    op: int
    process: int
    topic: str
    partition: int
    value: int | None = None
    position: int | None = None  # poll invocation: where it fetches from
    outcome: str = "pending"
    ack: int | None = None  # ok send: acknowledged offset
    inv_index: int | None = None
    inv_time: int | None = None
    comp_index: int | None = None
    comp_time: int | None = None
    final: bool = False
    high_watermark: int | None = None
    log_start_offset: int | None = None
    records: list = field(default_factory=list)
    error: str | None = None
    node: str | None = None  # send: the producer instance
    group: str | None = None  # poll: the consumer group of its member
    txn: str | None = None  # send, poll, txn: its transaction
    intent: str | None = None  # txn: commit or abort
    isolation: str | None = None  # poll
    source: dict | None = None  # send of a pipeline: the input it was made from


@dataclass
class _Txn:
    """One transaction of a transactional run: its outcome, when its commit
    was first invoked, its last event's witness and its sends (all outcomes),
    in the order they were invoked."""

    status: str
    commit_invoked: int | None
    commit_time: int | None     # the `time` of that invocation
    end: tuple
    sends: list


@dataclass
class _Seq:
    """One process reading one partition: the last offset it returned, and a pending re-seek."""

    last: int | None = None
    last_op: int | None = None
    reseeked: bool = False


@dataclass
class _Partition:
    sends: int = 0
    acknowledged: int = 0
    polls: int = 0
    records: int = 0
    max_ack_offset: int | None = None
    max_read_offset: int | None = None
    final_polls: int = 0
    final_complete: bool = False
    final_high_watermark: int | None = None


def _max(a, b):
    return b if a is None else (a if b is None else max(a, b))


@dataclass
class Analysis:
    """What one pass over a run found; every anomaly function reads only this.

    tp is (topic, partition); a witness is (index, time, op, process)."""

    run: RunInput
    weak: set                     # producer instances with acks 0 or 1 (run.json workload.clients)
    idempotent_nodes: set         # idempotent producer instances
    incarnations: Incarnations    # topics deleted and created again
    observed: Observed            # observations.jsonl
    groups: list | None           # groups.jsonl's events (None: no file)
    events: int
    end_time: int
    sends: dict                   # tp -> value -> its send _Op (pending ones too)
    reads: dict                   # tp -> value -> offset -> first read's witness
    at_offset: dict               # tp -> offset -> value -> first witness (read or acks=all ack)
    acked_at: dict                # tp -> offset -> values acknowledged there
    nonmonotonic: list            # nonmonotonic-poll instances, in the pass
    skip_candidates: list         # gaps in a process's reads, to verify as poll-skip
    uncommitted: list             # read-uncommitted instances, in the pass
    exact_polls: int              # ok polls that carried log_start_offset
    idem_sends: dict              # (topic, partition, node) of an idempotent producer -> its ok sends
    group_reads: dict             # (group, topic, partition) -> values its members' polls returned
    final_at: dict                # tp -> value -> the lowest offset final reads returned it at
    txns: dict                    # txn -> _Txn (a transactional run's; else empty)
    rc_reads: dict                # tp -> value -> offset -> first read_committed read's witness
    pipeline: dict | None         # run.json workload.pipeline of a transactional run
    partitions: list              # summary.json's final_reads.partitions
    max_read: dict                # tp -> the highest offset any read returned (None: none)
    complete: dict                # tp -> final high watermark, of partitions whose final reads completed
    counts: dict                  # summary.json's counts by outcome
    latencies: dict               # function -> latencies of its ok ops
    per_second: dict              # second -> outcomes and latencies completed in it
    completions: list             # (time, f, outcome, error) of every completion
    errors: dict                  # function -> fail|info -> error -> count
    nemesis: list                 # the nemesis events


class _Pass:
    """The one pass over the events that fills an Analysis."""

    def __init__(self, run: RunInput):
        self.run = run
        self.events = 0
        self.end_time = 0
        self.pending: dict[int, _Op] = {}
        self.partitions: dict[tuple, _Partition] = defaultdict(_Partition)
        self.sends: dict[tuple, dict[int, _Op]] = defaultdict(dict)
        self.reads: dict[tuple, dict[int, dict[int, tuple]]] = defaultdict(dict)
        self.at_offset: dict[tuple, dict[int, dict[int, tuple]]] = defaultdict(dict)
        self.acked_at: dict[tuple, dict[int, set]] = defaultdict(lambda: defaultdict(set))
        self.seqs: dict[tuple, _Seq] = defaultdict(_Seq)
        self.nonmonotonic: list[dict] = []
        self.skip_candidates: list[dict] = []
        self.counts = empty_counts()
        self.latencies = {f: [] for f in CLIENT_FUNCTIONS}
        self.per_second: dict[int, dict] = {}
        self.completions: list[tuple] = []
        self.errors = {f: {"fail": {}, "info": {}} for f in CLIENT_FUNCTIONS}
        self.nemesis: list[dict] = []
        self.weak = run.weak_nodes()
        self.idempotent_nodes = run.idempotent_nodes()
        self.exact_polls = 0
        self.uncommitted: list[dict] = []
        self.idem_sends: dict[tuple, list[_Op]] = defaultdict(list)
        self.group_reads: dict[tuple, set] = defaultdict(set)
        self.final_at: dict[tuple, dict[int, int]] = defaultdict(dict)
        self.transactional = transactions.transactional(run.run_json)
        self.txn_ops: dict[str, list[_Op]] = defaultdict(list)    # txn -> its txn ops
        self.txn_sends: dict[str, list[_Op]] = defaultdict(list)  # txn -> its sends
        self.rc_reads: dict[tuple, dict[int, dict[int, tuple]]] = defaultdict(dict)
        # topics deleted and created again: their ops come renamed by incarnation
        self.incarnations = read_incarnations(run.run_dir)

    def feed(self, ev: dict) -> None:
        self.events += 1
        self.end_time = max(self.end_time, ev["time"])
        if ev["f"] == "nemesis":
            self.nemesis.append(ev)
            return
        tp = (ev["topic"], ev["partition"])
        if ev["type"] == "invoke":
            op = _Op(ev["f"], ev["op"], ev["process"], *tp, value=ev["value"],
                     inv_index=ev["index"], inv_time=ev["time"], final=bool(ev["final"]),
                     node=ev["node"] if ev["f"] == "send" else None, txn=ev["txn"],
                     intent=ev["intent"], isolation=ev["isolation"], source=ev["source"])
            if ev["f"] == "poll":
                op.position, op.group = ev["offset"], ev["group"]
                self._poll_invoked(tp, op)
            self.pending[ev["op"]] = op
            return
        op = self.pending.pop(ev["op"], None)
        if op is None:  # a completion without invocation (the validator flags it)
            op = _Op(ev["f"], ev["op"], ev["process"], *tp, value=ev["value"])
        if op.value is None:
            op.value = ev["value"]
        op.outcome = ev["type"]
        op.comp_index, op.comp_time = ev["index"], ev["time"]
        op.final = op.final or bool(ev["final"])
        op.error = ev["error"]
        op.group = op.group or ev["group"]
        for name in ("txn", "intent", "isolation", "source"):
            setattr(op, name, getattr(op, name) or ev[name])
        if op.f == "txn":  # (not a send or poll: no counts, no partition)
            self.txn_ops[op.txn].append(op)
            return
        if ev["type"] == "ok":
            if ev["f"] == "send":
                op.ack = ev["offset"]
            else:
                op.high_watermark = ev["high_watermark"]
                op.log_start_offset = ev["log_start_offset"]
                op.records = ev["records"]
        self._completed(op, ev)

    def _poll_invoked(self, tp, op: _Op) -> None:
        """A poll invocation whose position is not right after the last returned offset is a re-seek."""
        seq = self.seqs[(tp, op.process)]
        if op.position is not None and seq.last is not None and op.position != seq.last + 1:
            seq.reseeked = True

    def _completed(self, op: _Op, ev: dict) -> None:
        tp = (op.topic, op.partition)
        self._count(op)
        self._partition_update(op)
        if op.f == "send":
            self._send_done(tp, op)
        else:
            self._poll_done(tp, op, ev)

    def _count(self, op: _Op) -> None:
        self.counts[op.f][op.outcome] += 1
        if op.outcome == "pending":
            return
        sec = op.comp_time // NS_PER_SECOND
        row = self.per_second.setdefault(sec, {"ok": defaultdict(int), "lat": defaultdict(list)})
        row["ok"][(op.f, op.outcome)] += 1
        self.completions.append((op.comp_time, op.f, op.outcome, op.error))
        if op.outcome == "ok":
            if op.inv_time is not None:
                lat = op.comp_time - op.inv_time
                self.latencies[op.f].append(lat)
                row["lat"][op.f].append(lat)
        else:
            errs = self.errors[op.f][op.outcome]
            key = op.error if op.error is not None else "unknown"
            errs[key] = errs.get(key, 0) + 1

    def _send_done(self, tp, op: _Op) -> None:
        self.sends[tp][op.value] = op
        if op.txn is not None:
            self.txn_sends[op.txn].append(op)
        if op.outcome == "ok" and op.node not in self.weak:
            # (an acks=1 acknowledgement binds no offset: the leader alone had it)
            self._seen_at(tp, op.ack, op.value, (op.comp_index, op.comp_time, op.op, op.process))
            self.acked_at[tp][op.ack].add(op.value)
        if op.outcome == "ok" and op.node in self.idempotent_nodes:
            self.idem_sends[(*tp, op.node)].append(op)

    def _seen_at(self, tp, offset, value, witness) -> None:
        values = self.at_offset[tp].setdefault(offset, {})
        if value not in values or witness < values[value]:
            values[value] = witness

    def _poll_done(self, tp, op: _Op, ev: dict) -> None:
        if op.outcome != "ok":
            return
        seq = self.seqs[(tp, ev["process"])]
        witness = (op.comp_index, op.comp_time, op.op, ev["process"])
        exact = op.log_start_offset is not None
        self.exact_polls += exact
        for offset, value in op.records:
            if exact and not (op.log_start_offset <= offset < op.high_watermark):
                self.uncommitted.append({
                    "topic": tp[0], "partition": tp[1], "value": value, "offset": offset,
                    "high_watermark": op.high_watermark, "log_start_offset": op.log_start_offset,
                    "process": ev["process"], "op": op.op, "index": op.comp_index,
                    "time": op.comp_time})
            self._check_sequence(tp, ev["process"], seq, offset, op)
            if op.final:
                at = self.final_at[tp]
                at[value] = min(offset, at.get(value, offset))
            elif op.group is not None:
                self.group_reads[(op.group, *tp)].add(value)
            _first(self.reads[tp], value, offset, witness)
            if self.transactional and (op.isolation == READ_COMMITTED or op.final):
                _first(self.rc_reads[tp], value, offset, witness)
            self._seen_at(tp, offset, value, witness)

    def _check_sequence(self, tp, process, seq: _Seq, offset, op: _Op) -> None:
        """nonmonotonic-poll and poll-skip candidates: compare with the previous returned offset."""
        if seq.last is not None and not seq.reseeked:
            inst = {
                "topic": tp[0], "partition": tp[1], "process": process,
                "offset": offset, "previous": seq.last, "op": op.op,
                "previous_op": seq.last_op, "index": op.comp_index, "time": op.comp_time,
            }
            if offset <= seq.last:
                self.nonmonotonic.append(inst)
            elif offset > seq.last + 1:
                self.skip_candidates.append(inst)
        seq.last, seq.last_op, seq.reseeked = offset, op.op, False

    def _partition_update(self, op: _Op) -> None:
        p = self.partitions[(op.topic, op.partition)]
        if op.f == "send":
            p.sends += 1
            if op.outcome == "ok":
                p.acknowledged += 1
                p.max_ack_offset = _max(p.max_ack_offset, op.ack)
            return
        p.polls += 1
        if op.outcome != "ok":
            return
        p.records += len(op.records)
        top = max((o for o, _ in op.records), default=None)
        p.max_read_offset = _max(p.max_read_offset, top)
        if op.final:
            p.final_polls += 1
            p.final_high_watermark = _max(p.final_high_watermark, op.high_watermark)
            if _final_poll_complete(op.records, op.high_watermark, op.position):
                p.final_complete = True

    def finish(self) -> Analysis:
        for op in self.pending.values():  # invoked, never completed: outcome unknown
            if op.f == "txn":
                self.txn_ops[op.txn].append(op)
                continue
            self._count(op)
            self._partition_update(op)
            if op.f == "send":
                self.sends[(op.topic, op.partition)].setdefault(op.value, op)
                if op.txn is not None:
                    self.txn_sends[op.txn].append(op)
        partitions = [
            {"topic": t, "partition": p, **stats.__dict__}
            | ({"deleted": True} if self.incarnations.is_deleted(t) else {})
            for (t, p), stats in sorted(self.partitions.items())
        ]
        run = self.run
        return Analysis(
            run=run, weak=self.weak, idempotent_nodes=self.idempotent_nodes,
            incarnations=self.incarnations,
            observed=read_observations(run.run_dir, run.run_json.get("checks")),
            groups=read_groups(run.run_dir), events=self.events, end_time=self.end_time,
            sends=self.sends, reads=self.reads, at_offset=self.at_offset, acked_at=self.acked_at,
            nonmonotonic=self.nonmonotonic, skip_candidates=self.skip_candidates,
            uncommitted=self.uncommitted, exact_polls=self.exact_polls, idem_sends=self.idem_sends,
            group_reads=self.group_reads, final_at=self.final_at,
            txns=self._txns() if self.transactional else {}, rc_reads=self.rc_reads,
            pipeline=transactions.pipeline(run.run_json), partitions=partitions,
            max_read={(p["topic"], p["partition"]): p["max_read_offset"] for p in partitions},
            complete={(p["topic"], p["partition"]): p["final_high_watermark"]
                      for p in partitions if p["final_complete"]},
            counts=self.counts, latencies=self.latencies, per_second=self.per_second,
            completions=self.completions, errors=self.errors, nemesis=self.nemesis)

    def _txns(self) -> dict[str, _Txn]:
        """Each transaction that sent something: its outcome (transactions.py), the
        first invocation of its commit, the witness of its last event (its txn
        op's completion, as a rule) and its sends in invocation order."""
        out = {}
        for txn, sends in self.txn_sends.items():
            ends = self.txn_ops.get(txn, [])
            last = max(sends + ends, key=_last_index)
            out[txn] = _Txn(
                status=transactions.outcome([(o.intent, o.outcome) for o in ends]),
                commit_invoked=min((o.inv_index for o in ends
                                    if o.intent == transactions.COMMIT and o.inv_index is not None),
                                   default=None),
                commit_time=min((o.inv_time for o in ends
                                 if o.intent == transactions.COMMIT and o.inv_index is not None),
                                default=None),
                end=(_last_index(last), last.comp_time if last.comp_index is not None else last.inv_time,
                     last.op, last.process),
                sends=sorted(sends, key=_invoked_order))
        return out


def _last_index(op: _Op) -> int:
    """The index of an op's last event."""
    return op.comp_index if op.comp_index is not None else op.inv_index


def _invoked_order(op: _Op) -> int:
    return op.inv_index if op.inv_index is not None else op.comp_index


def _first(reads: dict, value, offset, witness) -> None:
    """Keep the first witness of (value, offset) in reads (value -> offset -> witness)."""
    offsets = reads.setdefault(value, {})
    if offset not in offsets:
        offsets[offset] = witness


def _final_poll_complete(records, high_watermark, position) -> bool:
    """A final poll that returned records up to high_watermark - 1, or found the partition empty."""
    if high_watermark is None:
        return False
    if records:
        return max(o for o, _ in records) >= high_watermark - 1
    return high_watermark == 0 or position == high_watermark


def analyze(run: RunInput) -> Analysis:
    """The one pass over a run's history (raises HistoryError on bad input)."""
    p = _Pass(run)
    for ev in iter_judged_events(run, p.incarnations):
        p.feed(ev)
    return p.finish()


# -- one function per anomaly type: Analysis -> its instances (any order) ----------------------

def _unread_acks(a: Analysis):
    """(tp, op) of each ok send no read returned."""
    for tp, sends in a.sends.items():
        if a.incarnations.is_deleted(tp[0]):
            # Never read, then gone with its topic (no final reads to miss
            # it): not lost; another value at its offset is still
            # inconsistent-offset, a read that skipped it poll-skip.
            continue
        read = a.reads.get(tp, {})
        for value, op in sends.items():
            if op.outcome == "ok" and value not in read and _may_be_visible(a, op):
                yield tp, value, op


def _may_be_visible(a: Analysis, op: _Op) -> bool:
    """Not the send of a transaction that aborted or whose outcome is unknown:
    only committed transactions' values must be read."""
    txn = a.txns.get(op.txn)
    return txn is None or txn.status == COMMITTED


def _unread(tp, value, op: _Op) -> dict:
    return {"topic": tp[0], "partition": tp[1], "value": value, "offset": op.ack,
            "process": op.process, "op": op.op, "index": op.comp_index, "time": op.comp_time}


def _read_past(a: Analysis, tp, op: _Op) -> bool:
    """Reads of the partition returned some offset at or past the send's acknowledged one."""
    top = a.max_read.get(tp)
    return top is not None and top >= op.ack


def lost(a: Analysis) -> list[dict]:
    return [_unread(tp, v, op) for tp, v, op in _unread_acks(a)
            if op.node not in a.weak and _read_past(a, tp, op)]


def unseen(a: Analysis) -> list[dict]:
    return [_unread(tp, v, op) for tp, v, op in _unread_acks(a)
            if op.node not in a.weak and not _read_past(a, tp, op)]


def lost_unreplicated(a: Analysis) -> list[dict]:
    return [_unread(tp, v, op) for tp, v, op in _unread_acks(a) if op.node in a.weak]


def duplicate(a: Analysis) -> list[dict]:
    out = []
    for tp, values in a.reads.items():
        sends = a.sends.get(tp, {})
        for value, offsets in values.items():
            if len(offsets) < 2:
                continue
            send = sends.get(value)
            # witness: the first read at the second offset to be seen
            idx, time, op, process = sorted((w, o) for o, w in offsets.items())[1][0]
            out.append({
                "topic": tp[0], "partition": tp[1], "value": value, "offsets": sorted(offsets),
                "index": idx, "time": time, "op": op, "process": process,
                "send_op": None if send is None else send.op,
                "idempotent": send is not None and send.node in a.idempotent_nodes,
            })
    observations.writers_of_duplicates(a.observed, out)
    return out


def _sent_to_another_incarnation(a: Analysis, tp, value) -> tuple[str, _Op | None]:
    """The send of `value` to another incarnation of tp's topic
    (reports/incarnations.py): its incarnation's name and op, or (tp's
    name, None) when there is none."""
    base = split(tp[0])[0]
    for (topic, partition), sends in a.sends.items():
        if partition == tp[1] and topic != tp[0] and split(topic)[0] == base and value in sends:
            return topic, sends[value]
    return tp[0], None


def _unexplained_reads(a: Analysis, kind: str) -> list[dict]:
    """Instances of `kind`, one of phantom-read, aborted-read and
    resurrected: each offset a value was read at, when no ok send of its
    partition explains it."""
    out = []
    for tp, values in a.reads.items():
        sends = a.sends.get(tp, {})
        for value, offsets in values.items():
            send, sent_to = sends.get(value), tp[0]
            if send is None and a.incarnations:
                sent_to, send = _sent_to_another_incarnation(a, tp, value)
            found = ("phantom-read" if send is None else "aborted-read" if send.outcome == "fail"
                     else "resurrected" if sent_to != tp[0] and send.outcome == "ok"
                     and split(sent_to)[1] < split(tp[0])[1] else None)
            if found != kind:
                continue
            for offset, (idx, time, op, process) in offsets.items():
                inst = {"topic": tp[0], "partition": tp[1], "value": value, "offset": offset,
                        "index": idx, "time": time, "op": op, "process": process}
                if kind != "phantom-read":
                    inst["send_op"] = send.op
                if kind == "resurrected":
                    inst["acknowledged_in"] = sent_to
                out.append(inst)
    return out


def aborted_read(a: Analysis) -> list[dict]:
    return _unexplained_reads(a, "aborted-read")


def phantom_read(a: Analysis) -> list[dict]:
    return _unexplained_reads(a, "phantom-read")


def resurrected(a: Analysis) -> list[dict]:
    return _unexplained_reads(a, "resurrected")


def inconsistent_offset(a: Analysis) -> list[dict]:
    out = []
    for tp, offsets in a.at_offset.items():
        for offset, values in offsets.items():
            if len(values) >= 2:
                (idx, time, op, process), _ = sorted((w, v) for v, w in values.items())[1]
                out.append({
                    "topic": tp[0], "partition": tp[1], "offset": offset, "values": sorted(values),
                    "acknowledged": sorted(a.acked_at[tp].get(offset, ())),
                    "index": idx, "time": time, "op": op, "process": process,
                })
    return out


def nonmonotonic_poll(a: Analysis) -> list[dict]:
    return list(a.nonmonotonic)


def poll_skip(a: Analysis) -> list[dict]:
    """A gap a < b is a poll-skip when some read or ack shows a value strictly
    between; in a transactional run, not one of a transaction that did not
    commit (a read_committed consumer skips those, and markers hold none)."""
    hidden = {(tp, value) for tp, sends in a.sends.items() for value, op in sends.items()
              if not _may_be_visible(a, op)}
    known = {tp: sorted(o for o, values in offsets.items()
                        if any((tp, v) not in hidden for v in values))
             for tp, offsets in a.at_offset.items()}
    out = []
    for c in a.skip_candidates:
        offs = known.get((c["topic"], c["partition"]), [])
        i = bisect.bisect_right(offs, c["previous"])
        if i < len(offs) and offs[i] < c["offset"]:
            out.append({**c, "skipped": offs[i]})
    return out


def read_uncommitted(a: Analysis) -> list[dict]:
    return list(a.uncommitted)


def truncated_read(a: Analysis) -> list[dict]:
    return [{"topic": tp[0], "partition": tp[1], "value": value, "offset": offset,
             "final_high_watermark": a.complete[tp], "index": w[0], "time": w[1], "op": w[2],
             "process": w[3]}
            for tp, values in a.reads.items() if a.complete.get(tp) is not None
            for value, offsets in values.items() for offset, w in offsets.items()
            if offset >= a.complete[tp]]


def nonmonotonic_send(a: Analysis) -> list[dict]:
    """An idempotent producer's acknowledged sends to a partition, in the
    order it sent them, land at increasing offsets."""
    out = []
    for (topic, partition, node), ops in a.idem_sends.items():
        ops = sorted(ops, key=lambda o: o.inv_index)
        for x, y in zip(ops, ops[1:]):
            if y.ack < x.ack:
                out.append({"topic": topic, "partition": partition, "node": node,
                            "value": y.value, "offset": y.ack, "previous_value": x.value,
                            "previous_offset": x.ack, "process": y.process, "op": y.op,
                            "index": y.comp_index, "time": y.comp_time})
    return out


def ack_below_min_isr(a: Analysis) -> list[dict]:
    """acks=all sends acknowledged while the ISR was below min.insync.replicas."""
    min_isr = a.run.min_isr()
    margin = int(a.run.check_bound("ack_margin_s", 5.0) * NS_PER_SECOND)
    spans = defaultdict(list)
    for sp in observations.below_min_isr(a.observed, min_isr):
        spans[(sp["topic"], sp["partition"])].append(sp)
    out = []
    for tp, sends in a.sends.items():
        for op in sends.values():
            if op.outcome != "ok" or op.node in a.weak or op.inv_time is None:
                continue
            for sp in spans.get(tp, ()):
                if sp["start"] + margin <= op.inv_time and op.comp_time <= sp["end"]:
                    out.append({"topic": tp[0], "partition": tp[1], "value": op.value,
                                "offset": op.ack, "isr": sp["isr"], "min_isr": min_isr,
                                "invoked": op.inv_time, "process": op.process, "op": op.op,
                                "index": op.comp_index, "time": op.comp_time})
                    break
    return out


def replica_divergence(a: Analysis) -> list[dict]:
    return observations.replica_divergence(a.observed, a.complete)


def isr_invariant(a: Analysis) -> list[dict]:
    return observations.isr_invariant(a.observed)


def epoch_regression(a: Analysis) -> list[dict]:
    return observations.epoch_regression(a.observed)


def leaderless(a: Analysis) -> list[dict]:
    return observations.leaderless(a.observed)


def stale_metadata(a: Analysis) -> list[dict]:
    return observations.stale_metadata(a.observed)


def unrecovered(a: Analysis) -> list[dict]:
    """The cluster (observations.py), and partitions whose sends, invoked
    after the cluster recovered and the clients' grace, all failed."""
    out = observations.unrecovered_cluster(a.observed)
    at = observations.recovered_at(a.observed)
    if at is None:
        return out
    after = at + int(a.run.check_bound("recovery_grace_s", 5.0) * NS_PER_SECOND)
    per_tp: dict[tuple, list[_Op]] = defaultdict(list)
    for tp, sends in a.sends.items():
        for op in sends.values():
            if op.inv_time is not None and op.inv_time >= after and op.outcome != "pending":
                per_tp[tp].append(op)
    for tp, ops in sorted(per_tp.items()):
        if any(op.outcome == "ok" for op in ops):
            continue
        errors: dict[str, int] = {}
        for op in ops:
            key = op.error if op.error is not None else "unknown"
            errors[key] = errors.get(key, 0) + 1
        out.append({"topic": tp[0], "partition": tp[1], "kind": "partition", "time": after,
                    "failed": len(ops), "errors": errors})
    return out


def promises(a: Analysis) -> invariants.Promises:
    """What the run's configuration promises (reports/invariants.py)."""
    return invariants.Promises.of(a.run.run_json, a.nemesis, a.end_time)


def _invariant(name: str):
    """The reference function of invariant oracle `name`: Analysis -> its instances."""
    def find(a: Analysis) -> list[dict]:
        return invariants.found(name, a.observed, promises(a))
    find.__name__ = find.__qualname__ = name.replace("-", "_")
    return find


isr_behind_hw = _invariant("isr-behind-hw")
hw_regression = _invariant("hw-regression")
committed_divergence = _invariant("committed-divergence")
unclean_election = _invariant("unclean-election")
dead_isr_member = _invariant("dead-isr-member")
reassignment_unsynced = _invariant("reassignment-unsynced")


def commit_regressed(a: Analysis) -> list[dict]:
    return commit_regressions(a.groups or [])


def resume_past_commit(a: Analysis) -> list[dict]:
    """The candidates of groups.jsonl (reports/groups.py) with an offset in
    [committed, position) that holds a value no poll of the group returned."""
    out = []
    for c in resume_candidates(a.groups or []):
        tp = (c["topic"], c["partition"])
        polled = a.group_reads.get((c["group"], *tp), set())
        unpolled = [o for o, values in a.at_offset.get(tp, {}).items()
                    if c["committed"] <= o < c["offset"] and not set(values) <= polled]
        if unpolled:
            out.append({**c, "skipped": min(unpolled)})
    return out


def group_skipped(a: Analysis) -> list[dict]:
    """acks=all values the complete final reads returned below a group's
    final commit that no poll of the group returned."""
    out = []
    for fc in final_commits(a.groups or []):
        tp = (fc["topic"], fc["partition"])
        if a.complete.get(tp) is None:
            continue  # (without complete final reads, a missing record is lost/unseen)
        polled = a.group_reads.get((fc["group"], *tp), set())
        final_at = a.final_at.get(tp, {})
        for value, op in a.sends.get(tp, {}).items():
            at = final_at.get(value)
            if (op.outcome == "ok" and op.node not in a.weak and at is not None
                    and at < fc["offset"] and value not in polled):
                out.append({"topic": tp[0], "partition": tp[1], "group": fc["group"],
                            "value": value, "offset": at, "committed": fc["offset"],
                            "index": fc["index"], "time": fc["time"]})
    return out


# -- transactions (reports/transactions.py): only a transactional run has any -----------------

def _txn_reads(a: Analysis):
    """(instance, transaction) per (value, offset) a read at read_committed
    returned, of a value sent in a transaction, with the first such read."""
    for tp, values in a.rc_reads.items():
        sends = a.sends.get(tp, {})
        for value, offsets in values.items():
            send = sends.get(value)
            txn = None if send is None else a.txns.get(send.txn)
            if txn is None:
                continue
            for offset, (idx, time, op, process) in offsets.items():
                yield ({"topic": tp[0], "partition": tp[1], "value": value, "offset": offset,
                        "txn": send.txn, "send_op": send.op, "index": idx, "time": time, "op": op,
                        "process": process}, txn)


def aborted_txn_read(a: Analysis) -> list[dict]:
    return [inst for inst, txn in _txn_reads(a) if txn.status == ABORTED]


def precommitted_read(a: Analysis) -> list[dict]:
    """The first read at read_committed of (value, offset) completed before
    the value's transaction invoked its commit, by more than the receipt
    skew between workers (transactions.RECEIPT_SKEW_NS)."""
    return [{**inst, "commit_index": txn.commit_invoked} for inst, txn in _txn_reads(a)
            if txn.commit_invoked is not None
            and inst["time"] < txn.commit_time - transactions.RECEIPT_SKEW_NS]


def torn_txn(a: Analysis) -> list[dict]:
    """Transactions whose ok sends to partitions with complete final reads
    the final reads returned in part; named by the partition of the
    smallest missing value, witnessed by the transaction's last event."""
    out = []
    for name, txn in a.txns.items():
        judged = [op for op in txn.sends if op.outcome == "ok" and (op.topic, op.partition) in a.complete]
        read = [op.value in a.final_at.get((op.topic, op.partition), {}) for op in judged]
        present = sorted(op.value for op, r in zip(judged, read) if r)
        missing = sorted((op for op, r in zip(judged, read) if not r), key=lambda op: op.value)
        if present and missing:
            idx, time, op, process = txn.end
            out.append({"topic": missing[0].topic, "partition": missing[0].partition, "txn": name,
                        "status": txn.status, "present": present, "missing": [m.value for m in missing],
                        "index": idx, "time": time, "op": op, "process": process})
    return out


def _landed(a: Analysis, op: _Op) -> tuple[int, int | None]:
    """Where an ok send landed: its acknowledged offset, and the lowest offset
    a read at read_committed returned its value at in its partition (None: none)."""
    read = a.rc_reads.get((op.topic, op.partition), {}).get(op.value)
    return op.ack, (min(read) if read else None)


def txn_reorder(a: Analysis) -> list[dict]:
    """A transaction's ok sends to a partition, in the order it invoked them,
    land at increasing offsets: as acknowledged, and as read at read_committed."""
    out = []
    for name, txn in a.txns.items():
        by_tp = defaultdict(list)
        for op in txn.sends:
            if op.outcome == "ok":
                by_tp[(op.topic, op.partition)].append(op)
        for ops in by_tp.values():
            for x, y in zip(ops, ops[1:]):
                (ack_x, read_x), (ack_y, read_y) = _landed(a, x), _landed(a, y)
                if ack_y < ack_x:
                    seen, offsets = "acknowledged", (ack_x, ack_y)
                elif read_x is not None and read_y is not None and read_y < read_x:
                    seen, offsets = "read", (read_x, read_y)
                else:
                    continue
                out.append({"topic": y.topic, "partition": y.partition, "txn": name,
                            "value": y.value, "offset": offsets[1], "previous_value": x.value,
                            "previous_offset": offsets[0], "seen": seen, "process": y.process,
                            "op": y.op, "previous_op": x.op, "index": y.comp_index,
                            "time": y.comp_time})
    return out


def _outputs(a: Analysis) -> dict[tuple, dict]:
    """The pipeline's outputs read at read_committed, by their source:
    (topic, partition, value) of the input -> output value -> (the first
    read_committed read of the output in its partition, the source's offset)."""
    out: dict[tuple, dict] = defaultdict(dict)
    for tp, values in a.rc_reads.items():
        sends = a.sends.get(tp, {})
        for value, offsets in values.items():
            send = sends.get(value)
            if send is not None and send.source is not None:
                src = send.source
                out[(src["topic"], src["partition"], src["value"])][value] = (
                    min(offsets.values()), src["offset"])
    return out


def eos_missing(a: Analysis) -> list[dict]:
    """Inputs the complete final reads returned below the group's final
    committed offset that no output read at read_committed came from."""
    if a.pipeline is None:
        return []
    made = _outputs(a)
    out = []
    for tp, ev in transactions.committed_offsets(a.groups, a.pipeline).items():
        if tp not in a.complete:
            continue
        for value, offset in a.final_at.get(tp, {}).items():
            if offset < ev["offset"] and (*tp, value) not in made:
                out.append({"topic": tp[0], "partition": tp[1], "value": value, "offset": offset,
                            "group": a.pipeline["group"], "committed": ev["offset"],
                            "index": ev["index"], "time": ev["time"]})
    return out


def eos_duplicate(a: Analysis) -> list[dict]:
    """Inputs two outputs read at read_committed came from, or one while the
    input is at or past the group's final committed offset; witnessed by the
    first read of the second output to be read (of the only one)."""
    if a.pipeline is None:
        return []
    committed = transactions.committed_offsets(a.groups, a.pipeline)
    out = []
    for (topic, partition, value), outputs in _outputs(a).items():
        offset = min(o for _w, o in outputs.values())
        ev = committed.get((topic, partition))
        at = None if ev is None else ev["offset"]
        if len(outputs) < 2 and (at is None or offset < at):
            continue
        firsts = sorted((w, v) for v, (w, _o) in outputs.items())
        idx, time, op, process = firsts[min(1, len(firsts) - 1)][0]
        out.append({"topic": topic, "partition": partition, "value": value, "offset": offset,
                    "outputs": sorted(outputs), "group": a.pipeline["group"], "committed": at,
                    "index": idx, "time": time, "op": op, "process": process})
    return out


# -- the figures besides the anomalies ----------------------------------------------------------

def latency(a: Analysis) -> dict:
    out = {}
    for f in CLIENT_FUNCTIONS:
        values = sorted(a.latencies[f])
        out[f] = {"count": len(values)}
        for p, name in PERCENTILES:
            out[f][name] = nearest_rank(values, p)
        out[f]["max_ns"] = values[-1] if values else None
    return out


def timeline(a: Analysis) -> list[dict]:
    rows = []
    for sec in sorted(a.per_second):
        r = a.per_second[sec]
        row = {"second": sec}
        for f in CLIENT_FUNCTIONS:
            for o in ("ok", "fail", "info"):
                row[f"{f}_{o}"] = r["ok"].get((f, o), 0)
            lats = sorted(r["lat"].get(f, ()))
            row[f"{f}_p50_ns"] = nearest_rank(lats, 0.5)
            row[f"{f}_p99_ns"] = nearest_rank(lats, 0.99)
        done = row["send_ok"] + row["send_fail"] + row["send_info"]
        row["availability"] = None if done == 0 else row["send_ok"] / done
        rows.append(row)
    return rows


def windows(a: Analysis) -> list[dict]:
    """The fault windows, with the outcomes and errors of the ops completed in each."""
    out = fault_windows(a.nemesis, a.end_time)
    completions = sorted(a.completions, key=lambda c: c[0])
    times = [c[0] for c in completions]
    for w in out:
        w["ops"] = {f: {o: 0 for o in ("ok", "fail", "info")} for f in CLIENT_FUNCTIONS}
        w["errors"] = {f: {"fail": {}, "info": {}} for f in CLIENT_FUNCTIONS}
        lo, hi = bisect.bisect_left(times, w["start"]), bisect.bisect_right(times, w["stop"])
        for _time, f, outcome, error in completions[lo:hi]:  # start <= time <= stop
            w["ops"][f][outcome] += 1
            if outcome != "ok":
                e = w["errors"][f][outcome]
                key = error if error is not None else "unknown"
                e[key] = e.get(key, 0) + 1
    return out
