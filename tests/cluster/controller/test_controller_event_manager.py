"""The controller's event queue and thread (cluster/controller/event_manager.py,
docs/design.md#event-queue): the real ControllerEventManager and its thread,
handed a `process` that records what it ran. No ZooKeeper."""
from __future__ import annotations

import threading
import time

import pytest
from kazoo.exceptions import SessionExpiredError

from cluster.controller import events as ev
from cluster.controller.event_manager import ControllerEventManager
from cluster.protocol import errors as E
from controller_fakes import wait_until


class Recorder:
    """A controller's `process` that records events and can be made to block."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.active = True
        self.gate = threading.Event()
        self.gate.set()
        self.inside = threading.Event()
        self.checks: list[str] = []
        self.manager: ControllerEventManager | None = None

    def process(self, e: ev.ControllerEvent) -> None:
        self.inside.set()
        self.gate.wait(10)
        if isinstance(e, ev.Reload):  # the test's "ZooKeeper access"
            try:
                self.manager.check_session()
                self.checks.append("ok")
            except SessionExpiredError:
                self.checks.append("expired")
        self.ran.append(e.name)


@pytest.fixture
def em():
    r = Recorder()
    m = ControllerEventManager(7, r.process, lambda: r.active)
    r.manager = m
    m.resume()
    m.start()
    yield m, r
    r.gate.set()
    m.close(5)


def test_controller_event_manager_runs_events_in_order_front_first(em):
    m, r = em
    r.gate.clear()
    m.put(ev.BrokerChange())
    wait_until(r.inside.is_set, what="first event running")
    m.put(ev.TopicChange())
    m.put(ev.Reload(), front=True)
    assert m.queue_size() == 2
    r.gate.set()
    wait_until(lambda: len(r.ran) == 3, what="three events")
    assert r.ran == ["BrokerChange", "Reload", "TopicChange"]
    assert m.events_handled == 3 and m.queue_size() == 0


def test_controller_event_manager_preempts_when_not_active_or_halted(em):
    m, r = em
    r.active = False
    shutdown = ev.ControlledShutdown(2, 1)
    m.put(shutdown)
    assert shutdown.future.result(5) == (E.NOT_CONTROLLER, [])
    m.put(ev.ControllerChange())  # needs no active controller
    wait_until(lambda: r.ran == ["ControllerChange"], what="election ran")
    r.active = True
    m.halt()
    again = ev.ControlledShutdown(2, 1)
    m.put(again)
    m.put(ev.ControllerChange())
    assert again.future.result(5) == (E.NOT_CONTROLLER, [])
    wait_until(lambda: m.queue_size() == 0, what="queue emptied")
    assert r.ran == ["ControllerChange"]


def test_controller_event_manager_waits_while_suspended_but_resigns_at_once(em):
    m, r = em
    m.pause()
    m.put(ev.BrokerChange())
    m.put(ev.SessionExpired(), front=True)
    wait_until(lambda: r.ran == ["SessionExpired"], what="SessionExpired handled while suspended")
    time.sleep(0.3)
    assert r.ran == ["SessionExpired"]  # BrokerChange waits for the connection
    assert m.resume() is False  # the same session
    wait_until(lambda: r.ran == ["SessionExpired", "BrokerChange"], what="BrokerChange after resume")


def test_controller_event_manager_lost_session_stops_the_running_event_and_drops_the_rest(em):
    m, r = em
    r.gate.clear()
    m.put(ev.Reload())
    wait_until(r.inside.is_set, what="event running")
    m.put(ev.BrokerChange())
    m.put(ev.ControllerChange())
    m.lose_session()
    m.check_session()  # not the event thread: does not raise
    r.gate.set()
    wait_until(lambda: r.ran[-1:] == ["ControllerChange"], what="election after the loss")
    assert r.checks == ["expired"]
    assert r.ran == ["Reload", "ControllerChange"]  # BrokerChange was dropped
    assert m.resume() is True  # a new session


def test_controller_event_manager_close_answers_queued_events(em):
    m, r = em
    r.gate.clear()
    m.put(ev.BrokerChange())
    wait_until(r.inside.is_set, what="event running")
    queued = ev.ControlledShutdown(3, 1)
    m.put(queued)
    closer = threading.Thread(target=m.close, args=(5,))
    closer.start()
    r.gate.set()
    closer.join(10)
    assert not m.thread.is_alive() and m.stopping
    assert queued.future.result(1) == (E.NOT_CONTROLLER, [])
    assert r.ran == ["BrokerChange"]


def test_controller_event_manager_holds_the_state_lock_while_an_event_runs(em):
    m, r = em
    r.gate.clear()
    m.put(ev.BrokerChange())
    wait_until(r.inside.is_set, what="event running")
    assert not m.state_lock.acquire(timeout=0.2)
    r.gate.set()
    assert m.state_lock.acquire(timeout=5)
    m.state_lock.release()
