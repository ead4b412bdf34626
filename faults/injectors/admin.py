"""Admin operations as faults: leadership and replicas moved while other
faults happen.

What an operator runs during an incident (a preferred replica election, a
partition reassignment) drives the controller's state machines
(docs/design.md#reassignment, #preferred-election) while brokers fail, and
moves leadership with writes in flight: leader churn. They go through
cluster.admin (the design's ZooKeeper admin paths), as `chaoslog admin`
does; in V2 coordination, where each partition's leader carries them out
(docs/design.md#v2-reassignment), through the V2 commands. Nothing is
undone at the heal: the new placement is legitimate; the step ends when the
operation completed (or its time is up), and notes what it changed.

  elect-preferred  every partition's preferred replica leads again
  move-leader      one partition's leadership moves to an in-sync follower
                   (reorder its replicas, then elect the new first one)
  reassign         a partition's replicas change: one moves to a broker that had
                   none, one more is added, or a follower is dropped
  add-partitions   one of the run's topics gets one more partition
  recreate-topic   one of the run's topics deleted and created again on the
                   same replicas (the checker judges each incarnation apart;
                   not in V2: harness.backends.base.v2_refusal)
"""
from __future__ import annotations

import functools
import threading
import time
from typing import Any

from cluster import admin, modes, zkpaths
from cluster.coordination import Coordination
from contracts.abilities import ZooKeeperAccess
from contracts.deadline import wait_until
from faults.injectors.base import FaultContext, FaultError, Injector

# How long an operation may take before the step gives up waiting (the
# controller keeps going; the final recovery check waits for it).
OPERATION_TIMEOUT_S = 60.0


def _leaders(zk: Any, topics: set[str] | None = None) -> dict[tuple[str, int], dict[str, Any]]:
    """Each partition's placement, of `topics` (None: every topic)."""
    out = {}
    for topic in admin.list_topics(zk):
        if topics is not None and topic not in topics:
            continue
        for p in admin.describe_topic(zk, topic)["partitions"]:
            out[(topic, p["partition"])] = p
    return out


def _broker(b: int) -> str:
    return f"broker-{b}"


class _AdminOperation(Injector):
    """`request()` at the start (refused: the step is skipped), then
    `settle()` in a thread until the operation completed; done() when it has.
    Subclasses choose their partition in _resolve."""
    NEEDS = (ZooKeeperAccess,)

    def __init__(self, ctx: FaultContext, target: str | None = None, **params: Any):
        super().__init__(ctx, target, **params)
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()

    @property
    def zk(self) -> Any:
        return self.ctx.resolver.zk

    def start(self, admit=None) -> None:
        """An operation that ZooKeeper's state refuses (a topic another
        operation is deleting) is skipped like any refused fault."""
        try:
            super().start(admit)
        except admin.AdminError as e:
            raise FaultError(f"{self.fault}: {e}") from None

    def _start(self) -> None:
        self.before = _leaders(self.zk, self.ctx.resolver.topics)
        try:
            self.request()
        except admin.AdminError as e:
            raise FaultError(str(e)) from None
        self._thread = threading.Thread(target=self._run, name=self.fault, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.settle()
        except Exception as e:  # noqa: BLE001 - reported in the stop event
            self.notes.append(f"failed: {e}")

    def request(self) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        raise NotImplementedError

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def _wait(self, condition, timeout: float = OPERATION_TIMEOUT_S) -> bool:
        return bool(wait_until(lambda: self._cancel.is_set() or condition(), timeout, 0.5,
                               retry_on=(Exception,))) and not self._cancel.is_set()

    def _stop(self) -> None:
        self._cancel.set()
        if self._thread is not None:
            self._thread.join()
        try:
            after = _leaders(self.zk, self.ctx.resolver.topics)
        except Exception:  # noqa: BLE001 - ZooKeeper may be what is broken
            return
        moved = [f"{t}/{p}: {self.before[(t, p)]['leader']}->{a['leader']}"
                 for (t, p), a in sorted(after.items())
                 if (t, p) in self.before and a["leader"] != self.before[(t, p)]["leader"]]
        self.notes.append(f"leaders moved: {', '.join(moved)}" if moved else "no leader moved")

    @functools.cached_property
    def mode(self) -> Coordination:
        """The run's coordination mode (docs/design.md#coordination-modes),
        looked up once: the polls of settle() ask it each time."""
        return modes.of(self.ctx.coordination)

    def _actor(self) -> list[str]:
        """Who carries an operation of the whole cluster out: the controller;
        without one (V2), where any broker serves admin requests, the lowest
        live one (the one Metadata names)."""
        if self.mode.has_controller:
            return [_broker(self.ctx.resolver.controller())]
        return [_broker(min(self.ctx.resolver.live_brokers()))]

    def _reassign(self, plan: dict[tuple[str, int], list[int]]) -> None:
        admin.reassign(self.zk, plan, mode=self.mode)

    def _reassignment_done(self, topic: str, partition: int, replicas: list[int]) -> bool:
        d = admin.describe_topic(self.zk, topic)["partitions"]
        if list(d[partition]["replicas"]) != replicas:
            return False
        return not self.mode.reassigning(self.zk, {(topic, partition)})

    def _ask_preferred(self, topics: set[str] | None) -> None:
        """Ask for the preferred replicas of `topics` (None: every topic) to
        lead; refused while another election is asked for. In V2 the
        leaders resign themselves while the request is there
        (docs/design.md#v2-reassignment)."""
        if self.zk.exists(zkpaths.PREFERRED_REPLICA_ELECTION):
            raise admin.AdminError("a preferred replica election is already in progress")
        self._asked = sorted(_leaders(self.zk, topics))
        if not self._asked:
            raise admin.AdminError("no partitions to elect")
        self.mode.ask_preferred(self.zk, self._asked)

    def _await_election(self) -> bool:
        """Wait until the election asked for is done, then end the request
        (where the mode's asker ends it)."""
        try:
            return self._wait(lambda: not self.mode.preferred_pending(self.zk, self._asked))
        finally:
            self.mode.end_preferred(self.zk)


class ElectPreferred(_AdminOperation):
    fault = "elect-preferred"

    def _resolve(self) -> list[str]:
        return self._actor()

    def request(self) -> None:
        self._ask_preferred(self.ctx.resolver.topics)

    def settle(self) -> None:
        self._await_election()


class MoveLeader(_AdminOperation):
    """Reorder the partition's replicas so that an in-sync follower is the
    preferred one (a reassignment to the same replicas), then elect it."""
    fault = "move-leader"

    def _resolve(self) -> list[str]:
        rng = self.ctx.rng
        live = set(self.ctx.resolver.live_brokers())
        candidates = []
        for (t, p), d in sorted(_leaders(self.zk, self.ctx.resolver.topics).items()):
            followers = [r for r in d["isr"] if r != d["leader"] and r in live]
            if d["leader"] in live and followers:
                candidates.append((t, p, d, followers))
        if not candidates:
            raise FaultError("no partition has a live leader and a live in-sync follower")
        t, p, d, followers = rng.choice(candidates)
        new = rng.choice(sorted(followers))
        self.partition = (t, p)
        self.replicas = [new] + [r for r in d["replicas"] if r != new]
        self.params = {**self.params, "partition": f"{t}/{p}", "to": new}
        return [_broker(d["leader"]), _broker(new)]

    def request(self) -> None:
        self._reassign({self.partition: self.replicas})

    def settle(self) -> None:
        t, p = self.partition
        if not self._wait(lambda: self._reassignment_done(t, p, self.replicas)):
            self.notes.append("reorder not done when the step ended")
            return
        self._ask_preferred({t})
        self._await_election()


class Reassign(_AdminOperation):
    """Change one partition's replicas (docs/design.md#reassignment), as
    `how` says: `move` one replica to a live broker that holds none of it,
    `grow` by one such broker, or `shrink` by one follower (never below two
    replicas). Moving and growing need more brokers than the partition has
    replicas."""
    fault = "reassign"
    HOWS = ("move", "grow", "shrink")

    def _resolve(self) -> list[str]:
        rng = self.ctx.rng
        how = self.params.get("how", "move")
        if how not in self.HOWS:
            raise FaultError(f"reassign how={how!r}: one of {', '.join(self.HOWS)}")
        live = sorted(self.ctx.resolver.live_brokers())
        placed = sorted(_leaders(self.zk, self.ctx.resolver.topics).items())
        if how == "shrink":
            candidates = [(t, p, d) for (t, p), d in placed if len(d["replicas"]) > 2]
            if not candidates:
                raise FaultError("no partition has more than two replicas to shrink")
            t, p, d = rng.choice(candidates)
            out = rng.choice([r for r in d["replicas"] if r != d["leader"]])
            self.replicas, moved = [r for r in d["replicas"] if r != out], [out]
        else:
            candidates = [(t, p, d) for (t, p), d in placed if any(b not in d["replicas"] for b in live)]
            if not candidates:
                raise FaultError("no partition has a live broker outside its replicas")
            t, p, d = rng.choice(candidates)
            into = rng.choice([b for b in live if b not in d["replicas"]])
            if how == "grow":
                self.replicas, moved = [*d["replicas"], into], [into]
            else:
                out = rng.choice(d["replicas"])
                self.replicas, moved = [into if r == out else r for r in d["replicas"]], [out, into]
        self.partition = (t, p)
        self.params = {**self.params, "how": how, "partition": f"{t}/{p}",
                       "replicas": ",".join(map(str, self.replicas))}
        return [_broker(b) for b in moved]

    def request(self) -> None:
        self._reassign({self.partition: self.replicas})

    def settle(self) -> None:
        t, p = self.partition
        done = self._wait(lambda: self._reassignment_done(t, p, self.replicas))
        self.notes.append("reassignment done" if done else "reassignment not done when the step ended")


class AddPartitions(_AdminOperation):
    """One more partition for one of the run's topics: the controller creates
    its replicas, elects its leader and tells every broker
    (docs/design.md#partitions) while other faults happen. Clients learn of it
    from Metadata; a consumer group rebalances to take it in. The workload's
    producers write to the partitions they started with. The partitions are
    planned at the start and asked for in settle: in V2 the command queues
    start-replica to the new replicas and waits for them
    (docs/design.md#v2-admin), and a replica that is down fails it (noted)."""
    fault = "add-partitions"

    def _resolve(self) -> list[str]:
        topics = sorted(t for t in (self.ctx.resolver.topics or admin.list_topics(self.zk))
                        if not t.startswith("__"))
        if not topics:
            raise FaultError("no topic to add a partition to")
        self.topic = self.ctx.rng.choice(topics)
        self.count = len(admin.describe_topic(self.zk, self.topic)["partitions"]) + 1
        self.params = {**self.params, "topic": self.topic, "partitions": self.count}
        return self._actor()

    def request(self) -> None:
        self.new = admin.plan_new_partitions(self.zk, self.topic, self.count)

    def _partitions_led(self) -> bool:
        parts = admin.describe_topic(self.zk, self.topic)["partitions"]
        return len(parts) == self.count and all(
            parts[p]["leader"] >= 0 and set(parts[p]["isr"]) == set(parts[p]["replicas"])
            for p in self.new)

    def settle(self) -> None:
        try:
            self.mode.add_partitions(self.zk, self.topic, self.new, OPERATION_TIMEOUT_S)
        except admin.AdminError as e:
            self.notes.append(f"not added: {e}")
            return
        done = self._wait(self._partitions_led)
        self.notes.append(f"{self.topic}/{','.join(map(str, sorted(self.new)))} "
                          + ("led with a full ISR" if done else "not led with a full ISR when "
                             "the step ended"))


# observations.jsonl kinds (docs/history-format.md): when a topic's deletion
# and its new incarnation were asked; the checker names ops by incarnation.
TOPIC_DELETE, TOPIC_CREATE = "topic-delete", "topic-create"
# Between the old incarnation gone and the new one asked: the old one's
# answers still on their way to the history (a loaded worker) arrive first,
# so that the checker attributes each send by when it completed.
RECREATE_PAUSE_S = 3.0


class RecreateTopic(_AdminOperation):
    """Delete one of the run's topics and create it again under its name on
    the same replicas (docs/design.md#topics, #topic-ids) while other faults
    happen: a replica whose broker was down, frozen or cut off during the
    deletion must not bring the old log back. The run's observations record
    when the deletion and the new incarnation were asked, so that the checker
    judges each incarnation apart (records of the deleted one are gone, not
    lost; one of them read from the new one is `resurrected`). The step ends
    once the new topic is led; stopping it earlier finishes the re-creation,
    so the workload's topic never stays deleted. Not in a run with a
    consumer group: its committed offsets would outlive the topic."""
    fault = "recreate-topic"
    # Topics being deleted and created again, by any lane: one at a time each.
    _busy: set[str] = set()
    _busy_lock = threading.Lock()

    def __init__(self, ctx: FaultContext, target: str | None = None, **params: Any):
        super().__init__(ctx, target, **params)
        self._created = self._observed = False
        self._create_lock = threading.Lock()
        self.topic: str | None = None

    def _resolve(self) -> list[str]:
        if self.ctx.observe is None:
            raise FaultError("recreate-topic needs a chaos run: the checker must learn from its "
                             "observations when the topic was deleted and created again")
        if self.ctx.resolver.groups:
            raise FaultError(f"recreate-topic is not for a run with a consumer group "
                             f"({', '.join(sorted(self.ctx.resolver.groups))}): its committed "
                             f"offsets would outlive the deleted topic")
        with self._busy_lock:
            topics = sorted(t for t in (self.ctx.resolver.topics or admin.list_topics(self.zk))
                            if not t.startswith("__") and t not in self._busy
                            and not self.zk.exists(zkpaths.delete_topic_path(t)))
            if not topics:
                raise FaultError("no topic to delete and create again (none, or each being "
                                 "deleted already)")
            topic = self.ctx.rng.choice(topics)
            self.assignment = {p["partition"]: list(p["replicas"])
                               for p in admin.describe_topic(self.zk, topic)["partitions"]}
            # A topic is created with one replication factor; after a
            # reassignment grew or shrank some partition, each comes back
            # on its first (preferred first) replicas, as many as the fewest.
            rf = min(len(r) for r in self.assignment.values())
            self.assignment = {p: r[:rf] for p, r in self.assignment.items()}
            self.topic = topic
            self._busy.add(topic)
        self.params = {**self.params, "topic": self.topic}
        return [_broker(self.ctx.resolver.controller())]

    def start(self, admit=None) -> None:
        try:
            super().start(admit)
        except BaseException:
            if not self.active:  # (refused after its topic was chosen)
                self._release()
            raise

    def _release(self) -> None:
        with self._busy_lock:
            self._busy.discard(self.topic)

    def request(self) -> None:
        # Observed first: an op answered after this may have met the deletion.
        self.ctx.observe(TOPIC_DELETE, topic=self.topic)
        admin.delete_topic(self.zk, self.topic)

    def _deleted(self) -> bool:
        return not (self.zk.exists(zkpaths.topic_path(self.topic))
                    or self.zk.exists(zkpaths.delete_topic_path(self.topic)))

    def _create(self) -> None:
        """Observed once, before the write (no op of the new incarnation can
        complete before it); a write whose answer was lost is not repeated."""
        with self._create_lock:
            if self._created:
                return
            if not self._observed:
                self.ctx.observe(TOPIC_CREATE, topic=self.topic)
                self._observed = True
            try:
                admin.create_topic(self.zk, self.topic, len(self.assignment), 0,
                                   replica_assignment=self.assignment)
            except Exception:
                if not self.zk.exists(zkpaths.topic_path(self.topic)):
                    raise
            self._created = True

    def _led(self) -> bool:
        return all(p["leader"] >= 0 for p in admin.describe_topic(self.zk, self.topic)["partitions"])

    def settle(self) -> None:
        if not self._wait(self._deleted):
            self.notes.append("deletion not done when the step ended")
            return
        if self._cancel.wait(RECREATE_PAUSE_S):
            return  # (stopped: _stop creates it)
        self._create()
        done = self._wait(self._led)
        self.notes.append(f"{self.topic} deleted and created again"
                          + ("" if done else ", not led when the step ended"))

    def _stop(self) -> None:
        try:
            super()._stop()
            if self._created:
                return
            if wait_until(self._deleted, OPERATION_TIMEOUT_S, 0.5, retry_on=(Exception,)):
                time.sleep(RECREATE_PAUSE_S)
                self._create()
                self.notes.append(f"{self.topic} created again at the step's end")
            else:
                self.notes.append(f"{self.topic}: the deletion did not finish, the topic was not "
                                  f"created again")
        finally:
            self._release()
