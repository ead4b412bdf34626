"""The reference checker: anomalies.md in plain Python, one pass over the history.

It exists to be obviously right, not fast. It reads the events in `index`
order, keeps dicts keyed the way the definitions speak (per topic-partition:
value -> where it was read, offset -> which values were seen there; per
process and partition: the last offset returned and whether it re-seeked),
and at the end turns them into the instances of each anomaly type. The Spark
checker must agree with it exactly; the property tests hold them to that.

Witnesses: every instance names the event that first showed it (`index`,
`time`, `op`, `process`); "first" is the smallest completion index, ties
broken by value or offset. Fault windows count an instance by that time.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from reports.groups import (commit_regressions, final_commits, read_groups,
                            resume_candidates)
from reports.groups import oracles as group_oracles
from reports.incarnations import split
from reports.observations import (annotate_windows, below_min_isr, checked, judge,
                                  read_incarnations, read_observations, recovered_at,
                                  writers_of_duplicates)
from reports.readers import RunInput, iter_judged_events, open_run
from reports.summary import (
    ANOMALY_TYPES,
    CLIENT_FUNCTIONS,
    DEFAULT_MAX_INSTANCES,
    NS_PER_SECOND,
    PERCENTILES,
    Findings,
    empty_counts,
    fault_windows,
    final_reads_complete,
    nearest_rank,
    sort_key,
)


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


class ReferenceChecker:
    def __init__(self, run: RunInput, max_instances: int | None = DEFAULT_MAX_INSTANCES):
        self.run = run
        self.max_instances = max_instances
        self.events = 0
        self.end_time = 0
        self.pending: dict[int, _Op] = {}
        self.partitions: dict[tuple, _Partition] = defaultdict(_Partition)
        # per (topic, partition): value -> the send op
        self.sends: dict[tuple, dict[int, _Op]] = defaultdict(dict)
        # per (topic, partition): value -> offset -> first read witness
        self.reads: dict[tuple, dict[int, dict[int, tuple]]] = defaultdict(dict)
        # per (topic, partition): offset -> value -> first witness (read or ack)
        self.at_offset: dict[tuple, dict[int, dict[int, tuple]]] = defaultdict(dict)
        # per (topic, partition): offset -> values acknowledged there
        self.acked_at: dict[tuple, dict[int, set]] = defaultdict(lambda: defaultdict(set))
        self.seqs: dict[tuple, _Seq] = defaultdict(_Seq)
        self.nonmonotonic: list[dict] = []
        self.skip_candidates: list[dict] = []
        self.counts = empty_counts()
        self.latencies = {f: [] for f in CLIENT_FUNCTIONS}
        self.per_second: dict[int, dict] = {}
        self.completions: list[tuple] = []  # (time, f, outcome, error) for fault windows
        self.errors = {f: {"fail": {}, "info": {}} for f in CLIENT_FUNCTIONS}
        self.nemesis: list[dict] = []
        self.idempotent_duplicates = 0
        # per-send settings (run.json workload.clients)
        self.weak = run.weak_nodes()
        self.idempotent_nodes = run.idempotent_nodes()
        self.exact_polls = 0
        self.uncommitted: list[dict] = []
        # per (topic, partition, node) of an idempotent producer: its ok sends
        self.idem_sends: dict[tuple, list[_Op]] = defaultdict(list)
        # per (group, topic, partition): values its members' (non-final) polls returned
        self.group_reads: dict[tuple, set] = defaultdict(set)
        # per (topic, partition): value -> the lowest offset final reads returned it at
        self.final_at: dict[tuple, dict[int, int]] = defaultdict(dict)
        # topics deleted and created again: their ops come renamed by incarnation
        self.incarnations = read_incarnations(run.run_dir)

    # -- the pass over the events ------------------------------------------

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
                     node=ev["node"] if ev["f"] == "send" else None)
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
            offsets = self.reads[tp].setdefault(value, {})
            if offset not in offsets:
                offsets[offset] = witness
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

    # -- after the pass ------------------------------------------------------

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

    def finish(self) -> Findings:
        for op in self.pending.values():  # invoked, never completed: outcome unknown
            self._count(op)
            self._partition_update(op)
            if op.f == "send":
                self.sends[(op.topic, op.partition)].setdefault(op.value, op)
        partitions = [
            {"topic": t, "partition": p, **stats.__dict__}
            | ({"deleted": True} if self.incarnations.is_deleted(t) else {})
            for (t, p), stats in sorted(self.partitions.items())
        ]
        max_read = {(p["topic"], p["partition"]): p["max_read_offset"] for p in partitions}
        found = {k: [] for k in ANOMALY_TYPES}

        for tp, sends in self.sends.items():
            read = self.reads.get(tp, {})
            if self.incarnations.is_deleted(tp[0]):
                # Never read, then gone with its topic (no final reads to miss
                # it): not lost; another value at its offset is still
                # inconsistent-offset, a read that skipped it poll-skip.
                continue
            for value, op in sends.items():
                if op.outcome == "ok" and value not in read:
                    top = max_read.get(tp)
                    if op.node in self.weak:
                        kind = "lost-unreplicated"
                    else:
                        kind = "lost" if top is not None and top >= op.ack else "unseen"
                    found[kind].append({
                        "topic": tp[0], "partition": tp[1], "value": value, "offset": op.ack,
                        "process": op.process, "op": op.op, "index": op.comp_index, "time": op.comp_time,
                    })
        for tp, values in self.reads.items():
            sends = self.sends.get(tp, {})
            for value, offsets in values.items():
                send = sends.get(value)
                if len(offsets) >= 2:
                    # witness: the first read at the second offset to be seen
                    idx, time, op, process = sorted((w, o) for o, w in offsets.items())[1][0]
                    idem = send is not None and send.node in self.idempotent_nodes
                    self.idempotent_duplicates += idem
                    found["duplicate"].append({
                        "topic": tp[0], "partition": tp[1], "value": value, "offsets": sorted(offsets),
                        "index": idx, "time": time, "op": op, "process": process,
                        "send_op": None if send is None else send.op, "idempotent": idem,
                    })
                sent_to = tp[0]
                if send is None and self.incarnations:
                    sent_to, send = self._sent_to_another_incarnation(tp, value)
                kind = ("phantom-read" if send is None else "aborted-read" if send.outcome == "fail"
                        else "resurrected" if sent_to != tp[0] and send.outcome == "ok"
                        and split(sent_to)[1] < split(tp[0])[1] else None)
                if kind is None:
                    continue
                for offset, (idx, time, op, process) in offsets.items():
                    inst = {"topic": tp[0], "partition": tp[1], "value": value, "offset": offset,
                            "index": idx, "time": time, "op": op, "process": process}
                    if kind != "phantom-read":
                        inst["send_op"] = send.op
                    if kind == "resurrected":
                        inst["acknowledged_in"] = sent_to
                    found[kind].append(inst)
        for tp, offsets in self.at_offset.items():
            for offset, values in offsets.items():
                if len(values) >= 2:
                    (idx, time, op, process), _ = sorted((w, v) for v, w in values.items())[1]
                    found["inconsistent-offset"].append({
                        "topic": tp[0], "partition": tp[1], "offset": offset, "values": sorted(values),
                        "acknowledged": sorted(self.acked_at[tp].get(offset, ())),
                        "index": idx, "time": time, "op": op, "process": process,
                    })
        found["nonmonotonic-poll"] = self.nonmonotonic
        found["poll-skip"] = self._verified_skips()
        found["read-uncommitted"] = self.uncommitted
        found["nonmonotonic-send"] = self._nonmonotonic_sends()
        complete = {(p["topic"], p["partition"]): p["final_high_watermark"]
                    for p in partitions if p["final_complete"]}
        found["truncated-read"] = [
            {"topic": tp[0], "partition": tp[1], "value": value, "offset": offset,
             "final_high_watermark": complete[tp], "index": w[0], "time": w[1], "op": w[2],
             "process": w[3]}
            for tp, values in self.reads.items() if complete.get(tp) is not None
            for value, offsets in values.items() for offset, w in offsets.items()
            if offset >= complete[tp]]
        obs = read_observations(self.run.run_dir, self.run.run_json.get("checks"))
        found.update(judge(obs, complete))
        self.idempotent_duplicates -= writers_of_duplicates(obs, found["duplicate"])
        found["ack-below-min-isr"] = self._acks_below_min_isr(obs)
        found["unrecovered"] += self._unrecovered_partitions(obs)
        groups = read_groups(self.run.run_dir)
        found.update(self._group_anomalies(groups or [], complete))

        findings = Findings(self.run.run_id, self.run.run_json, self.run.idempotent, "reference")
        findings.idempotent_duplicates = self.idempotent_duplicates
        findings.oracles = checked(
            obs, exact_polls=self.exact_polls,
            idempotent_producers=len({k[2] for k in self.idem_sends}),
            final_complete=bool(partitions) and final_reads_complete(partitions))
        findings.oracles.update(group_oracles(groups))
        findings.events, findings.end_time = self.events, self.end_time
        findings.warnings = list(self.run.warnings)
        for kind in ANOMALY_TYPES:
            items = sorted(found[kind], key=sort_key(kind))
            findings.anomaly_counts[kind] = len(items)
            findings.anomalies[kind] = items if self.max_instances is None else items[: self.max_instances]
        c = self.counts
        c["acknowledged"] = sum(p["acknowledged"] for p in partitions)
        c["read"] = sum(len(v) for v in self.reads.values())
        c["records"] = sum(p["records"] for p in partitions)
        c["lost"] = findings.anomaly_counts["lost"]
        c["unseen"] = findings.anomaly_counts["unseen"]
        c["duplicated"] = findings.anomaly_counts["duplicate"]
        findings.counts = c
        findings.partitions = partitions
        findings.latency = {f: _latency(self.latencies[f]) for f in CLIENT_FUNCTIONS}
        findings.timeline = self._timeline()
        findings.errors = self.errors
        findings.windows = self._windows()
        annotate_windows(obs, findings.windows)
        return findings

    def _sent_to_another_incarnation(self, tp, value) -> tuple[str, _Op | None]:
        """The send of `value` to another incarnation of tp's topic
        (reports/incarnations.py): its incarnation's name and op, or (tp's
        name, None) when there is none."""
        base = split(tp[0])[0]
        for (topic, partition), sends in self.sends.items():
            if partition == tp[1] and topic != tp[0] and split(topic)[0] == base and value in sends:
                return topic, sends[value]
        return tp[0], None

    def _group_anomalies(self, events: list[dict], complete: dict) -> dict[str, list[dict]]:
        """commit-regressed, resume-past-commit and group-skipped (docs/anomalies.md):
        the candidates from groups.jsonl (reports/groups.py), the evidence from the reads."""
        resumed = []
        for c in resume_candidates(events):
            tp = (c["topic"], c["partition"])
            polled = self.group_reads.get((c["group"], *tp), set())
            unpolled = [o for o, values in self.at_offset.get(tp, {}).items()
                        if c["committed"] <= o < c["offset"] and not set(values) <= polled]
            if unpolled:
                resumed.append({**c, "skipped": min(unpolled)})
        skipped = []
        for fc in final_commits(events):
            tp = (fc["topic"], fc["partition"])
            if complete.get(tp) is None:
                continue  # (without complete final reads, a missing record is lost/unseen)
            polled = self.group_reads.get((fc["group"], *tp), set())
            final_at = self.final_at.get(tp, {})
            for value, op in self.sends.get(tp, {}).items():
                at = final_at.get(value)
                if (op.outcome == "ok" and op.node not in self.weak and at is not None
                        and at < fc["offset"] and value not in polled):
                    skipped.append({"topic": tp[0], "partition": tp[1], "group": fc["group"],
                                    "value": value, "offset": at, "committed": fc["offset"],
                                    "index": fc["index"], "time": fc["time"]})
        return {"commit-regressed": commit_regressions(events), "resume-past-commit": resumed,
                "group-skipped": skipped}

    def _nonmonotonic_sends(self) -> list[dict]:
        """An idempotent producer's acknowledged sends to a partition, in the
        order it sent them, land at increasing offsets."""
        out = []
        for (topic, partition, node), ops in self.idem_sends.items():
            ops.sort(key=lambda o: o.inv_index)
            for a, b in zip(ops, ops[1:]):
                if b.ack < a.ack:
                    out.append({"topic": topic, "partition": partition, "node": node,
                                "value": b.value, "offset": b.ack, "previous_value": a.value,
                                "previous_offset": a.ack, "process": b.process, "op": b.op,
                                "index": b.comp_index, "time": b.comp_time})
        return out

    def _acks_below_min_isr(self, obs) -> list[dict]:
        """acks=all sends acknowledged while the ISR was below min.insync.replicas."""
        min_isr = self.run.min_isr()
        margin = int(self.run.check_bound("ack_margin_s", 5.0) * NS_PER_SECOND)
        spans = defaultdict(list)
        for sp in below_min_isr(obs, min_isr):
            spans[(sp["topic"], sp["partition"])].append(sp)
        out = []
        for tp, sends in self.sends.items():
            for op in sends.values():
                if op.outcome != "ok" or op.node in self.weak or op.inv_time is None:
                    continue
                for sp in spans.get(tp, ()):
                    if sp["start"] + margin <= op.inv_time and op.comp_time <= sp["end"]:
                        out.append({"topic": tp[0], "partition": tp[1], "value": op.value,
                                    "offset": op.ack, "isr": sp["isr"], "min_isr": min_isr,
                                    "invoked": op.inv_time, "process": op.process, "op": op.op,
                                    "index": op.comp_index, "time": op.comp_time})
                        break
        return out

    def _unrecovered_partitions(self, obs) -> list[dict]:
        """Partitions whose sends, invoked after the cluster recovered and the
        clients' grace, all failed."""
        at = recovered_at(obs)
        if at is None:
            return []
        after = at + int(self.run.check_bound("recovery_grace_s", 5.0) * NS_PER_SECOND)
        per_tp: dict[tuple, list[_Op]] = defaultdict(list)
        for tp, sends in self.sends.items():
            for op in sends.values():
                if op.inv_time is not None and op.inv_time >= after and op.outcome != "pending":
                    per_tp[tp].append(op)
        out = []
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

    def _verified_skips(self) -> list[dict]:
        """A gap a < b is a poll-skip when some read or ack shows a value strictly between."""
        known = {tp: sorted(offsets) for tp, offsets in self.at_offset.items()}
        out = []
        for c in self.skip_candidates:
            offs = known.get((c["topic"], c["partition"]), [])
            i = bisect.bisect_right(offs, c["previous"])
            if i < len(offs) and offs[i] < c["offset"]:
                out.append({**c, "skipped": offs[i]})
        return out

    def _timeline(self) -> list[dict]:
        rows = []
        for sec in sorted(self.per_second):
            r = self.per_second[sec]
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

    def _windows(self) -> list[dict]:
        windows = fault_windows(self.nemesis, self.end_time)
        self.completions.sort(key=lambda c: c[0])
        times = [c[0] for c in self.completions]
        for w in windows:
            w["ops"] = {f: {o: 0 for o in ("ok", "fail", "info")} for f in CLIENT_FUNCTIONS}
            w["errors"] = {f: {"fail": {}, "info": {}} for f in CLIENT_FUNCTIONS}
            lo, hi = bisect.bisect_left(times, w["start"]), bisect.bisect_right(times, w["stop"])
            for _time, f, outcome, error in self.completions[lo:hi]:  # start <= time <= stop
                w["ops"][f][outcome] += 1
                if outcome != "ok":
                    e = w["errors"][f][outcome]
                    key = error if error is not None else "unknown"
                    e[key] = e.get(key, 0) + 1
        return windows


def _final_poll_complete(records, high_watermark, position) -> bool:
    """A final poll that returned records up to high_watermark - 1, or found the partition empty."""
    if high_watermark is None:
        return False
    if records:
        return max(o for o, _ in records) >= high_watermark - 1
    return high_watermark == 0 or position == high_watermark


def _latency(values: list) -> dict:
    values = sorted(values)
    out = {"count": len(values)}
    for p, name in PERCENTILES:
        out[name] = nearest_rank(values, p)
    out["max_ns"] = values[-1] if values else None
    return out


def check(run, max_instances: int | None = DEFAULT_MAX_INSTANCES) -> Findings:
    """Check one run directory (or an opened RunInput); raises HistoryError on bad input."""
    if not isinstance(run, RunInput):
        run = open_run(run)
    checker = ReferenceChecker(run, max_instances)
    for ev in iter_judged_events(run, checker.incarnations):
        checker.feed(ev)
    return checker.finish()
