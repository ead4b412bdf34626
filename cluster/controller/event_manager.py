"""The controller's event queue and its thread (Kafka's ControllerEventManager;
docs/design.md#event-queue).

ZooKeeper watches, timers and the request handler only `put` events here;
one thread takes them one at a time and hands each to the controller's
`process`, which runs it to the end before the next. The thread does not
run an event (it preempts it: events.py) once the controller halted (a
test hook) or is stopping, or when the event needs an active controller
and this one is not. Before an event that needs ZooKeeper it waits while
the connection is suspended, as the session may be lost without our
knowing yet; an event taken after the session was lost is preempted,
except the election (docs/design.md#controller-failover).

While an event runs the thread holds `state_lock`: a reader on another
thread (Controller.snapshot) takes it too and so sees the state between
two events.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable

from kazoo.exceptions import SessionExpiredError

from . import events as ev

log = logging.getLogger("chaoslog.controller")

SLOW_EVENT = 1.0  # seconds: an event slower than this is logged ("<event> took")


class ControllerEventManager:
    """Handed the broker id (thread name, logs), the controller's `process`
    (one event, on this thread) and `is_active` (may it handle events that
    need an active controller)."""

    def __init__(self, broker_id: int, process: Callable[[ev.ControllerEvent], None],
                 is_active: Callable[[], bool]) -> None:
        self.broker_id = broker_id
        self._process_event = process
        self._is_active = is_active
        self._queue: deque[ev.ControllerEvent] = deque()
        self._cond = threading.Condition()
        self.thread: threading.Thread | None = None
        self.state_lock = threading.RLock()  # held while an event runs
        self.stopping = False  # set first when the controller stops: events are dropped
        self.halted = False    # the test hook stopped the controller dead
        self._connected = threading.Event()
        self._session_lost = False
        self._lost_count = 0      # sessions lost so far (kazoo's thread increments)
        self._event_session = 0   # _lost_count when the current event began
        self.events_handled = 0
        self.last_event_done = 0.0

    # ------------------------------------------------------------ the queue
    def put(self, e: ev.ControllerEvent, front: bool = False) -> None:
        with self._cond:
            if front:
                self._queue.appendleft(e)
            else:
                self._queue.append(e)
            self._cond.notify()

    def _take(self) -> ev.ControllerEvent:
        with self._cond:
            while not self._queue:
                self._cond.wait()
            return self._queue.popleft()

    def queue_size(self) -> int:
        return len(self._queue)

    # ----------------------------------------------------------- the thread
    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"controller-event-thread-{self.broker_id}")
        self.thread.start()

    def close(self, timeout: float) -> None:
        """Stop the thread after the event it is running; queued events are
        preempted. Waits up to `timeout` unless called from the thread."""
        self.stopping = True
        self.put(ev.Shutdown(), front=True)
        self._connected.set()  # wake a paused event thread
        if self.thread and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def halt(self) -> None:
        """Test hook (Controller halt_after_step): handle no more events."""
        self.halted = True

    def _run(self) -> None:
        while True:
            e = self._take()
            if isinstance(e, ev.Shutdown):
                self._drain()
                return
            if self.halted:
                e.preempt()
                continue
            if e.needs_active and not self._is_active():
                e.preempt()
                continue
            if isinstance(e, ev.SessionExpired):
                self._process(e)  # needs no ZooKeeper
                continue
            # Do nothing while ZooKeeper is unreachable: we may have lost the
            # session without knowing yet.
            while not self._connected.wait(1.0) and not self.stopping:
                pass
            if self.stopping or (self._session_lost and not isinstance(e, ev.ControllerChange)):
                e.preempt()
                continue
            self._process(e)

    def _drain(self) -> None:
        with self._cond:
            rest = list(self._queue)
            self._queue.clear()
        for e in rest:
            e.preempt()

    def _process(self, e: ev.ControllerEvent) -> None:
        self._event_session = self._lost_count
        start = time.monotonic()
        try:
            with self.state_lock:
                self._process_event(e)
        finally:
            self.events_handled += 1
            self.last_event_done = time.time()
            elapsed = time.monotonic() - start
            if elapsed > SLOW_EVENT:
                log.info("controller %d: %s took %.2fs", self.broker_id, e.name, elapsed)

    # ------------------------------------------------- the ZooKeeper session
    def pause(self) -> None:
        """Connection suspended (kazoo's thread): events wait."""
        self._connected.clear()

    def resume(self) -> bool:
        """Connected (kazoo's thread): events run again. True if this is a
        new session (the last one was lost)."""
        self._connected.set()
        was_lost, self._session_lost = self._session_lost, False
        return was_lost

    def lose_session(self) -> None:
        """The session expired (kazoo's thread): the running event stops at
        its next ZooKeeper access (check_session), queued ones are dropped
        until the election."""
        self._lost_count += 1
        self._session_lost = True

    def check_session(self) -> None:
        """Raise if the session was lost since the current event began: a
        handler blocked in a ZooKeeper call across a session expiry (kazoo
        retries it on the new session) must not go on with stale state."""
        if self._lost_count != self._event_session and \
                threading.current_thread() is self.thread:
            raise SessionExpiredError()

    def continue_in_new_session(self) -> None:
        """A session expiry stopped the current event: what it does next
        (resigning) is not stopped again."""
        self._event_session = self._lost_count
