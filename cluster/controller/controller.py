"""The controller (docs/design.md#controller; its single event queue:
docs/design.md#event-queue).

Every broker runs a Controller; the one that creates the ephemeral
/controller znode is active. ZooKeeper watches, timers and the request
handler only put events on one queue (event_manager.py); one thread takes
them one at a time and runs their handler, from the table in __init__. A
handler changes the in-memory context and the state machines, batches its
ZooKeeper writes (zk_store) and its broker requests (request_batch); when it
returns, the batch goes out through the channel manager (one sender thread
per broker) and the event's state-change records go to ZooKeeper. The event
thread never waits for a broker. Topic and partition deletion is
topic_deletion_manager.py's.

Session handling: SUSPENDED (connection lost, session maybe alive) pauses the
event thread; LOST (session expired) fences the controller at once from
kazoo's thread (channels stopped, nothing more sent) and queues a resignation;
after kazoo connects again the controller re-runs the election. Every
ZooKeeper write of an active controller also checks the version of
/controller_epoch it wrote, so a zombie cannot change anything in ZooKeeper,
and brokers reject its requests by epoch.

Not in the original design (as later Kafka did, docs/design.md#controller-failover):
at failover, a leader that restarted while no controller watched loses its
leadership to an ISR member that did not (KIP-380's broker epochs; see
_move_leaders_restarted_unseen).
"""
from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from typing import Any, Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, ConnectionLoss, KazooException, NoNodeError,
                              NodeExistsError, NotEmptyError, SessionExpiredError)
from kazoo.protocol.states import EventType, WatchedEvent

from cluster import zkpaths
from cluster.config import BrokerConfig
from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.zkpaths import LeaderAndIsr, TopicAssignment

from . import events as ev
from . import leader_selectors as sel
from .channel_manager import ChannelManager
from .context import TP, ControllerContext
from .event_manager import ControllerEventManager
from .partition_state_machine import PartitionState, PartitionStateMachine
from .reassignment import Reassigner
from .replica_state_machine import ReplicaState, ReplicaStateMachine
from .request_batch import RequestBatch
from .state_change_log import StateChangeLog
from .topic_deletion_manager import TopicDeletionManager
from .zk_store import ControllerMovedError, Op, ZkStore

log = logging.getLogger("chaoslog.controller")

HALT_ENV = "CHAOSLOG_CONTROLLER_HALT_AFTER_STEP"
CONTROLLED_SHUTDOWN_ACK_WAIT = 5.0
SHUTDOWN_LOCK_WAIT = 1.0  # seconds shutdown waits for the state lock before resigning


class ControllerHalted(Exception):
    """Test hook: the controller stopped as if it had died (see halt_after_step)."""


class Controller:
    """One broker's controller. Thread-safe public API: startup, shutdown,
    is_active, epoch, active_controller_id, handle_controlled_shutdown,
    snapshot.

    Test hook: halt_after_step=N (or env CHAOSLOG_CONTROLLER_HALT_AFTER_STEP=N)
    makes the controller stop dead right after it completes step N (1-7) of a
    partition reassignment (KAFKA-42): it sends what that step produced, then
    handles no more events and sends nothing more, keeping its ZooKeeper
    session - like a process that died. The test then ends the session (close
    the client or expire it) so another controller takes over."""

    def __init__(self, config: BrokerConfig, zk: KazooClient, broker_id: int, *,
                 state_change_logger: logging.Logger | None = None,
                 halt_after_step: int | None = None) -> None:
        self.config = config
        self.zk = zk
        self.broker_id = broker_id
        if halt_after_step is None and os.environ.get(HALT_ENV):
            halt_after_step = int(os.environ[HALT_ENV])
        self.halt_after_step = halt_after_step
        self.ctx = ControllerContext(broker_id)
        self._active = False
        self.events = ControllerEventManager(broker_id, self._process, lambda: self._active)
        timeout = max(5.0, config["zookeeper.session.timeout.ms"] / 1000 * 3)
        self.store = ZkStore(zk, timeout=timeout)
        self.sclog = StateChangeLog(zk, broker_id, state_change_logger)
        self.sclog.guard = self.events.check_session
        self.store.guard = self.events.check_session
        self.batch = RequestBatch(self.ctx)
        self.psm = PartitionStateMachine(broker_id, self.ctx, self.store, self.batch, self.sclog,
                                         default_selector=self.offline_selector)
        self.rsm = ReplicaStateMachine(broker_id, self.ctx, self.store, self.batch, self.sclog)
        self.reassigner = Reassigner(broker_id, zk, self.ctx, self.store, self.batch, self.sclog,
                                     self.psm, self.rsm, selector=self.reassigned_selector,
                                     watch=self._watcher, write_assignment=self._write_topic,
                                     step_done=self.step_done)
        self.deletion = TopicDeletionManager(broker_id, zk, self.ctx, self.store, self.batch,
                                             self.psm, self.rsm, self.reassigner)
        self.channels: ChannelManager | None = None
        self.unclean = bool(config["unclean.leader.election.enable"])
        # partition -> its ISR members that restarted unseen, during failover step 3b
        self._restarted_members: dict[TP, set[int]] = {}

        self._generation = 0
        self._timers: list[threading.Event] = []
        self._watchers: dict[str, Callable] = {}
        self.active_controller_id = -1
        # Every event and its handler, in one place (docs/design.md#event-queue).
        self._handlers: dict[type, Callable[[Any], None]] = {
            ev.ControllerChange: self._on_ControllerChange,
            ev.Reload: self._on_Reload,
            ev.SessionExpired: self._on_SessionExpired,
            ev.Shutdown: self._on_Shutdown,
            ev.StaleEpochResponse: self._on_StaleEpochResponse,
            ev.Resync: self._on_Resync,
            ev.BrokerChange: self._on_BrokerChange,
            ev.TopicChange: self._on_TopicChange,
            ev.DeleteTopic: self._on_DeleteTopic,
            ev.AddPartition: self._on_AddPartition,
            ev.PartitionRemove: self._on_PartitionRemove,
            ev.PreferredReplicaElection: self._on_PreferredReplicaElection,
            ev.IsrChangeNotification: self._on_IsrChangeNotification,
            ev.PartitionReassigned: self._on_PartitionReassigned,
            ev.ReassignedPartitionIsrChange: self._on_ReassignedPartitionIsrChange,
            ev.ReassignmentCheck: self._on_ReassignmentCheck,
            ev.ControlledShutdown: self._on_ControlledShutdown,
        }

    # ------------------------------------------------------------------ API
    @property
    def is_active(self) -> bool:
        return self._active and not self.events.halted

    @property
    def epoch(self) -> int:
        return self.ctx.epoch

    def startup(self) -> None:
        """Start the event thread and take part in the election."""
        if self.zk.connected:
            self.events.resume()
        self.zk.add_listener(self._on_zk_state)
        self.events.start()
        self.events.put(ev.ControllerChange())

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop handling events, resign, and give up /controller if we hold it."""
        self.events.stopping = True
        self.zk.remove_listener(self._on_zk_state)
        self.events.close(timeout)
        # resign under the state lock (a snapshot may be reading); an event
        # thread stuck past the timeout does not hold this up for long
        held = self.events.state_lock.acquire(timeout=SHUTDOWN_LOCK_WAIT)
        try:
            self._resign("shutdown")
        finally:
            if held:
                self.events.state_lock.release()
        try:
            data, stat = self.zk.get(zkpaths.CONTROLLER)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete(zkpaths.CONTROLLER, version=stat.version)
        except Exception:  # not ours, gone, or no connection: nothing to give up
            pass

    def handle_controlled_shutdown(self, broker_id: int, broker_epoch: int
                                   ) -> concurrent.futures.Future:
        """Called by the request handler of the broker that is the controller.
        Returns a Future of (error code, [(topic, partition) still led by it]);
        never blocks."""
        e = ev.ControlledShutdown(broker_id, broker_epoch)
        if not self.is_active:
            e.future.set_result((E.NOT_CONTROLLER, []))
        else:
            self.events.put(e)
        return e.future

    def snapshot(self, timeout: float = 5.0) -> dict[str, Any]:
        """Test-only: the controller's view (ControllerContext.snapshot) and
        whether it is active, between two events. Taken under the event
        manager's state lock rather than as a queued event: the queue and its
        order stay as they are without observers, and it answers while the
        event thread waits for ZooKeeper; it waits only for the running event.
        TimeoutError if that event runs longer than `timeout`."""
        if not self.events.state_lock.acquire(timeout=timeout):
            raise TimeoutError(f"controller {self.broker_id}: an event ran longer than {timeout}s")
        try:
            return {"active": self.is_active, **self.ctx.snapshot()}
        finally:
            self.events.state_lock.release()

    # ------------------------------------------------------------ one event
    def _process(self, e: ev.ControllerEvent) -> None:
        """One event, on the event thread (docs/design.md#event-queue): its
        handler, then its requests sent and its records flushed. A failure
        resigns (another controller, session lost) or reloads the state."""
        handler = self._handlers.get(type(e))
        if handler is None:
            raise TypeError(f"controller event {e.name} has no handler")
        self.sclog.begin(e.name)
        try:
            handler(e)
            self._finish_event()
        except ControllerHalted:
            log.warning("controller %d halted by test hook (halt_after_step=%s)",
                        self.broker_id, self.halt_after_step)
            e.preempt()
        except ControllerMovedError as x:
            log.warning("controller %d: %s; resigning", self.broker_id, x)
            e.preempt()
            self.batch.clear()  # what it would say was not written
            self.sclog.discard()
            self._resign("another controller was elected")
            self.events.put(ev.ControllerChange())
        except SessionExpiredError:
            log.warning("controller %d: ZooKeeper session expired during %s", self.broker_id, e.name)
            e.preempt()
            self.batch.clear()
            self.sclog.discard()
            self.events.continue_in_new_session()
            self._resign("session expired")
        except Exception as x:
            # A ZooKeeper error (connection loss, timeout) or a bug: what was
            # written is in ZooKeeper, so send what it caused, then reload
            # everything from ZooKeeper as a new failover would (same epoch).
            lost = isinstance(x, (ConnectionLoss, KazooException, concurrent.futures.TimeoutError))
            (log.warning if lost else log.exception)(
                "controller %d: handling %s failed: %r; reloading state from ZooKeeper",
                self.broker_id, e.name, x)
            e.preempt()
            try:
                self._finish_event()
            except Exception:
                self.batch.clear()
            if self._active:
                self.events.put(ev.Reload(), front=True)

    def _finish_event(self) -> concurrent.futures.Future | None:
        tracker = None
        self.events.check_session()
        if self._active and self.channels is not None and not self.batch.empty():
            tracker = self.batch.send(self.broker_id, self.ctx.epoch, self.channels.send,
                                      self._on_response, self._record_request)
        else:
            self.batch.clear()
        self.sclog.flush()
        return tracker.done if tracker else None

    # ------------------------------------------------------------ ZooKeeper
    def _on_zk_state(self, state: str) -> None:
        """kazoo's thread: never block here."""
        if state == KazooState.CONNECTED:
            if self.events.resume():  # a new session
                self.events.put(ev.ControllerChange())
            else:
                # Same session: kazoo dropped our watches when it suspended.
                self.events.put(ev.ControllerChange())
                if self._active:
                    self.events.put(ev.Resync())
        elif state == KazooState.SUSPENDED:
            self.events.pause()
        elif state == KazooState.LOST:
            self.events.lose_session()
            if self._active:
                # fence now: a resumed zombie must not send anything more
                log.warning("controller %d: ZooKeeper session lost; fencing and resigning",
                            self.broker_id)
                if self.channels is not None:
                    self.channels.fence()
            self.events.put(ev.SessionExpired(), front=True)

    def _watcher(self, key: str, make: Callable[[WatchedEvent], ev.ControllerEvent | None]) -> Callable:
        """One watch function per (purpose, generation): kazoo keeps watchers in
        a set, so re-registering the same function does not multiply events."""
        gen = self._generation
        name = f"{key}@{gen}"
        w = self._watchers.get(name)
        if w is None:
            def w(event: WatchedEvent) -> None:
                if event.type == EventType.NONE or gen != self._generation or self.events.stopping:
                    return
                e = make(event)
                if e is not None:
                    self.events.put(e)
            self._watchers[name] = w
        return w

    def _controller_watch(self) -> Callable:
        w = self._watchers.get("controller")
        if w is None:
            def w(event: WatchedEvent) -> None:
                if event.type != EventType.NONE and not self.events.stopping:
                    self.events.put(ev.ControllerChange())
            self._watchers["controller"] = w
        return w

    # ------------------------------------------------------------- election
    def _on_ControllerChange(self, e: ev.ControllerChange) -> None:
        session = self.zk.client_id[0] if self.zk.client_id else None
        while True:
            stat = self.zk.exists(zkpaths.CONTROLLER, watch=self._controller_watch())
            if stat is None:
                try:
                    self.zk.create(zkpaths.CONTROLLER, zkpaths.dumps(
                        {"brokerid": self.broker_id, "timestamp": int(time.time() * 1000)}),
                        ephemeral=True)
                except NodeExistsError:
                    continue
                self.zk.exists(zkpaths.CONTROLLER, watch=self._controller_watch())
                self.active_controller_id = self.broker_id
                log.info("controller %d: won the controller election", self.broker_id)
                self._become_controller()
                return
            try:
                data, stat = self.zk.get(zkpaths.CONTROLLER)
            except NoNodeError:
                continue
            owner = (zkpaths.loads(data) or {}).get("brokerid", -1)
            self.active_controller_id = int(owner)
            ours = stat.ephemeralOwner == session
            if ours and not self._active:
                # we created it (before an error made us resign): still ours
                self._become_controller()
            elif not ours and self._active:
                self._resign(f"broker {owner} is the controller now")
            return

    def _become_controller(self) -> None:
        while True:
            try:
                data, stat = self.zk.get(zkpaths.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.zk.create(zkpaths.CONTROLLER_EPOCH, b"1", makepath=True)
                    epoch, version = 1, 0
                    break
                except NodeExistsError:
                    continue
            try:
                new = int(data.decode() or 0) + 1
                st = self.zk.set(zkpaths.CONTROLLER_EPOCH, str(new).encode(), version=stat.version)
                epoch, version = new, st.version
                break
            except BadVersionError:
                continue
        self.ctx.epoch = epoch
        self.ctx.epoch_zk_version = version
        self.store.epoch_version = version
        self.sclog.epoch = epoch
        log.info("controller %d: active with controller epoch %d", self.broker_id, epoch)
        self.sclog.record("controller", note=f"broker {self.broker_id} elected controller, epoch {epoch}")
        self._failover(increment_epoch=True)

    def _resign(self, why: str) -> None:
        if not self._active and self.channels is None:
            return
        was_epoch = self.ctx.epoch
        self._active = False
        self._generation += 1
        self._watchers = {k: v for k, v in self._watchers.items() if k == "controller"}
        for stop in self._timers:
            stop.set()
        self._timers = []
        if self.channels is not None:
            self.channels.shutdown()
            self.channels = None
        self.batch.clear()
        self.ctx.clear()
        self.psm.clear()
        self.rsm.clear()
        self.store.epoch_version = None
        log.warning("controller %d: resigned as controller (epoch %d): %s",
                    self.broker_id, was_epoch, why)
        self.sclog.record("controller", epoch=was_epoch,
                          note=f"broker {self.broker_id} resigned: {why}")
        self.sclog.flush(timeout=5.0)

    def _on_Reload(self, e: ev.Reload) -> None:
        log.warning("controller %d: reloading state (epoch %d)", self.broker_id, self.ctx.epoch)
        self._failover(increment_epoch=False)

    def _on_SessionExpired(self, e: ev.SessionExpired) -> None:
        self.batch.clear()
        self.sclog.discard()
        self._resign("ZooKeeper session expired")
        self.active_controller_id = -1

    def _on_Shutdown(self, e: ev.Shutdown) -> None:  # the event manager stops on it
        pass

    def _on_StaleEpochResponse(self, e: ev.StaleEpochResponse) -> None:
        data, _ = self.zk.get(zkpaths.CONTROLLER_EPOCH)
        if int(data.decode() or 0) > self.ctx.epoch:
            self._resign(f"broker {e.broker_id} has seen a newer controller epoch")
            self.events.put(ev.ControllerChange())

    # ------------------------------------------------------------ failover
    def _ensure_paths(self) -> None:
        for p in zkpaths.PERSISTENT_PATHS:
            self.zk.ensure_path(p)

    def _register_watches(self) -> dict[str, Any]:
        """Set every controller watch; returns what the reads returned."""
        zk = self.zk
        got: dict[str, Any] = {}
        got["brokers"] = zk.get_children(zkpaths.BROKER_IDS,
                                         watch=self._watcher("brokers", lambda _: ev.BrokerChange()))
        got["topics"] = zk.get_children(zkpaths.TOPICS,
                                        watch=self._watcher("topics", lambda _: ev.TopicChange()))
        zk.get_children(zkpaths.DELETE_TOPICS, watch=self._watcher("delete", lambda _: ev.DeleteTopic()))
        zk.get_children(zkpaths.ISR_CHANGE_NOTIFICATION,
                        watch=self._watcher("isr", lambda _: ev.IsrChangeNotification()))
        zk.exists(zkpaths.REASSIGN_PARTITIONS,
                  watch=self._watcher("reassign", lambda _: ev.PartitionReassigned()))
        zk.exists(zkpaths.PREFERRED_REPLICA_ELECTION,
                  watch=self._watcher("preferred", lambda _: ev.PreferredReplicaElection()))
        # the add/remove watches are set by their handlers (two levels)
        return got

    def _failover(self, increment_epoch: bool) -> None:
        """docs/design.md#controller-failover, steps 2-8 (step 1, the new
        controller epoch, is the election's)."""
        t0 = time.monotonic()
        self._generation += 1
        self._watchers = {k: v for k, v in self._watchers.items() if k == "controller"}
        epoch, ver = self.ctx.epoch, self.ctx.epoch_zk_version
        if self.channels is not None:
            self.channels.shutdown()
        self.ctx.clear()
        self.ctx.epoch, self.ctx.epoch_zk_version = epoch, ver
        self._active = True
        self._ensure_paths()
        got = self._register_watches()
        # 2. read all state, pipelined
        ids = {int(b) for b in got["brokers"] if b.isdigit()}
        registered: dict[int, int] = {}
        self.ctx.live_brokers = self.store.read_brokers(ids, created=registered)
        assignments = self.store.read_assignments(got["topics"])
        for topic, (ta, version) in assignments.items():
            self.ctx.remember_topic(topic, ta, version)
            for p, replicas in ta.partitions.items():
                self.ctx.set_assignment((topic, p), replicas)
        written: dict[TP, int] = {}
        for tp, lai in self.store.read_leader_and_isr(list(self.ctx.assignments),
                                                      modified=written).items():
            if lai is not None:
                self.ctx.leaders[tp] = lai
        marked = set(self.zk.get_children(zkpaths.DELETE_TOPICS))
        self.ctx.topics_being_deleted = marked & self.ctx.topics
        self.reassigner.load_in_progress()
        self.channels = ChannelManager(
            self.broker_id, peer_addresses=self.config.peer_addresses(),
            socket_timeout=self.config["controller.socket.timeout.ms"] / 1000,
            security=self.config.security)
        for b, reg in self.ctx.live_brokers.items():
            self.channels.add_broker(b, reg.host, reg.port)
        self.psm.initialize()
        self.rsm.initialize()
        t_read = time.monotonic() - t0
        # 3. leaders that restarted while no controller watched
        self._move_leaders_restarted_unseen(registered, written)
        # 4. LeaderAndIsr with INIT to every live broker (all its partitions),
        #    and the full metadata to everyone; sent as its own batch
        self.batch.init = True
        for tp, lai in self.ctx.leaders.items():
            if tp[0] in self.ctx.topics_being_deleted:
                continue
            replicas = self.ctx.replicas_for_request(tp)
            self.batch.add_leader_and_isr(replicas, tp, lai, replicas)
        # a live broker with no partition still gets an (empty) INIT
        for b in self.ctx.live_brokers:
            self.batch.leader_and_isr.setdefault(b, {})
        self.batch.add_update_metadata(None, None)
        self._send_init_batch()
        self.batch.init = False
        # 5. brokers that died while there was no controller
        live = self.ctx.live_or_shutting_down()
        dead = {b for lai in self.ctx.leaders.values() for b in (lai.leader, *lai.isr)
                if b >= 0 and b not in live}
        if dead:
            self._on_broker_failure(dead)
        # 6. leaders for leaderless partitions
        self.psm.trigger_online_state_change()
        # 7. resume reassignments
        self.reassigner.resume_all()
        # 8. the rest: handled as the events they are
        for e in (ev.AddPartition(), ev.PartitionRemove(), ev.DeleteTopic(),
                  ev.PreferredReplicaElection(), ev.IsrChangeNotification()):
            self.events.put(e)
        self._start_timers()
        log.info("controller %d: failover done in %.2fs (read state %.2fs): %d brokers, "
                 "%d topics, %d partitions", self.broker_id, time.monotonic() - t0, t_read,
                 len(self.ctx.live_brokers), len(self.ctx.topics), len(self.ctx.assignments))

    def _move_leaders_restarted_unseen(self, registered: dict[int, int],
                                       written: dict[TP, int]) -> None:
        """A live controller sees every broker death and rewrites the
        leaderAndISR of the partitions concerned (new leader, smaller ISR).
        So an ISR member registered after that znode's last write died and
        came back with no controller to see it, e.g. while its own broker
        was the controller. Such a leader may be back with a shorter log
        (disk loss); kept with its leader epoch, its followers would
        truncate to it. Where another ISR member is live and did not
        restart, it leads in a new epoch and the restarted members leave
        the ISR (as in a controlled shutdown); they rejoin once caught up.
        Otherwise nothing safer exists and the leader stays.

        Kafka closed the gap for a watching controller with broker epochs
        (KIP-380: the registration znode's czxid); the same zxids are
        compared here, against the partition state's last write. Must run
        before the INIT LeaderAndIsr, which then carries the new state."""
        live = self.ctx.live_ids()
        self._restarted_members = {}
        for tp, lai in self.ctx.leaders.items():
            at = written.get(tp)
            if at is None or lai.leader not in live or tp[0] in self.ctx.topics_being_deleted:
                continue
            back = {r for r in lai.isr if registered.get(r, -1) > at}
            if lai.leader in back and any(r in live and r not in back for r in lai.isr):
                self._restarted_members[tp] = back
        if not self._restarted_members:
            return
        leaders = sorted({self.ctx.leaders[tp].leader for tp in self._restarted_members})
        log.warning("controller %d: brokers %s restarted while no controller watched; moving "
                    "their leadership of %d partitions", self.broker_id, leaders,
                    len(self._restarted_members))
        self.sclog.record("brokers", note=f"restarted while no controller watched: {leaders}")
        self.psm.handle(sorted(self._restarted_members), PartitionState.ONLINE,
                        self.restarted_selector)
        self._restarted_members = {}

    def _send_init_batch(self) -> None:
        if self.channels is None:
            return
        self.batch.send(self.broker_id, self.ctx.epoch, self.channels.send,
                        self._on_response, self._record_request)

    def _start_timers(self) -> None:
        def every(seconds: float, make: Callable[[], ev.ControllerEvent]) -> None:
            stop = threading.Event()
            gen = self._generation

            def loop() -> None:
                while not stop.wait(seconds):
                    if gen != self._generation:
                        return
                    self.events.put(make())
            threading.Thread(target=loop, daemon=True,
                             name=f"controller-{self.broker_id}-timer").start()
            self._timers.append(stop)
        if self.config["auto.leader.rebalance.enable"]:
            every(self.config["leader.imbalance.check.interval.seconds"],
                  lambda: ev.PreferredReplicaElection(auto=True))
        every(self.config["reassignment.agent.interval.ms"] / 1000, ev.ReassignmentCheck)

    def _on_Resync(self, e: ev.Resync) -> None:
        self._register_watches()
        for x in (ev.BrokerChange(), ev.TopicChange(), ev.DeleteTopic(), ev.AddPartition(),
                  ev.PartitionRemove(), ev.PartitionReassigned(), ev.PreferredReplicaElection(),
                  ev.IsrChangeNotification(), ev.ReassignmentCheck()):
            self.events.put(x)

    # ------------------------------------------------------------ selectors
    def offline_selector(self, tp: TP, cur: LeaderAndIsr) -> sel.LeaderChoice:
        return sel.offline_leader(self.ctx.replicas_for_request(tp), cur, self.ctx.live_ids(),
                                  self.unclean)

    def preferred_selector(self, tp: TP, cur: LeaderAndIsr) -> sel.LeaderChoice:
        return sel.preferred_leader(self.ctx.assignments[tp], cur, self.ctx.live_ids())

    def reassigned_selector(self, tp: TP, cur: LeaderAndIsr) -> sel.LeaderChoice:
        return sel.reassigned_leader(self.ctx.reassigning[tp].new_replicas, cur, self.ctx.live_ids())

    def restarted_selector(self, tp: TP, cur: LeaderAndIsr) -> sel.LeaderChoice:
        back = self._restarted_members[tp]
        return sel.controlled_shutdown_leader(self.ctx.replicas_for_request(tp), cur,
                                              self.ctx.live_ids() - back, back)

    def shutdown_selector(self, tp: TP, cur: LeaderAndIsr) -> sel.LeaderChoice:
        return sel.controlled_shutdown_leader(self.ctx.replicas_for_request(tp), cur,
                                              self.ctx.live_ids(), self.ctx.shutting_down)

    # ---------------------------------------------------- broker responses
    def _record_request(self, broker_id: int, req: Any) -> None:
        kind = type(req).__name__.replace("Request", "")
        if isinstance(req, control.LeaderAndIsrRequest) and req.init:
            # failover resends everything: one summary record per broker
            self.sclog.record("request", to_state=kind + " (init)", target_broker=broker_id,
                              note=f"{len(req.partition_states)} partitions", level=logging.DEBUG)
        elif isinstance(req, control.LeaderAndIsrRequest):
            for s in req.partition_states:
                self.sclog.record("request", s.topic, s.partition, to_state=kind
                                  + (" (init)" if req.init else ""), leader=s.leader,
                                  leader_epoch=s.leader_epoch, isr=s.isr, target_broker=broker_id,
                                  level=logging.DEBUG)
            if not req.partition_states:
                self.sclog.record("request", to_state=kind + (" (init)" if req.init else ""),
                                  target_broker=broker_id, level=logging.DEBUG)
        elif isinstance(req, control.StopReplicaRequest):
            for p in req.partitions:
                self.sclog.record("request", p.topic, p.partition,
                                  to_state=kind + (" (delete)" if req.delete_partitions else ""),
                                  target_broker=broker_id, level=logging.DEBUG)
        else:
            self.sclog.record("request", to_state=kind, target_broker=broker_id,
                              note=f"{len(getattr(req, 'partition_states', ()))} partitions",
                              level=logging.DEBUG)

    def _on_response(self, broker_id: int, req: Any, resp: Any) -> None:
        """A sender thread: record rejections, never touch the context."""
        if resp is None:
            return
        errors = [(p.topic, p.partition, p.error) for p in getattr(resp, "partitions", ()) if p.error]
        if resp.error == E.STALE_CONTROLLER_EPOCH or any(
                err == E.STALE_CONTROLLER_EPOCH for _, _, err in errors):
            log.warning("controller %d: broker %d rejected %s of controller epoch %d: "
                        "STALE_CONTROLLER_EPOCH", self.broker_id, broker_id, type(req).__name__,
                        req.controller_epoch)
            parts = [(s.topic, s.partition) for s in getattr(req, "partition_states", ())] or \
                    [(p.topic, p.partition) for p in getattr(req, "partitions", ())] or [(None, None)]
            for t, p in parts:
                self.sclog.record("rejected", t, p, event="BrokerResponse", epoch=req.controller_epoch,
                                  to_state=type(req).__name__, target_broker=broker_id,
                                  note="STALE_CONTROLLER_EPOCH", level=logging.WARNING)
            threading.Thread(target=self.sclog.flush, kwargs={"timeout": 10.0}, daemon=True).start()
            self.events.put(ev.StaleEpochResponse(broker_id))
        elif resp.error == E.STALE_BROKER_EPOCH:
            # Another broker (or a later incarnation) now answers at the
            # address broker_id registered with; the broker change that
            # follows re-sends what the live broker needs.
            log.warning("controller %d: %s for broker %d refused at its address: it is not "
                        "that incarnation of broker %d (STALE_BROKER_EPOCH)", self.broker_id,
                        type(req).__name__, broker_id, broker_id)
        elif resp.error or errors:
            log.error("controller %d: broker %d answered %s with error %s%s", self.broker_id,
                      broker_id, type(req).__name__, E.name(resp.error),
                      f"; partition errors {errors[:5]}" if errors else "")

    # ------------------------------------- brokers (docs/design.md#broker-failure)
    def _on_BrokerChange(self, e: ev.BrokerChange) -> None:
        ids = self.zk.get_children(zkpaths.BROKER_IDS,
                                   watch=self._watcher("brokers", lambda _: ev.BrokerChange()))
        current = self.store.read_brokers({int(b) for b in ids if b.isdigit()})
        known = self.ctx.live_brokers
        dead = {b for b in known if b not in current}
        bounced = {b for b in current if b in known and current[b] != known[b]}
        new = {b for b in current if b not in known} | bounced
        dead |= bounced
        if not dead and not new:
            return
        log.info("controller %d: broker change: new %s dead %s (bounced %s)", self.broker_id,
                 sorted(new - bounced), sorted(dead - bounced), sorted(bounced))
        self.sclog.record("brokers", note=f"new {sorted(new)} dead {sorted(dead)} live {sorted(current)}")
        assert self.channels is not None
        for b in dead:
            known.pop(b, None)
            self.ctx.shutting_down.discard(b)
            self.channels.remove_broker(b)
        if dead:
            self._on_broker_failure(dead)
        for b in new:
            reg = current[b]
            known[b] = reg
            self.channels.add_broker(b, reg.host, reg.port)
        if new:
            self._on_broker_startup(new)

    def _on_broker_failure(self, dead: set[int]) -> None:
        """docs/design.md#broker-failure: new leaders for partitions led by
        dead brokers; dead replicas Offline (out of the ISRs); everyone gets
        the new metadata."""
        deleting = self.ctx.topics_being_deleted
        led = sorted(tp for tp in self.ctx.partitions_led_by(dead) if tp[0] not in deleting)
        self.psm.handle(led, PartitionState.OFFLINE)
        self.psm.handle(led, PartitionState.ONLINE, self.offline_selector)
        replicas = [(tp, b) for tp, b in self.ctx.replicas_on(dead) if tp[0] not in deleting]
        # replicas of partitions being reassigned onto a dead broker too
        for tp, r in self.ctx.reassigning.items():
            replicas += [(tp, b) for b in r.new_replicas
                         if b in dead and b not in self.ctx.assignments.get(tp, ())]
        self.rsm.handle(replicas, ReplicaState.OFFLINE)
        self.batch.add_update_metadata(None, [])

    def _on_broker_startup(self, new: set[int]) -> None:
        """New brokers, from the controller's side (docs/design.md#broker-failure,
        docs/design.md#broker-startup): the new brokers get the full
        metadata and a LeaderAndIsr for each of their replicas; leaderless
        partitions they host get leaders."""
        self.batch.add_update_metadata(new, None)
        self.batch.add_update_metadata(None, [])
        deleting = self.ctx.topics_being_deleted
        replicas = [(tp, b) for tp, b in self.ctx.replicas_on(new) if tp[0] not in deleting]
        for tp, r in self.ctx.reassigning.items():
            replicas += [(tp, b) for b in r.new_replicas
                         if b in new and b not in self.ctx.assignments.get(tp, ())]
        fresh = self.store.read_leader_and_isr({tp for tp, _ in replicas})
        for tp, lai in fresh.items():
            if lai is not None:
                self.ctx.leaders[tp] = lai
        self.rsm.handle(replicas, ReplicaState.ONLINE)
        self.psm.trigger_online_state_change()
        for tp in list(self.ctx.reassigning):
            if new.intersection(self.ctx.reassigning[tp].new_replicas):
                self.reassigner.check(tp)

    # ---------------------------------------------- topics (docs/design.md#topics)
    def _on_TopicChange(self, e: ev.TopicChange) -> None:
        topics = set(self.zk.get_children(zkpaths.TOPICS,
                                          watch=self._watcher("topics", lambda _: ev.TopicChange())))
        known = self.ctx.topics
        new, gone = topics - known, known - topics
        if new:
            self._load_and_create_topics(new)
        for t in sorted(gone):
            log.warning("controller %d: topic %s vanished from ZooKeeper without a delete "
                        "marker; stopping its replicas", self.broker_id, t)
            self.deletion.delete_topic_partitions(t)

    def _load_and_create_topics(self, topics: set[str]) -> None:
        assignments = self.store.read_assignments(topics)
        created: list[TP] = []
        for topic, (ta, version) in assignments.items():
            self.ctx.remember_topic(topic, ta, version)
            for p, replicas in sorted(ta.partitions.items()):
                if (topic, p) not in self.ctx.assignments:
                    self.ctx.set_assignment((topic, p), replicas)
                    created.append((topic, p))
        if created:
            log.info("controller %d: new topics %s (%d partitions)", self.broker_id,
                     sorted(assignments), len(created))
            self._on_new_partitions(created)

    def _on_new_partitions(self, tps: list[TP]) -> None:
        """Kafka's onNewPartitionCreation (docs/design.md#topics)."""
        replicas = [(tp, b) for tp in tps for b in self.ctx.assignments[tp]]
        self.psm.handle(tps, PartitionState.NEW)
        self.rsm.handle(replicas, ReplicaState.NEW)
        self.psm.handle(tps, PartitionState.ONLINE)
        self.rsm.handle(replicas, ReplicaState.ONLINE)

    def _on_DeleteTopic(self, e: ev.DeleteTopic) -> None:
        """docs/design.md#topics: the marked topics, to the deletion manager."""
        marked = set(self.zk.get_children(zkpaths.DELETE_TOPICS,
                                          watch=self._watcher("delete", lambda _: ev.DeleteTopic())))
        self.deletion.delete_topics(marked)

    # --------------------------- add / remove partitions (docs/design.md#partitions)
    def _read_admin_tree(self, base: str, key: str, make: Callable[[], ev.ControllerEvent]
                         ) -> dict[TP, tuple[bytes, str]]:
        """/admin/partitions_{add,remove}/T/P -> {(T, P): (data, path)}, with
        child watches on both levels."""
        topics = self.zk.get_children(base, watch=self._watcher(key, lambda _: make()))
        out: dict[TP, tuple[bytes, str]] = {}
        for t in topics:
            try:
                parts = self.zk.get_children(f"{base}/{t}", watch=self._watcher(key, lambda _: make()))
            except NoNodeError:
                continue
            if not parts:
                try:
                    self.zk.delete(f"{base}/{t}")
                except (NoNodeError, NotEmptyError):
                    pass
                continue
            got = self.store.get_many(f"{base}/{t}/{p}" for p in parts)
            for p in parts:
                v = got.get(f"{base}/{t}/{p}")
                if v is None:
                    continue
                try:
                    out[(t, int(p))] = (v[0], f"{base}/{t}/{p}")
                except ValueError:
                    log.error("controller %d: bad partition id in %s/%s/%s", self.broker_id, base, t, p)
                    self.store.delete_one(f"{base}/{t}/{p}")
        return out

    def _write_topic(self, topic: str, new_ar: dict[int, tuple[int, ...]], extra_ops: list[Op]) -> bool:
        """Write /brokers/topics/T conditionally together with extra_ops (one
        multi). Re-reads the version once on a conflict."""
        for _ in range(2):
            version = self.ctx.topic_versions.get(topic, -1)
            ta = TopicAssignment(new_ar, self.ctx.topic_ids.get(topic, ""))
            ops = [Op("set", zkpaths.topic_path(topic), ta.encode(), version)] + extra_ops
            res = self.store.run(ops)
            if not any(isinstance(r, Exception) for r in res.values()):
                self.ctx.topic_versions[topic] = res[0].version
                return True
            if isinstance(res[0], BadVersionError):
                got = self.store.read_assignments([topic]).get(topic)
                if got is None:
                    return False
                self.ctx.remember_topic(topic, got[0], got[1])
                # AR on ZooKeeper is authoritative for partitions we did not touch
                for p, r in got[0].partitions.items():
                    new_ar.setdefault(p, r)
                continue
            log.error("controller %d: writing topic %s failed: %s", self.broker_id, topic,
                      [r for r in res.values() if isinstance(r, Exception)])
            return False
        return False

    def _on_AddPartition(self, e: ev.AddPartition) -> None:
        """docs/design.md#partitions. For crash safety the new AR and the
        removal of the admin znodes are one multi, then leaders are
        initialized; a controller dying in between leaves partitions without
        leaderAndISR, which failover step 6 initializes."""
        pending = self._read_admin_tree(zkpaths.PARTITIONS_ADD, "add", ev.AddPartition)
        by_topic: dict[str, dict[int, tuple[tuple[int, ...], str]]] = {}
        for (t, p), (data, path) in sorted(pending.items()):
            err = None
            try:
                replicas = tuple(int(b) for b in zkpaths.loads(data))
            except (ValueError, TypeError):
                replicas, err = (), f"unreadable replica list {data!r}"
            if err is None:
                if t not in self.ctx.topics or t in self.ctx.topics_being_deleted:
                    err = "topic does not exist"
                elif (t, p) in self.ctx.assignments:
                    err = "partition already exists"
                elif not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
                    err = f"bad replica list {list(replicas)}"
            if err:
                log.error("controller %d: cannot add partition %s-%d: %s", self.broker_id, t, p, err)
                self.sclog.record("partition", t, p, to_state="rejected add", note=err,
                                  level=logging.ERROR)
                self.store.delete_one(path)
                continue
            by_topic.setdefault(t, {})[p] = (replicas, path)
        for t, adds in by_topic.items():
            new_ar = dict(self.ctx.topic_assignment(t))
            for p, (r, _) in adds.items():
                new_ar[p] = r
            if not self._write_topic(t, new_ar, [Op("delete", path) for _, path in adds.values()]):
                continue
            tps = [(t, p) for p in sorted(adds)]
            for p, (r, _) in adds.items():
                self.ctx.set_assignment((t, p), r)
            log.info("controller %d: added partitions %s to topic %s", self.broker_id, sorted(adds), t)
            self._on_new_partitions(tps)
            try:
                self.zk.delete(zkpaths.partitions_add_path(t))
            except (NoNodeError, NotEmptyError):
                pass

    def _on_PartitionRemove(self, e: ev.PartitionRemove) -> None:
        """docs/design.md#partitions: StopReplica(delete) to the replicas,
        then the new AR and the admin znode removal in one multi, then the
        partitions' znodes."""
        pending = self._read_admin_tree(zkpaths.PARTITIONS_REMOVE, "remove", ev.PartitionRemove)
        by_topic: dict[str, dict[int, str]] = {}
        for (t, p), (_, path) in sorted(pending.items()):
            err = None
            if (t, p) not in self.ctx.assignments or t in self.ctx.topics_being_deleted:
                err = "partition does not exist"
            if err:
                log.error("controller %d: cannot remove partition %s-%d: %s", self.broker_id, t, p, err)
                self.store.delete_one(path)
                continue
            by_topic.setdefault(t, {})[p] = path
        for t, removes in by_topic.items():
            new_ar = {p: r for p, r in self.ctx.topic_assignment(t).items() if p not in removes}
            if not new_ar:
                log.error("controller %d: refusing to remove every partition of %s; delete the "
                          "topic instead", self.broker_id, t)
                for path in removes.values():
                    self.store.delete_one(path)
                continue
            tps = [(t, p) for p in sorted(removes)]
            self.deletion.remove_partitions(tps)
            if self._write_topic(t, new_ar, [Op("delete", path) for path in removes.values()]):
                self.store.delete_trees([zkpaths.partition_path(*tp) for tp in tps])
            log.info("controller %d: removed partitions %s of topic %s", self.broker_id, sorted(removes), t)
            try:
                self.zk.delete(zkpaths.partitions_remove_path(t))
            except (NoNodeError, NotEmptyError):
                pass

    # ---------------------------------------------- preferred replica election
    def _on_PreferredReplicaElection(self, e: ev.PreferredReplicaElection) -> None:
        if e.auto:
            self._auto_rebalance()
            return
        watch = self._watcher("preferred", lambda _: ev.PreferredReplicaElection())
        if self.zk.exists(zkpaths.PREFERRED_REPLICA_ELECTION, watch=watch) is None:
            return
        try:
            data, _ = self.zk.get(zkpaths.PREFERRED_REPLICA_ELECTION)
            wanted = zkpaths.decode_partition_list(data)
        except NoNodeError:
            return
        except (ValueError, KeyError, TypeError):
            log.error("controller %d: unreadable preferred replica election request", self.broker_id)
            wanted = []
        self._elect_preferred(wanted)
        self.store.delete_one(zkpaths.PREFERRED_REPLICA_ELECTION)
        self.zk.exists(zkpaths.PREFERRED_REPLICA_ELECTION, watch=watch)

    def _elect_preferred(self, wanted: list[TP]) -> None:
        valid = []
        for tp in wanted:
            if tp not in self.ctx.assignments or tp[0] in self.ctx.topics_being_deleted:
                log.error("controller %d: preferred election for unknown partition %s-%d",
                          self.broker_id, *tp)
            elif tp in self.ctx.reassigning:
                log.error("controller %d: partition %s-%d is being reassigned; no preferred "
                          "election", self.broker_id, *tp)
            elif self.ctx.leaders.get(tp) and self.ctx.leaders[tp].leader == self.ctx.assignments[tp][0]:
                continue
            else:
                valid.append(tp)
        done, failed = self.psm.handle(valid, PartitionState.ONLINE, self.preferred_selector)
        log.info("controller %d: preferred replica election: %d moved, %d not", self.broker_id,
                 len(done), len(failed))

    def _auto_rebalance(self) -> None:
        """auto.leader.rebalance.enable: for each live broker, if more than
        leader.imbalance.per.broker.percentage of the partitions it is the
        preferred replica of are led by others, elect it where possible
        (Kafka's checkAndTriggerPartitionRebalance)."""
        if self.ctx.reassigning or self.ctx.topics_being_deleted:
            return
        pct = self.config["leader.imbalance.per.broker.percentage"]
        live = self.ctx.live_ids()
        wanted: list[TP] = []
        for b in live:
            preferred = [tp for tp, ar in self.ctx.assignments.items() if ar and ar[0] == b]
            if not preferred:
                continue
            off = [tp for tp in preferred if (lai := self.ctx.leaders.get(tp)) and lai.leader != b]
            if len(off) * 100 / len(preferred) > pct:
                wanted += [tp for tp in off if b in self.ctx.leaders[tp].isr]
        if wanted:
            log.info("controller %d: leader imbalance: electing preferred replicas of %d partitions",
                     self.broker_id, len(wanted))
            self._elect_preferred(sorted(wanted))

    # ------------------------------------------------------ ISR notifications
    def _on_IsrChangeNotification(self, e: ev.IsrChangeNotification) -> None:
        kids = self.zk.get_children(zkpaths.ISR_CHANGE_NOTIFICATION,
                                    watch=self._watcher("isr", lambda _: ev.IsrChangeNotification()))
        if not kids:
            return
        paths = [f"{zkpaths.ISR_CHANGE_NOTIFICATION}/{k}" for k in kids]
        got = self.store.get_many(paths)
        tps: set[TP] = set()
        for path, v in got.items():
            if v is not None:
                try:
                    tps.update(zkpaths.decode_partition_list(v[0]))
                except (ValueError, KeyError, TypeError):
                    log.error("controller %d: unreadable %s", self.broker_id, path)
        tps &= set(self.ctx.assignments)
        for tp, lai in self.store.read_leader_and_isr(tps).items():
            if lai is not None:
                self.ctx.leaders[tp] = lai
        if tps:
            self.batch.add_update_metadata(None, tps)
        self.store.run([Op("delete", p) for p in paths])
        for tp in tps & set(self.ctx.reassigning):
            self.reassigner.check(tp)

    # ---------------------------------- reassignment (docs/design.md#reassignment)
    def _on_PartitionReassigned(self, e: ev.PartitionReassigned) -> None:
        self.reassigner.on_admin_change()

    def _on_ReassignedPartitionIsrChange(self, e: ev.ReassignedPartitionIsrChange) -> None:
        if e.tp in self.ctx.reassigning:
            self.reassigner.check(e.tp)

    def _on_ReassignmentCheck(self, e: ev.ReassignmentCheck) -> None:
        for tp in list(self.ctx.reassigning):
            if tp in self.ctx.reassigning:
                self.reassigner.check(tp)

    def step_done(self, tp: TP, step: int) -> None:
        """Called by the reassigner after each KAFKA-42 step (the test hook)."""
        r = self.ctx.reassigning.get(tp)
        if r is not None:
            r.last_step = step
        self.sclog.record("reassignment", tp[0], tp[1], to_state=f"step {step} done",
                          leader=(self.ctx.leaders.get(tp) or LeaderAndIsr(-1, -1, (), 0)).leader,
                          note=f"RAR {list(r.new_replicas) if r else '?'}")
        if self.halt_after_step is not None and step == self.halt_after_step:
            # Send what the steps so far produced, then die.
            done = self._finish_event()
            if done is not None:
                try:
                    done.result(timeout=5)
                except concurrent.futures.TimeoutError:
                    pass
            self.events.halt()
            self._active = False
            if self.channels is not None:
                self.channels.fence()
            for stop in self._timers:
                stop.set()
            raise ControllerHalted()

    # ---------------------------------------------------- controlled shutdown
    def _on_ControlledShutdown(self, e: ev.ControlledShutdown) -> None:
        b = e.broker_id
        if b not in self.ctx.live_brokers:
            self._on_BrokerChange(ev.BrokerChange())
        reg = self.ctx.live_brokers.get(b)
        if reg is None:
            e.future.set_result((E.BROKER_NOT_AVAILABLE, []))
            return
        if e.broker_epoch >= 0 and reg.start_epoch != e.broker_epoch:
            log.warning("controller %d: controlled shutdown of broker %d with start epoch %d, "
                        "registered %d", self.broker_id, b, e.broker_epoch, reg.start_epoch)
            e.future.set_result((E.STALE_BROKER_EPOCH, []))
            return
        self.ctx.shutting_down.add(b)
        self.sclog.record("brokers", note=f"controlled shutdown of broker {b}", target_broker=b)
        deleting = self.ctx.topics_being_deleted
        led = sorted(tp for tp in self.ctx.partitions_led_by({b})
                     if len(self.ctx.assignments.get(tp, ())) > 1 and tp[0] not in deleting)
        self.psm.handle(led, PartitionState.ONLINE, self.shutdown_selector)
        followers = [(tp, b) for tp in self.ctx.partitions_on({b})
                     if tp[0] not in deleting and (lai := self.ctx.leaders.get(tp)) is not None
                     and lai.leader != b]
        self.rsm.handle(followers, ReplicaState.OFFLINE)
        # Kafka: partitions with one replica cannot move and do not hold the shutdown up
        remaining = sorted(tp for tp, lai in self.ctx.leaders.items()
                           if lai.leader == b and len(self.ctx.assignments.get(tp, ())) > 1)
        log.info("controller %d: controlled shutdown of broker %d: moved %d leaders, %d remain",
                 self.broker_id, b, len(led) - len(remaining), len(remaining))
        result = (E.NONE, remaining)
        done = self._finish_event()
        # Answer once the new leaders have acknowledged (bounded), so a broker
        # that stops right after the answer leaves no partition without a
        # working leader; never block the event thread for it.
        if done is None:
            e.future.set_result(result)
            return
        def answer(_f: Any = None) -> None:
            try:
                e.future.set_result(result)
            except concurrent.futures.InvalidStateError:
                pass
        timer = threading.Timer(CONTROLLED_SHUTDOWN_ACK_WAIT, answer)
        timer.daemon = True
        timer.start()
        done.add_done_callback(lambda f: (timer.cancel(), answer()))
