"""The history validator: every rule of history-format.md, with line numbers.

The checkers accept any history they can read and judge the system under test;
this module judges the *recorder*. The harness runs it on each recorded history
so that a workload bug (an op completed twice, a process id reused after an
`info`, a value sent twice) is found as such, not mistaken for a broker bug.

    from reports.validate import validate
    for v in validate(run_dir): print(v)

Rules, by the names violations carry:
  malformed       a line that is not JSON, a field of the wrong type, a missing
                  required field, an unknown `type` or `f`
  index           indexes are 0, 1, 2, ... without gaps, in file order
  time            time does not decrease with index
  op-reused       an invocation reuses an op id
  pairing         a completion without an outstanding invocation of the same op,
                  process and f, or carrying another topic, partition, value, txn,
                  intent or isolation
  outstanding     a process invokes while it has an op outstanding
  retired         a process id used again after an `info` completion
  never-completed an invocation with no completion by the end of the history
  value-reused    two send invocations carry the same value
  nemesis         a nemesis event not by process -1 or not of type info, a phase
                  other than start/stop, a stop with no open start, a start
                  never stopped; a client event by process -1 or of f nemesis
  txn             a send, poll or txn op of a transaction invoked after its txn op
"""

from __future__ import annotations

import argparse
import heapq
import sys
from dataclasses import dataclass

from reports.errors import HistoryError
from reports.readers import RunInput, iter_raw, open_run


@dataclass(frozen=True)
class Violation:
    file: str
    line: int | None
    rule: str
    message: str
    index: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: [{self.rule}] {self.message}"


def _stream(run: RunInput, out: list[Violation]):
    """(file, line, event) in index order; malformed lines become violations."""

    def one(hf):
        last = None
        for line, ev, problem in iter_raw(hf):
            if problem is not None:
                out.append(Violation(str(hf.path), line, "malformed", problem))
                continue
            if last is not None and ev["index"] < last and len(run.files) > 1:
                out.append(Violation(str(hf.path), line, "index",
                                     f"index {ev['index']} after {last} in the same part file",
                                     ev["index"]))
            last = ev["index"]
            yield ev["index"], str(hf.path), line, ev

    streams = [one(hf) for hf in run.files]
    if len(streams) == 1:
        for _i, path, line, ev in streams[0]:
            yield path, line, ev
    else:
        for _i, path, line, ev in heapq.merge(*streams, key=lambda t: t[0]):
            yield path, line, ev


# Fields of an invocation that its completion, when it carries them, repeats.
_PAIRED = ("txn", "intent", "isolation")


def validate_run(run: RunInput, limit: int | None = None) -> list[Violation]:
    out: list[Violation] = []
    expected_index = 0
    last_time = None
    outstanding: dict[int, tuple] = {}  # op -> (its invocation, path, line)
    busy: dict[int, int] = {}  # process -> outstanding op
    retired: dict[int, int] = {}  # process -> index of its info completion
    ops_seen: set[int] = set()
    values: dict[int, int] = {}  # value -> index of the send invoking it
    open_faults: list[tuple] = []  # (fault, targets, path, line)
    ended: dict[str, int] = {}  # txn -> index of its txn op

    def bad(path, line, rule, msg, index=None):
        out.append(Violation(path, line, rule, msg, index))

    for path, line, ev in _stream(run, out):
        if limit is not None and len(out) >= limit:
            break
        i, t, p, op = ev["index"], ev["time"], ev["process"], ev["op"]
        if i != expected_index:
            what = "a gap" if i > expected_index else "a repeat or disorder"
            bad(path, line, "index", f"index {i} where {expected_index} was expected ({what})", i)
        expected_index = max(expected_index, i) + 1
        if last_time is not None and t < last_time:
            bad(path, line, "time", f"time {t} before the previous event's {last_time}", i)
        last_time = t if last_time is None else max(last_time, t)

        if ev["f"] == "nemesis" or p == -1:
            _nemesis(ev, path, line, open_faults, bad)
            continue
        if p in retired:
            bad(path, line, "retired",
                f"process {p} used after its info completion at index {retired[p]}", i)
        if ev["type"] == "invoke":
            if op in ops_seen:
                bad(path, line, "op-reused", f"op {op} invoked again", i)
            ops_seen.add(op)
            if p in busy:
                bad(path, line, "outstanding", f"process {p} invokes op {op} while op {busy[p]} is outstanding", i)
            busy[p] = op
            outstanding[op] = (ev, path, line)
            if ev["txn"] in ended:
                bad(path, line, "txn", f"{ev['f']} in transaction {ev['txn']!r} after its txn op "
                    f"at index {ended[ev['txn']]}", i)
            elif ev["f"] == "txn":
                ended[ev["txn"]] = i
            if ev["f"] == "send":
                v = ev["value"]
                if v in values:
                    bad(path, line, "value-reused", f"value {v} already sent at index {values[v]}", i)
                else:
                    values[v] = i
            continue
        inv = outstanding.pop(op, None)
        if inv is None:
            bad(path, line, "pairing", f"{ev['type']} of op {op} with no outstanding invocation", i)
        else:
            iev = inv[0]
            ip, f, topic, partition, value = (iev[k] for k in ("process", "f", "topic", "partition", "value"))
            if ip != p:
                bad(path, line, "pairing", f"op {op} invoked by process {ip}, completed by {p}", i)
            if f != ev["f"]:
                bad(path, line, "pairing", f"op {op} invoked as {f}, completed as {ev['f']}", i)
            if (topic, partition) != (ev["topic"], ev["partition"]):
                bad(path, line, "pairing",
                    f"op {op} invoked on {topic}/{partition}, completed on {ev['topic']}/{ev['partition']}", i)
            if f == "send" and ev["value"] is not None and ev["value"] != value:
                bad(path, line, "pairing", f"op {op} sent value {value}, completed with {ev['value']}", i)
            for name in _PAIRED:
                if ev[name] is not None and ev[name] != iev[name]:
                    bad(path, line, "pairing", f"op {op} invoked with {name} {iev[name]!r}, "
                        f"completed with {ev[name]!r}", i)
            if busy.get(ip) == op:
                del busy[ip]
        if ev["type"] == "info":
            retired[p] = i
    for op, (iev, path, line) in sorted(outstanding.items(), key=lambda kv: kv[1][-1]):
        bad(path, line, "never-completed",
            f"{iev['f']} op {op} of process {iev['process']} has no completion")
    for fault, targets, path, line in open_faults:
        bad(path, line, "nemesis", f"fault {fault} on {targets} started and never stopped")
    return out if limit is None else out[:limit]


def _nemesis(ev, path, line, open_faults, bad):
    i = ev["index"]
    if ev["f"] != "nemesis":
        bad(path, line, "nemesis", f"process -1 is the nemesis, but this is a {ev['f']} event", i)
        return
    if ev["process"] != -1:
        bad(path, line, "nemesis", f"nemesis event by process {ev['process']} (must be -1)", i)
    if ev["type"] != "info":
        bad(path, line, "nemesis", f"nemesis event of type {ev['type']} (must be info)", i)
    targets = sorted(ev["targets"] or [])
    if ev["phase"] == "start":
        open_faults.append((ev["fault"], targets, path, line))
    elif ev["phase"] == "stop":
        same = [x for x in open_faults if x[0] == ev["fault"]]
        if not same:
            bad(path, line, "nemesis", f"stop of fault {ev['fault']} with no open start", i)
            return
        exact = [x for x in same if x[1] == targets]
        open_faults.remove((exact or same)[0])
    else:
        bad(path, line, "nemesis", f"phase {ev['phase']!r} (must be start or stop)", i)


def validate(run_dir, limit: int | None = None) -> list[Violation]:
    """Violations of history-format.md in a run directory; empty when the history obeys it."""
    try:
        run = open_run(run_dir)
    except HistoryError as e:
        return [Violation(e.path, e.line, "run", e.reason)]
    return validate_run(run, limit)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("validate", help="check histories against history-format.md")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--limit", type=int, default=100, help="violations listed per run (default 100)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Exit 0 when every history obeys the format, 1 otherwise."""
    worst = 0
    for d in args.run_dirs:
        found = validate(d, limit=args.limit)
        for v in found:
            print(v)
        print(f"{d}: {'ok' if not found else f'{len(found)} violation(s)'}", file=sys.stderr)
        worst = max(worst, 1 if found else 0)
    return worst


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m reports.validate")
    sub = ap.add_subparsers(dest="command", required=True)
    add_parser(sub)
    a = ap.parse_args(["validate", *sys.argv[1:]])
    sys.exit(a.func(a))
