"""Consumer groups: reading groups.jsonl and the rules that need only it.

A run whose consumers subscribed as a group (`--sub-via subscribe`) leaves
groups.jsonl beside the history (docs/history-format.md, "groups.jsonl"):
each member's assignments with the position it starts from, its
revocations, and its commit attempts with their outcomes. The three group
anomalies (docs/anomalies.md) are judged from it:

  * `commit-regressed` from the group events alone: here, for both checkers;
  * `resume-past-commit` and `group-skipped` also need the history's reads
    and acknowledgements. This module names the candidates (an assignment
    that started past every commit it could have seen; a group's final
    commit per partition); each checker then looks for the evidence in the
    history its own way (the reference in dicts, the Spark checker in joins).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

GROUPS_FILE = "groups.jsonl"
NO_OFFSET = -1  # an assignment's `committed` when the coordinator held no offset


@dataclass
class Commit:
    """One partition of one commit attempt: its offset, outcome and where it lies among group events."""

    group: str
    member: str
    topic: str
    partition: int
    offset: int
    outcome: str            # ok | fail | info | pending (no completion recorded)
    inv_seq: int
    done_seq: int | None
    done_time: int | None
    done_index: int | None


def read_groups(run_dir: str | Path) -> list[dict] | None:
    """The group events in `seq` order, or None when the run has no groups.jsonl.
    A line cut by a crash (not JSON) is skipped: it is the last one written."""
    path = Path(run_dir) / GROUPS_FILE
    if not path.is_file():
        return None
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and isinstance(ev.get("seq"), int):
            out.append(ev)
    return sorted(out, key=lambda e: e["seq"])


def _group_commit(ev: dict) -> bool:
    """A member's commit. Offsets sent to a transaction (`txn`) are not: they
    count only if it commits, which eos-missing and eos-duplicate judge
    (docs/anomalies.md, "Transactions")."""
    return ev.get("kind") == "commit" and ev.get("txn") is None


def commits(events: list[dict]) -> list[Commit]:
    """Every (commit attempt, partition): the offsets of an `ok` as it was
    acknowledged, else as invoked."""
    invokes: dict[tuple, dict] = {}
    done: dict[tuple, dict] = {}
    for ev in events:
        if not _group_commit(ev):
            continue
        key = (ev.get("member"), ev.get("commit"))
        if ev.get("type") == "invoke":
            invokes[key] = ev
        elif key in invokes and key not in done:
            done[key] = ev
    out = []
    for key, inv in invokes.items():
        end = done.get(key)
        outcome = end["type"] if end is not None else "pending"
        offsets = end.get("offsets") if outcome == "ok" and end.get("offsets") else inv.get("offsets")
        for o in offsets or ():
            out.append(Commit(inv.get("group"), inv.get("member"), o["topic"], o["partition"],
                              o["offset"], outcome, inv["seq"],
                              None if end is None else end["seq"],
                              None if end is None else end["time"],
                              None if end is None else end["index"]))
    return out


def _assignments(events: list[dict]):
    """(event, partition entry) of every assignment, in seq order."""
    for ev in events:
        if ev.get("kind") == "assign":
            for p in ev.get("partitions") or ():
                yield ev, p


def commit_regressions(events: list[dict]) -> list[dict]:
    """A group's acknowledged committed offset of a partition went backwards:
    an `ok` commit below an earlier `ok` one (in the order their
    acknowledgements were recorded), or an assignment told a committed offset
    (by OffsetFetch; -1 when none) below an acknowledged commit recorded before it."""
    steps: list[tuple] = []   # (seq, kind, group, topic, partition, offset, member, time, index)
    for c in commits(events):
        if c.outcome == "ok":
            steps.append((c.done_seq, "commit", c.group, c.topic, c.partition, c.offset, c.member,
                          c.done_time, c.done_index))
    for ev, p in _assignments(events):
        if p.get("committed") is not None:
            steps.append((ev["seq"], "assign", ev.get("group"), p["topic"], p["partition"],
                          p["committed"], ev.get("member"), ev["time"], ev["index"]))
    high: dict[tuple, int] = {}
    out = []
    for seq, kind, group, topic, partition, offset, member, time, index in sorted(steps):
        key = (group, topic, partition)
        top = high.get(key)
        if top is not None and offset < top:
            out.append({"topic": topic, "partition": partition, "group": group, "member": member,
                        "kind": kind, "offset": offset, "previous": top, "seq": seq,
                        "index": index, "time": time})
        if kind == "commit":
            high[key] = offset if top is None else max(top, offset)
    return out


def resume_candidates(events: list[dict]) -> list[dict]:
    """Assignments that started a partition past every offset the group could
    have committed by then: `committed` is the highest offset of the
    group's commits of that partition that did not fail and were invoked
    before the assignment, or invoked by another member before the
    partition's next assignment (a late commit of a former owner may race
    the new owner's OffsetFetch). Judged only when an acknowledged commit was
    invoked before the assignment, and the member's position is known.
    Each checker then needs a record in [committed, position) the group never polled."""
    by_tp: dict[tuple, list[Commit]] = defaultdict(list)
    for c in commits(events):
        if c.outcome != "fail":
            by_tp[(c.group, c.topic, c.partition)].append(c)
    assigns = list(_assignments(events))
    out = []
    for i, (ev, p) in enumerate(assigns):
        key = (ev.get("group"), p["topic"], p["partition"])
        position, seq, member = p.get("position"), ev["seq"], ev.get("member")
        if position is None:
            continue
        nxt = next((e["seq"] for e, q in assigns[i + 1:]
                    if (e.get("group"), q["topic"], q["partition"]) == key), None)
        before = [c for c in by_tp.get(key, ()) if c.inv_seq < seq]
        if not any(c.outcome == "ok" for c in before):
            continue
        racing = [c for c in by_tp.get(key, ()) if c.inv_seq > seq and c.member != member
                  and (nxt is None or c.inv_seq < nxt)]
        bound = max(c.offset for c in before + racing)
        if position > bound:
            out.append({"topic": p["topic"], "partition": p["partition"], "group": key[0],
                        "member": member, "offset": position, "committed": bound, "seq": seq,
                        "index": ev["index"], "time": ev["time"]})
    return out


def final_commits(events: list[dict]) -> list[dict]:
    """Each group's last acknowledged commit of each partition (in the order
    the acknowledgements were recorded): {group, topic, partition, offset, index, time}."""
    last: dict[tuple, Commit] = {}
    for c in commits(events):
        if c.outcome == "ok":
            key = (c.group, c.topic, c.partition)
            if key not in last or c.done_seq > last[key].done_seq:
                last[key] = c
    return [{"group": g, "topic": t, "partition": p, "offset": c.offset, "index": c.done_index,
             "time": c.done_time} for (g, t, p), c in sorted(last.items())]


def status(events: list[dict] | None) -> str:
    """summary.json `oracles` of every group type: "checked", or why not."""
    if events is None:
        return "no input: no consumer group in the run (no groups.jsonl)"
    if not any(_group_commit(e) for e in events):
        return "no input: the group made no commit (outside transactions)"
    return "checked"
