"""Healing everything, whoever broke it.

`heal_all` is the stateless last resort: it knows nothing of what was done
and repairs everything any injector can do, with the abilities the cluster
declares (contracts/abilities.py): frozen or stopped nodes, iptables chains,
proxy toxics and disabled proxies; so it also repairs faults whose process
died. `final_heal` is the end of every run's schedule: heal_all, then wait
until every broker is registered again, recorded in the history as a
`final-heal` start/stop pair. It sits above the injectors (it uses the
network ones' heals) and below the nemesis and the harness.
"""
from __future__ import annotations

from typing import Callable

from contracts.abilities import Cluster, PauseResume, ProcessControl, can
from faults.injectors import net
from faults.injectors.base import FaultContext, wait_registered

FINAL_HEAL = "final-heal"


def heal_all(cluster: Cluster, log: Callable[[str], None] = lambda m: None) -> list[str]:
    """Undo every kind of fault on `cluster`. Returns what it did (for the log
    and the history's final heal detail). Never raises for one part failing:
    it tries the others and reports."""
    done: list[str] = []
    try:
        nodes = cluster.nodes()
    except Exception as e:  # noqa: BLE001
        return [f"cannot list nodes: {e}"]
    for n in nodes if can(cluster, PauseResume) else []:
        try:
            if n.state == "paused":
                cluster.resume_node(n.name)
                done.append(f"resumed {n.name}")
        except Exception as e:  # noqa: BLE001
            done.append(f"resume {n.name} failed: {e}")
    for part in (net.heal_iptables, net.heal_proxies):
        try:
            done.extend(part(cluster))
        except Exception as e:  # noqa: BLE001
            done.append(f"{part.__name__} failed: {e}")
    # ZooKeeper before brokers: a broker cannot register without it.
    restartable = cluster.nodes() if can(cluster, ProcessControl) else []
    for n in sorted(restartable, key=lambda n: n.kind != "zookeeper"):
        try:
            if n.state == "stopped":
                cluster.start_node(n.name)
                done.append(f"started {n.name}")
        except Exception as e:  # noqa: BLE001
            done.append(f"start {n.name} failed: {e}")
    for line in done:
        log(f"heal: {line}")
    return done


def final_heal(ctx: FaultContext, wait_registered_brokers: bool = True) -> list[str]:
    """heal_all, then wait for every broker to be registered; recorded as a
    `final-heal` start/stop pair when the history is still open."""
    rec = ctx.recorder
    if rec is not None and rec.closed:
        rec = None
    names = [n.name for n in ctx.cluster.nodes()]
    if rec is not None:
        rec.nemesis(FINAL_HEAL, "start", names, None)
    done = heal_all(ctx.cluster, ctx.log)
    if wait_registered_brokers:
        late = [n for n in names if n.startswith("broker-") and not wait_registered(ctx, n)]
        if late:
            done.append(f"not registered after the heal: {','.join(late)}")
    if rec is not None:
        rec.nemesis(FINAL_HEAL, "stop", names, "; ".join(done) or "nothing to heal")
    return done
