"""Issue 5's must-shows (b) and (c): a partition's grudge really holds, and
a controller that loses its ZooKeeper session is replaced in time.

(b) During "isolate broker-2" (partition-isolate, target broker-2):
    - broker-2 reaches neither its peers nor ZooKeeper: TCP connections from
      inside its container to broker-1, broker-3 and zk-1 fail, and its
      session expires (/brokers/ids/2 disappears, within the session
      timeout + 5 s);
    - broker-1 and broker-3 still reach each other and ZooKeeper (the same
      check from inside their containers), stay registered throughout, and
      a topic on them alone (replicas [1, 3], min.insync.replicas=2) keeps
      its ISR [1, 3] and keeps acknowledging acks=all writes;
    - after the heal broker-2 registers again and the run is valid.
(c) zk-expire on the controller makes another broker the controller within
    the session timeout + 2 s (measured from the expiry to /controller
    naming another broker; /controller_epoch grows), three times in a row
    while acks=all writes go on; the run is valid.

Broker config SAFE. Docker backend: (b) runs its reachability probes inside
the containers (`cluster.exec`).
"""
from __future__ import annotations

import time

import pytest

from cluster import zkpaths
from suite_helpers import (S, SAFE, SESSION_TIMEOUT_S, AckWatch, ZkView, broker, describe,
                           wait_for)

pytestmark = [pytest.mark.docker]

PROBE = ("import socket, sys\n"
         "for target in sys.argv[1:]:\n"
         "    host, port = target.rsplit(':', 1)\n"
         "    try:\n"
         "        socket.create_connection((host, int(port)), timeout=1.5).close()\n"
         "        print(target, 'ok')\n"
         "    except OSError as e:\n"
         "        print(target, 'fail', type(e).__name__)\n")


def reachable(cluster, src: str, dsts: list[str]) -> dict[str, bool]:
    """From inside `src`'s container: which of `dsts` accept a TCP connection."""
    addr = {d: f"{cluster.node_ip(d)}:{2181 if d.startswith('zk-') else 9092}" for d in dsts}
    code, out = cluster.exec(src, ["python", "-c", PROBE, *addr.values()])
    assert code == 0, out
    seen = dict(line.split()[:2] for line in out.splitlines() if line.strip())
    return {d: seen.get(a) == "ok" for d, a in addr.items()}


@pytest.mark.broker_config(**SAFE)
def test_isolating_broker_2_cuts_it_off_and_only_it(cluster, workload, nemesis, history):
    acks = AckWatch(history)
    tp = ("t13", 0)
    run = workload({"t13": 1}, acks="all", rate=60, producers=1, slots=4, consumers=1,
                   assignment={"t13": {0: [1, 3]}})
    zk = ZkView(run.zk)
    wait_for(lambda: set(zk.lai("t13").isr) == {1, 3}, 30, "ISR [1, 3]")
    acks.wait_acks(20, 0, 20, "before the partition", tp)
    everyone = ["broker-1", "broker-2", "broker-3", "zk-1"]
    assert all(reachable(cluster, "broker-2", ["broker-1", "broker-3", "zk-1"]).values())

    t_iso = acks.now()
    started = time.monotonic()
    iso = nemesis.inject("partition-isolate", "broker-2")
    assert set(iso.targets) == set(everyone), iso.targets
    # broker-2 reaches nobody; the others reach each other and ZooKeeper.
    assert reachable(cluster, "broker-2", ["broker-1", "broker-3", "zk-1"]) == \
        {"broker-1": False, "broker-3": False, "zk-1": False}
    assert reachable(cluster, "broker-1", ["broker-3", "zk-1"]) == {"broker-3": True, "zk-1": True}
    assert reachable(cluster, "broker-3", ["broker-1", "zk-1"]) == {"broker-1": True, "zk-1": True}
    # broker-2's session expires; the others stay registered and in the ISR meanwhile.
    samples = []

    def gone():
        ids, lai = zk.registered(), zk.lai("t13")
        samples.append((ids, lai.isr))
        return 2 not in ids
    wait_for(gone, SESSION_TIMEOUT_S + 5, "broker-2's registration disappearing")
    expired_after = time.monotonic() - started
    hold_until = started + SESSION_TIMEOUT_S + 4

    def still_fine():
        ids, lai = zk.registered(), zk.lai("t13")
        samples.append((ids, lai.isr))
        return time.monotonic() >= hold_until
    wait_for(still_fine, SESSION_TIMEOUT_S + 10, "the rest of the isolation")
    assert all({1, 3} <= ids for ids, _ in samples), [s for s in samples if not {1, 3} <= s[0]]
    assert all(set(isr) == {1, 3} for _, isr in samples), [s for s in samples if set(s[1]) != {1, 3}]
    t_heal = acks.now()
    during = acks.count(t_iso + 1 * S, tp, until=t_heal)
    assert during >= 20, f"only {during} acks=all writes acknowledged by brokers 1 and 3 during the isolation"

    iso.stop()
    wait_for(lambda: 2 in zk.registered(), 30, "broker-2 registering again")
    assert all(reachable(cluster, "broker-2", ["broker-1", "broker-3", "zk-1"]).values())
    run.finish(quiet_s=2.0, final_timeout_s=60, settle_s=3.0)
    summary = run.verdict()
    print(f"isolate broker-2: session gone after {expired_after:.1f} s; {len(samples)} samples of "
          f"brokers 1 and 3 registered with ISR [1, 3]; {during} writes acknowledged during; "
          f"{describe(summary)}")
    assert summary["valid"] is True, describe(summary)


@pytest.mark.broker_config(**SAFE)
def test_controller_session_expiry_moves_the_controller(cluster, workload, nemesis, history):
    acks = AckWatch(history)
    run = workload({"t": 3}, replication_factor=3, acks="all", rate=60, producers=1, slots=4)
    zk = ZkView(run.zk)
    wait_for(lambda: zk.fully_replicated({"t": 3}), 30, "a full ISR on every partition")
    acks.wait_acks(20, 0, 20, "before the expiries")
    took = []
    for trial in range(3):
        before = wait_for(zk.controller, 30, "a controller")
        epoch = int(zkpaths.loads(zk.zk.get(zkpaths.CONTROLLER_EPOCH)[0]))
        t0 = time.monotonic()
        inj = nemesis.inject("zk-expire", "controller")
        assert inj.targets == [broker(before)], (inj.targets, before)
        after = wait_for(lambda: (c := zk.controller()) is not None and c != before and c,
                         SESSION_TIMEOUT_S + 2, f"trial {trial}: another controller than broker {before}")
        took.append(time.monotonic() - t0)
        # The new controller bumps /controller_epoch right after taking /controller.
        wait_for(lambda: int(zkpaths.loads(zk.zk.get(zkpaths.CONTROLLER_EPOCH)[0])) > epoch, 5,
                 f"trial {trial}: /controller_epoch growing past {epoch}")
        inj.stop()   # waits until the expired broker has registered again
        wait_for(lambda: zk.fully_replicated({"t": 3}), 60, f"trial {trial}: full ISRs again")
        t1 = acks.now()
        acks.wait_acks(20, t1, 30, f"after trial {trial}")
        assert after in zk.registered()
    run.finish(quiet_s=2.0, final_timeout_s=60, settle_s=3.0)
    summary = run.verdict()
    print(f"controller moved after {', '.join(f'{t:.2f}' for t in took)} s "
          f"(limit {SESSION_TIMEOUT_S + 2:g} s); {describe(summary)}")
    assert max(took) <= SESSION_TIMEOUT_S + 2
    assert summary["valid"] is True, describe(summary)
