"""The broker's V2 component: in place of the controller (docs/design.md#v2).

It drives this broker's ReplicaManager with the same LeaderAndIsr,
StopReplica and UpdateMetadata requests the controller would send, built
from ZooKeeper in-process, so becoming leader or follower, truncation and
the metadata cache are the controller mode's code. What differs is who
decides:

  - a partition's leader is whoever holds its leader lock
    (cluster/v2/election.py); every replica watches the lock and, when it
    is gone, tries to take it (the preferred replica at once, the others
    after `v2.preferred.replica.wait.ms`);
  - start- and close-replica requests arrive in this broker's state-change
    queue (cluster/v2/state_queue.py), drained at startup and on every change;
  - the leader alone carries out a reassignment of its partition and
    resigns for the preferred replica (docs/design.md#v2-reassignment);
  - the metadata clients get is read from ZooKeeper every
    `v2.metadata.refresh.ms`, or less often in a big cluster (one pipelined
    read; ZooKeeper is read at most 1/READ_GAP_FACTOR of the time); a
    leadership change here is written into it at once. That read also starts
    replicas of partitions newly assigned here.

Threads: kazoo's watch callbacks only schedule work on the event loop; ZooKeeper
reads and writes run on the broker's ZooKeeper thread (ZkClient.call); the
ReplicaManager is called on the event loop only. Each partition is looked at
by one task at a time (`_kick`), and partitions independently, so a replica
waiting out the preferred replica's head start does not hold up the others.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from cluster import zkpaths
from cluster.protocol.control import (BrokerEndpoint, LeaderAndIsrRequest, PartitionState,
                                      StopReplicaRequest, TopicPartition, UpdateMetadataRequest)
from cluster.server.metadata_cache import LEADER_DURING_DELETE, MetadataCache
from cluster.server.replica_manager import ReplicaManager
from cluster.server.zk_client import ZkClient
from cluster.v2.election import Election, read_state, reassigning_to, replica_set
from cluster.v2.state_queue import (CLOSE_REPLICA, START_REPLICA, Pending, StateChange,
                                    StateChangeQueue, acts_on)
from cluster.zkpaths import (NO_LEADER, V2_CONTROLLER_EPOCH, BrokerRegistration, LeaderAndIsr,
                             LeaderLock, TopicAssignment, loads)

log = logging.getLogger("cluster.v2")

TP = tuple[str, int]

# The wait between two reads of the whole cluster is at least this many times
# the last read's duration (docs/design.md#v2-broker, "Metadata").
READ_GAP_FACTOR = 4


@dataclass(frozen=True)
class Held:
    """A partition's lock as read, and whether this broker's current
    ZooKeeper session holds it (a lock of its own earlier session is not
    its: it goes when that session expires)."""
    lock: LeaderLock
    ours: bool


@dataclass(frozen=True)
class PartitionView:
    """A partition as read: its assignment AR, the replicas an admin
    command is moving it to (None: not marked), its lock and leaderAndISR."""
    assigned: tuple[int, ...]
    moving_to: tuple[int, ...] | None
    topic_id: str
    held: Held | None
    state: LeaderAndIsr | None

    @property
    def replicas(self) -> tuple[int, ...]:
        """AR, plus the new replicas while a reassignment runs."""
        return replica_set(self.assigned, self.moving_to)

    @property
    def reassigning(self) -> bool:
        """A reassignment to carry out: a mark of new replicas that are not
        the assignment yet (a create or add-partitions mark of a partition
        just written equals it; a deletion's is ())."""
        return bool(self.moving_to) and tuple(self.moving_to) != tuple(self.assigned)


@dataclass(frozen=True)
class ClusterView:
    """One read of what clients are told: live brokers and every partition;
    plus the partitions an admin command is changing (their new replicas,
    () for a deletion: docs/design.md#v2-admin) and those asked to move
    back to their preferred replica."""
    brokers: dict[int, BrokerRegistration]
    partitions: dict[TP, PartitionView]
    marks: dict[TP, tuple[int, ...]]
    preferred: frozenset[TP] = frozenset()


class Coordinator:
    def __init__(self, cfg, zk: ZkClient, rm: ReplicaManager, metadata: MetadataCache):
        self.broker_id = cfg.broker_id
        self.zk = zk
        self.rm = rm
        self.metadata = metadata
        self.preferred_wait_s = cfg["v2.preferred.replica.wait.ms"] / 1000
        self.refresh_s = cfg["v2.metadata.refresh.ms"] / 1000
        self.auto_rebalance = cfg["auto.leader.rebalance.enable"]
        self.preferred_asked: frozenset[TP] = frozenset()   # /admin/preferred_replica_election
        self.queue = StateChangeQueue(zk.kazoo, self.broker_id, cfg["v2.state.queue.max.requests"])
        self.election = Election(zk.kazoo, self.broker_id,
                                 unclean=cfg["unclean.leader.election.enable"])
        self.started: set[TP] = set()
        self._dirty: set[TP] = set()       # partitions to look at again
        self._running: set[TP] = set()     # partitions with a look running
        self._drain_lock = asyncio.Lock()
        self._refresh_now = asyncio.Event()
        self._last_metadata: UpdateMetadataRequest | None = None
        self._patched = False              # a partition was written since that request
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """The design's broker startup up to, not including, registration
        (the broker registers after this returns): the queue, its watch,
        drain it, start every replica assigned here."""
        self.loop = asyncio.get_running_loop()
        await self.zk.call(self.queue.create)
        await self._drain()
        await self.zk.call(self._watch_children, self.queue.path, self._drain)
        await self.zk.call(self._watch_children, zkpaths.BROKER_IDS, self._leaderless_again)
        view = await self.zk.call(self._read_cluster)
        for tp, pv in sorted(view.partitions.items()):
            if self.broker_id in pv.replicas:
                await self._start_replica(tp)
        self._spawn(self._metadata_loop())

    async def shutdown(self) -> None:
        """Stop acting. The leader locks go with the ZooKeeper session, which
        the broker closes next: the other replicas then elect."""
        self._stopping = True
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def on_new_session(self) -> None:
        """After a session expiry: the locks this broker held are gone;
        look at every partition again."""
        for tp in sorted(self.started):
            self._kick(tp)
        self._refresh_now.set()

    # -- scheduling -----------------------------------------------------------------------------

    def _spawn(self, coro) -> None:
        if self._stopping:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("V2 task failed", exc_info=task.exception())

    def _from_kazoo(self, fn, *args) -> None:
        """Schedule coroutine function `fn(*args)` from a kazoo callback thread."""
        if not self._stopping and self.loop is not None:
            self.loop.call_soon_threadsafe(lambda: self._spawn(fn(*args)))

    def _watch_children(self, path: str, fn) -> None:
        self.zk.kazoo.ensure_path(path)
        ChildrenWatch(self.zk.kazoo, path, lambda children: self._from_kazoo(fn) if not
                      self._stopping else False, send_event=False)

    def _watch_lock(self, tp: TP) -> None:
        def changed(data, stat, event=None):
            if self._stopping or tp not in self.started:
                return False                       # stop watching
            self.loop.call_soon_threadsafe(self._kick, tp)
        DataWatch(self.zk.kazoo, zkpaths.leader_lock_path(*tp), changed)

    def _kick(self, tp: TP) -> None:
        """Look at partition `tp` again: at once, or right after the look
        that is running (changes meanwhile are seen by that next look)."""
        self._dirty.add(tp)
        if tp not in self._running:
            self._running.add(tp)
            self._spawn(self._looks(tp))

    async def _looks(self, tp: TP) -> None:
        try:
            while tp in self._dirty:
                self._dirty.discard(tp)
                await self._reconcile(tp)
        finally:
            self._running.discard(tp)

    # -- replicas -------------------------------------------------------------------------------

    async def _start_replica(self, tp: TP) -> None:
        """startReplica: watch the partition's lock; the watch's first call
        looks at the partition (elects, or follows its leader)."""
        if tp in self.started:
            self._kick(tp)
            return
        self.started.add(tp)
        await self.zk.call(self._watch_lock, tp)

    async def _close_replica(self, tp: TP) -> None:
        """closeReplica: stop fetching, delete the replica, and give the
        lock up if this broker led (a reassignment moved the partition away)."""
        self.started.discard(tp)
        self.rm.handle_stop_replica(StopReplicaRequest(
            -1, V2_CONTROLLER_EPOCH, True, (TopicPartition(*tp),), broker_id=self.broker_id))
        await self.zk.call(self.election.resign, *tp)
        log.info("V2: closed replica %s-%d", *tp)

    async def _resign(self, tp: TP, why: str) -> None:
        """Stop taking writes for `tp`, then give its lock up: the replicas
        elect again (the preferred one first)."""
        p = self.rm.partition(tp)
        if p is not None and p.is_leader:
            p.fence()
        log.info("V2: resigns the leadership of %s-%d: %s", *tp, why)
        await self.zk.call(self.election.resign, *tp)

    async def _reconcile(self, tp: TP) -> None:
        """Make this broker's replica match the partition's lock: take the
        lock when there is none and this broker may, else follow its holder."""
        if self._stopping or tp not in self.started:
            return
        pv = await self.zk.call(self._read_partition, tp)
        if self.broker_id not in pv.replicas:
            if pv.held is not None and pv.held.ours:   # moved away, its close-replica lost
                await self._resign(tp, "no longer a replica")
            return
        if pv.held is None:
            if pv.replicas[0] != self.broker_id:
                await asyncio.sleep(self.preferred_wait_s)   # the preferred replica first
                if tp not in self.started:
                    return                     # closed meanwhile (a deletion)
            won = await self.zk.call(self.election.elect, *tp)
            if won is not None and tp not in self.started:
                await self.zk.call(self.election.resign, *tp)  # closed during the election
                return
            if won is not None:
                await self._lead(tp, pv, won)
                return
            pv = await self.zk.call(self._read_partition, tp)
            if pv.held is None:
                return        # may not lead; looked at again when the lock or the brokers change
        held = pv.held
        if held.lock.broker == self.broker_id:
            if not held.ours:
                log.info("V2: %s-%d is locked by this broker's earlier session; waiting "
                         "for it to expire", *tp)
            elif self._leads(tp, held.lock.epoch):
                await self._as_leader(tp, pv)   # we lead (applied when we won)
            else:
                await self._finish_election(tp, pv, held.lock.epoch)
            return
        self._apply(tp, pv, held.lock.broker, held.lock.epoch, pv.state)

    async def _lead(self, tp: TP, pv: PartitionView, won: LeaderAndIsr) -> None:
        log.info("V2: leads %s-%d at epoch %d, ISR %s", *tp, won.leader_epoch, list(won.isr))
        self._apply(tp, pv, self.broker_id, won.leader_epoch, won)
        await self._as_leader(tp, dataclasses.replace(
            pv, held=Held(LeaderLock(self.broker_id, won.leader_epoch), True), state=won))

    def _leads(self, tp: TP, epoch: int) -> bool:
        """Whether this broker's replica leads at `epoch` (or later)."""
        p = self.rm.partition(tp)
        return p is not None and p.is_leader and p.leader_epoch >= epoch

    async def _finish_election(self, tp: TP, pv: PartitionView, epoch: int) -> None:
        """This session holds the lock but never led at its epoch: an
        election cut short by a connection loss (Election.finish)."""
        won = await self.zk.call(self.election.finish, *tp, epoch)
        if won is None:
            log.warning("V2: %s-%d: an election of ours was cut short and cannot be finished; "
                        "giving the lock up", *tp)
            await self.zk.call(self.election.resign, *tp)
            return
        log.warning("V2: %s-%d: finishing an election cut short by a connection loss", *tp)
        await self._lead(tp, pv, won)

    # -- what only the leader does (docs/design.md#v2-reassignment) -------------------------------

    async def _as_leader(self, tp: TP, pv: PartitionView) -> None:
        """The leader's part: carry a reassignment one step further, or
        resign for the preferred replica when it is asked for (or
        `auto.leader.rebalance.enable`) and that replica is live and in sync."""
        p = self.rm.partition(tp)
        if p is None or not p.is_leader or pv.held is None or not pv.held.ours:
            return
        if pv.reassigning:
            await self._reassign_step(tp, pv, p)
        elif self._may_resign(tp, pv, p.isr):
            await self._resign(tp, f"preferred replica {pv.replicas[0]} is in sync")

    def _may_resign(self, tp: TP, pv: PartitionView, isr) -> bool:
        """Asked to (or `auto.leader.rebalance.enable`), and the preferred
        replica is another broker, registered and in the ISR."""
        preferred = pv.replicas[0] if pv.replicas else None
        return ((self.auto_rebalance or tp in self.preferred_asked)
                and preferred is not None and preferred != self.broker_id and preferred in isr
                and self.metadata.endpoint(preferred) is not None)

    async def _reassign_step(self, tp: TP, pv: PartitionView, p) -> None:
        """One step of moving AR to RAR, each safe to repeat and resumed by
        the next leader if this one dies (the mark stays until the end):

          1. RAR not all in this leader's replica set: a new leader epoch
             handing the followers AR + RAR; start-replica to RAR - AR;
          2. RAR not all in the ISR yet: wait (looked at again on every read
             of the cluster);
          3. a leader in RAR starts an epoch with replicas RAR and ISR ∩ RAR;
             close-replica to AR - RAR; AR := RAR; unmark; a leader not in
             RAR then closes its own replica, which gives the lock up."""
        rar = tuple(pv.moving_to)
        if not set(rar) <= set(p.replicas):
            state = await self.zk.call(self.election.bump, *tp, None)
            if state is None:
                return
            self._apply(tp, pv, self.broker_id, state.leader_epoch, state)
            new = [b for b in rar if b not in pv.assigned]
            await self.zk.call(self._queue, tp, new, START_REPLICA, state.leader_epoch)
            log.info("V2: %s-%d moving to %s: epoch %d, started %s", *tp, list(rar),
                     state.leader_epoch, new)
            return
        if not set(rar) <= p.isr:
            return
        if self.broker_id in rar:
            state = await self.zk.call(self.election.bump, *tp,
                                       tuple(b for b in sorted(p.isr) if b in rar))
            if state is None:
                return
            self._apply(tp, PartitionView(rar, None, pv.topic_id, pv.held, state), self.broker_id,
                        state.leader_epoch, state)
        old = [b for b in pv.assigned if b not in rar]
        epoch = p.leader_epoch
        await self.zk.call(self._queue, tp, [b for b in old if b != self.broker_id],
                           CLOSE_REPLICA, epoch)
        if not await self.zk.call(self._finish_reassignment, tp, pv.assigned, rar):
            return
        log.info("V2: %s-%d moved from %s to %s", *tp, list(pv.assigned), list(rar))
        if self.broker_id not in rar:
            await self.zk.call(self._queue, tp, [self.broker_id], CLOSE_REPLICA, epoch)

    def _apply(self, tp: TP, pv: PartitionView, leader: int, epoch: int,
               state: LeaderAndIsr | None) -> None:
        """Become leader or follower through the ReplicaManager's LeaderAndIsr
        path (it ignores an epoch it already has). Not for a replica closed
        while this look waited on ZooKeeper: that would make it again."""
        if tp not in self.started:
            return
        isr = state.isr if state is not None else (leader,)
        version = state.zk_version if state is not None else -1
        endpoints = ()
        reg = self.metadata.endpoint(leader)
        if reg is not None:
            endpoints = (BrokerEndpoint(leader, *reg),)
        req = LeaderAndIsrRequest(-1, V2_CONTROLLER_EPOCH, False, (PartitionState(
            tp[0], tp[1], leader, epoch, isr, version, pv.replicas, pv.topic_id),),
            endpoints, broker_id=self.broker_id)
        self.rm.handle_leader_and_isr(req)
        self._patch_metadata(req.partition_states[0])

    async def _leaderless_again(self) -> None:
        """Brokers came or went: partitions without a leader may now have an
        eligible replica here (an ISR member returned, or, with unclean
        election, the last one died)."""
        for tp in sorted(self.started):
            p = self.rm.partition(tp)
            if p is None or not p.is_leader:
                self._kick(tp)
        self._refresh_now.set()

    # -- the state-change queue ---------------------------------------------------------------

    async def _drain(self) -> None:
        async with self._drain_lock:
            for request in await self.zk.call(self.queue.pending):
                await self._act(request)
                await self.zk.call(self.queue.remove, request.name)

    async def _act(self, request: Pending) -> None:
        change = request.change
        if change is None:
            log.warning("V2: dropping %s from the state-change queue: %s", request.name,
                        request.problem)
            return
        tp = (change.topic, change.partition)
        if change.op == CLOSE_REPLICA:
            await self._close_replica(tp)
            return
        pv = await self.zk.call(self._read_partition, tp)
        current = pv.held.lock.epoch if pv.held is not None else None
        if not acts_on(change, current):
            log.info("V2: ignoring %s of %s-%d at epoch %d from %s: the current epoch is %s",
                     change.op, *tp, change.epoch, change.sender, current)
            return
        await self._start_replica(tp)

    # -- metadata -------------------------------------------------------------------------------

    async def _metadata_loop(self) -> None:
        read_s = 0.0     # how long the last read that succeeded took
        while True:
            began = time.monotonic()
            self._refresh_now.clear()          # a change during the read asks for the next
            try:
                view = await self.zk.call(self._read_cluster)
                self._update_metadata(view)
                self.preferred_asked = view.preferred
                for tp, pv in sorted(view.partitions.items()):
                    if pv.held is not None and pv.held.ours and (
                            pv.reassigning or self.broker_id not in pv.replicas
                            or not self._leads(tp, pv.held.lock.epoch)
                            or (pv.state is not None
                                and self._may_resign(tp, pv, pv.state.isr))):
                        self._kick(tp)                        # the leader's part
                    if self.broker_id not in pv.replicas:
                        continue
                    if tp not in self.started:
                        if tp not in view.marks or self.broker_id in view.marks[tp]:
                            await self._start_replica(tp)     # newly assigned here
                    elif pv.held is None:
                        self._kick(tp)                        # still leaderless: try again
                read_s = time.monotonic() - began
            except asyncio.CancelledError:
                raise
            except Exception as e:
                # (its time was ZooKeeper out of reach, not the cluster's size:
                # it must not hold the next read back)
                log.warning("V2: reading the cluster failed: %r", e)
            ended = time.monotonic()
            min_gap = READ_GAP_FACTOR * read_s
            try:
                await asyncio.wait_for(self._refresh_now.wait(), max(self.refresh_s, min_gap))
            except asyncio.TimeoutError:
                pass
            await asyncio.sleep(max(0.0, ended + min_gap - time.monotonic()))

    def _update_metadata(self, view: ClusterView) -> None:
        states = []
        for (t, p), pv in sorted(view.partitions.items()):
            leader = pv.held.lock.broker if pv.held is not None else NO_LEADER
            epoch = (pv.held.lock.epoch if pv.held is not None
                     else pv.state.leader_epoch if pv.state is not None else -1)
            isr = pv.state.isr if pv.state is not None else ()
            version = pv.state.zk_version if pv.state is not None else -1
            states.append(PartitionState(t, p, leader, epoch, isr, version, pv.replicas,
                                         pv.topic_id))
        for t, parts in self.metadata.topics.items():
            for p in parts:
                if (t, p) not in view.partitions:
                    states.append(PartitionState(t, p, LEADER_DURING_DELETE, -1, (), -1, ()))
        brokers = tuple(BrokerEndpoint(b, r.host, r.port) for b, r in sorted(view.brokers.items()))
        # Clients send admin requests to the controller Metadata names. V2 has
        # none and any broker serves them: name the lowest live broker, the
        # same on every broker (docs/design.md#v2-broker).
        admin_broker = min(view.brokers, default=-1)
        req = UpdateMetadataRequest(admin_broker, V2_CONTROLLER_EPOCH, tuple(states), brokers,
                                    broker_id=self.broker_id)
        if req != self._last_metadata or self._patched:   # unchanged: no state-change line
            self.rm.handle_update_metadata(req)
            self._last_metadata = req
            self._patched = False

    def _patch_metadata(self, state: PartitionState) -> None:
        """Write one partition's new leadership into the metadata at once,
        not at the next read of the whole cluster."""
        last = self._last_metadata
        if last is None:
            return          # the first read, which follows, has it
        self.rm.handle_update_metadata(UpdateMetadataRequest(
            last.controller_id, V2_CONTROLLER_EPOCH, (state,), last.live_brokers,
            broker_id=self.broker_id))
        self._patched = True

    # -- ZooKeeper reads (on the ZooKeeper thread) ----------------------------------------------

    def _read_partition(self, tp: TP) -> PartitionView:
        kazoo = self.zk.kazoo
        try:
            assignment = TopicAssignment.decode(kazoo.get(zkpaths.topic_path(tp[0]))[0])
        except NoNodeError:
            assignment = TopicAssignment()
        return PartitionView(assignment.partitions.get(tp[1], ()), reassigning_to(kazoo, *tp),
                             assignment.topic_id, self._held(tp), read_state(self.zk.kazoo, *tp))

    def _read_cluster(self) -> ClusterView:
        """One read of the whole cluster, pipelined: each round's requests
        are all sent before the first answer is awaited, so 10K partitions
        cost ZooKeeper's throughput, not 20K round trips."""
        kazoo = self.zk.kazoo
        ids = [int(b) for b in kazoo.get_children(zkpaths.BROKER_IDS)]
        topics = kazoo.get_children(zkpaths.TOPICS)
        regs = _answers({b: kazoo.get_async(zkpaths.broker_path(b)) for b in ids})
        assignments = {t: TopicAssignment.decode(data) for t, (data, _) in _answers(
            {t: kazoo.get_async(zkpaths.topic_path(t)) for t in topics}).items()}
        # The marks after the assignments: a command marks a partition before
        # it changes its assignment, so a change seen is seen with its mark.
        marked = _answers({0: kazoo.get_children_async(zkpaths.PARTITIONS_REASSIGNED)}).get(0, [])
        marked_parts = _answers({t: kazoo.get_children_async(zkpaths.partitions_reassigned_path(t))
                                 for t in marked})
        tps = [(t, p) for t, a in assignments.items() for p in a.partitions]
        locks = _answers({tp: kazoo.get_async(zkpaths.leader_lock_path(*tp)) for tp in tps})
        states = _answers({tp: kazoo.get_async(zkpaths.leader_and_isr_path(*tp)) for tp in tps})
        marks = _answers({(t, int(p)): kazoo.get_async(zkpaths.partitions_reassigned_path(t, int(p)))
                          for t, parts in marked_parts.items() for p in parts})
        marks = {tp: tuple(loads(data) or ()) for tp, (data, _) in marks.items()}
        asked = _answers({0: kazoo.get_async(zkpaths.PREFERRED_REPLICA_ELECTION)})

        brokers = {b: BrokerRegistration.decode(b, data) for b, (data, _) in regs.items()}
        partitions = {}
        for tp in tps:
            assignment = assignments[tp[0]]
            held = self._held_from(*locks[tp]) if tp in locks else None
            state = LeaderAndIsr.decode(states[tp][0], states[tp][1].version) \
                if tp in states else None
            partitions[tp] = PartitionView(assignment.partitions[tp[1]], marks.get(tp),
                                           assignment.topic_id, held, state)
        preferred = frozenset(zkpaths.decode_partition_list(asked[0][0])) if 0 in asked else ()
        return ClusterView(brokers, partitions, marks, frozenset(preferred))

    def _queue(self, tp: TP, brokers: list[int], op: str, epoch: int) -> None:
        """Queue `op` of `tp` to each broker, as this partition's leader at `epoch`."""
        for b in brokers:
            StateChangeQueue(self.zk.kazoo, b).put(
                StateChange(op, *tp, epoch, f"broker-{self.broker_id}"))

    def _finish_reassignment(self, tp: TP, old: tuple[int, ...], rar: tuple[int, ...]) -> bool:
        """AR := RAR, at the version read and only if AR is still `old`;
        then remove the mark. False if the assignment changed meanwhile."""
        kazoo = self.zk.kazoo
        try:
            data, stat = kazoo.get(zkpaths.topic_path(tp[0]))
        except NoNodeError:
            return False
        current = TopicAssignment.decode(data)
        if current.partitions.get(tp[1]) != tuple(old):
            return False
        moved = TopicAssignment({**current.partitions, tp[1]: tuple(rar)}, current.topic_id)
        try:
            kazoo.set(zkpaths.topic_path(tp[0]), moved.encode(), version=stat.version)
        except (BadVersionError, NoNodeError):
            return False
        try:
            kazoo.delete(zkpaths.partitions_reassigned_path(*tp))
        except NoNodeError:
            pass
        return True

    def _held(self, tp: TP) -> Held | None:
        try:
            return self._held_from(*self.zk.kazoo.get(zkpaths.leader_lock_path(*tp)))
        except NoNodeError:
            return None

    def _held_from(self, data: bytes, stat) -> Held:
        return Held(LeaderLock.decode(data), stat.ephemeralOwner == self.zk.session_id)


def _answers(pending: dict) -> dict:
    """Wait for kazoo's asynchronous answers: key -> result, without the
    keys whose znode is gone (deleted between the listing and the read)."""
    out = {}
    for key, answer in pending.items():
        try:
            out[key] = answer.get()
        except NoNodeError:
            pass
    return out
