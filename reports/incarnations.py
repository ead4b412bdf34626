"""Topics deleted and created again during a run: which incarnation an op read or wrote.

A topic deleted and created again under its name (the `recreate-topic`
admin operation) starts over at offset 0: the same (topic, partition, offset)
then names two records. The checkers judge each incarnation as a topic of
its own: the ops of incarnation k >= 1 of topic T are renamed `T#k` (`#`
cannot be part of a topic name), incarnation 0 keeps the name T. The harness
writes when, in observations.jsonl (docs/history-format.md): `topic-delete`
(the deletion was asked) and `topic-create` (the new incarnation was asked,
after the old one's replicas were gone); the attribution below needs only
the latter.

A send belongs to the incarnation that existed when it completed: one
invoked before a re-creation and answered after it went to the new
incarnation (the old one's logs were deleted, and answers still on their way
recorded, before the re-creation was asked); a send never answered, to the
one at its invocation. A poll belongs to the incarnation its records were
sent to (the send of its first record's value): a client that prefetches
hands out records of the old incarnation after the new one exists. A poll
without such a record, and every final poll (a fresh client, after
everything), belongs to the incarnation at its completion.

What each may legitimately change (docs/anomalies.md):
  * the records of a deleted incarnation are gone, not lost: its partitions
    are `deleted`, no final reads are expected of them, and its acknowledged
    sends never read are neither `lost` nor `unseen` (another value read at
    their offset is still `inconsistent-offset`, a read that skipped one
    `poll-skip`);
  * a read of a later incarnation that returns a value acknowledged in an
    earlier one is `resurrected`: the old log came back.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Iterator

SEPARATOR = "#"
CREATE = "topic-create"


def split(name: str) -> tuple[str, int]:
    """`T#2` -> ("T", 2); `T` -> ("T", 0)."""
    base, sep, k = name.rpartition(SEPARATOR)
    return (base, int(k)) if sep and k.isdigit() else (name, 0)


@dataclass
class Incarnations:
    """When each re-created topic's new incarnations were asked (ns on the history's clock)."""

    created: dict[str, list[int]] = field(default_factory=dict)   # topic -> ascending

    def __bool__(self) -> bool:
        return bool(self.created)

    def of(self, topic: str, time: int) -> int:
        return bisect.bisect_right(self.created.get(topic, ()), time)

    def name(self, topic: str, time: int) -> str:
        return incarnation_name(topic, self.of(topic, time))

    def is_deleted(self, name: str) -> bool:
        """A partition name of an incarnation that a later one replaced."""
        base, k = split(name)
        return base in self.created and k < len(self.created[base])

    def rename_observation(self, obs: dict) -> dict:
        """An observations.jsonl line with its topics named by incarnation
        at the line's time (a metadata sample taken while the old incarnation
        was being deleted shows the old one)."""
        if not self.created:
            return obs
        t = obs.get("time") or 0

        def tp_key(key: str) -> str:  # "T/3"
            topic, _, p = key.rpartition("/")
            return f"{self.name(topic, t)}/{p}"
        out = dict(obs)
        if isinstance(obs.get("partitions"), list):
            out["partitions"] = [{**p, "topic": self.name(p["topic"], t)}
                                 if isinstance(p, dict) and isinstance(p.get("topic"), str) else p
                                 for p in obs["partitions"]]
        if isinstance(obs.get("topic"), str):
            out["topic"] = self.name(obs["topic"], t)
        if isinstance(obs.get("topics"), list):
            out["topics"] = [self.name(x, t) if isinstance(x, str) else x for x in obs["topics"]]
        if isinstance(obs.get("unelected"), list):
            out["unelected"] = [tp_key(x) if isinstance(x, str) else x for x in obs["unelected"]]
        if isinstance(obs.get("reassigning"), dict):
            out["reassigning"] = {tp_key(k): v for k, v in obs["reassigning"].items()}
        return out


def from_lines(lines: Iterable[dict]) -> Incarnations:
    """The `topic-create` lines among observations."""
    inc = Incarnations()
    for obs in lines:
        if obs.get("kind") == CREATE and isinstance(obs.get("topic"), str):
            inc.created.setdefault(obs["topic"], []).append(int(obs.get("time") or 0))
    for times in inc.created.values():
        times.sort()
    return inc


def attribution(events: Iterable[dict], inc: Incarnations) -> dict[int, int]:
    """op -> its incarnation (see above), for the sends and polls of re-created topics."""
    at: dict[int, tuple[str, int]] = {}      # op -> (topic, last event time)
    sent_by: dict[int, int] = {}             # value -> send op
    first_value: dict[int, int] = {}         # non-final poll op -> its first record's value
    for ev in events:
        topic = ev.get("topic")
        if topic not in inc.created or ev.get("f") not in ("send", "poll"):
            continue
        at[ev["op"]] = (topic, ev["time"])
        if ev["f"] == "send":
            sent_by[ev["value"]] = ev["op"]
        elif ev["type"] == "ok" and ev.get("records") and not ev.get("final"):
            first_value[ev["op"]] = ev["records"][0][1]
    out = {op: inc.of(topic, time) for op, (topic, time) in at.items()}
    for op, value in first_value.items():
        send = sent_by.get(value)
        if send is not None and at[send][0] == at[op][0]:
            out[op] = out[send]
    return out


def incarnation_name(topic: str, k: int) -> str:
    return f"{topic}{SEPARATOR}{k}" if k else topic


def renamed(events: Iterable[dict], inc: Incarnations, ops: dict[int, int]) -> Iterator[dict]:
    """The events with each send's and poll's topic named by its incarnation
    (`ops`: op -> incarnation, from `attribution`)."""
    for ev in events:
        topic = ev.get("topic")
        if topic in inc.created and ev.get("f") in ("send", "poll"):
            ev = {**ev, "topic": incarnation_name(topic, ops.get(ev["op"], inc.of(topic, ev["time"])))}
        yield ev
