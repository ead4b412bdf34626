"""Fault recipes: short named sequences of faults that reach the states where
the famous anomalies live.

Random independent faults rarely chain into "the followers fall out of the
ISR, then the leader dies" (Jepsen 2013) or "a follower restarts and
truncates, then the leader dies before it caught up" (KIP-101): a 150-second
random run of the seed-faithful configuration found nothing that the
scripted scenarios (suites/) find in 30 seconds. A recipe is such a chain:
its later faults aim at the roles its earlier ones produced ("leader" is
still the leader with the ISR shrunk to itself; "follower" is whichever
follower is still in the ISR), at the moments those roles exist.

make_schedule (faults/nemesis.py) draws a recipe like a fault, by its weight
in `--faults`, and expands it into ordinary Steps marked with the recipe's
name, so replay, `--print-schedule` and shrinking work on them as on any
step. A recipe's parts may overlap: each part names a lane of the recipe,
parts of one lane follow each other (a later one starts only once the one
before healed: a restarted broker is registered again), parts of different
lanes run side by side.

The timings come from the broker's own: `lag_s` is how long until a replica
that went silent has left the ISR (see lag_s_of). Recipes reach a state;
whether an anomaly follows is the configuration's business: the fixed
configurations must come out of every recipe valid.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from cluster.config import BrokerConfig
from faults import injectors
from faults.injectors.base import FaultError

# A killed broker's restart: process start, ZooKeeper session, registration.
RESTART_S = 5.0


def lag_s_of(broker_config: Mapping[str, Any] | None = None) -> float:
    """Seconds until a replica that went silent has left the ISR: the leader
    drops a follower that stopped fetching after replica.lag.time.max.ms,
    the controller drops a dead broker when its ZooKeeper session expires;
    a recipe waits for the longer of the two."""
    cfg = BrokerConfig.from_dict(dict(broker_config or {}))
    return max(cfg["replica.lag.time.max.ms"], cfg["zookeeper.session.timeout.ms"]) / 1000.0


@dataclass(frozen=True)
class Knobs:
    """What a recipe's timings and shape depend on."""
    lag_s: float
    replication_factor: int


@dataclass(frozen=True)
class Part:
    """One fault of a recipe: when it starts after the recipe does, how long
    it holds, at whom, and in which of the recipe's lanes."""
    at_s: float
    fault: str
    duration_s: float
    target: str | None
    params: dict[str, Any] = field(default_factory=dict)
    lane: int = 0


# draw(rng, knobs) -> the parts. Draws use rng.uniform only, so that
# Recipe.longest can ask for every draw at its longest.
Draw = Callable[[random.Random, Knobs], list[Part]]


@dataclass(frozen=True)
class Recipe:
    name: str
    about: str
    draw: Draw

    def parts(self, rng: random.Random, knobs: Knobs) -> list[Part]:
        """The parts with their times drawn, rounded to 0.1 s like a schedule's."""
        return [Part(round(p.at_s, 1), p.fault, round(p.duration_s, 1), p.target, p.params, p.lane)
                for p in self.draw(rng, knobs)]

    def longest(self, knobs: Knobs) -> list[Part]:
        """The parts with every draw at its longest: what the recipe may need
        at most, and which faults it uses."""
        return self.parts(_Longest(), knobs)

    def faults(self) -> set[str]:
        return {p.fault for p in self.longest(Knobs(lag_s_of(), 3))}


class _Longest:
    """Stands in for a random.Random whose every uniform(a, b) draws the larger end."""

    def uniform(self, a: float, b: float) -> float:
        return max(a, b)


def span(parts: Iterable[Part]) -> float:
    """Seconds from a recipe's start to the end of its last part."""
    return max((p.at_s + p.duration_s for p in parts), default=0.0)


# -- the recipes -----------------------------------------------------------------------

def _isr_shrink_then_leader_loss(rng: random.Random, k: Knobs) -> list[Part]:
    """Jepsen 2013 (suites/test_suite_call_me_maybe.py): the leader cut off
    from the other brokers (ZooKeeper untouched) until the ISR is the leader
    alone, writes acknowledged by it alone meanwhile, then the leader killed
    while still cut off. Cutting the leader off, not one follower, puts every
    follower out of the ISR at once: with a follower left in it the election
    would be clean. With unclean election a follower leads without what the
    old leader acknowledged alone."""
    shrunk = k.lag_s + rng.uniform(1.0, 3.0)
    killed = shrunk + rng.uniform(2.0, 5.0)       # writes acknowledged by the leader alone
    return [Part(0.0, "partition-isolate", killed + rng.uniform(1.0, 3.0), "leader",
                 {"among": "brokers"}, lane=0),
            Part(killed, "kill", rng.uniform(5.0, 10.0), "leader", lane=1)]


def _restarted_follower_elected(rng: random.Random, k: Knobs) -> list[Part]:
    """KIP-101: a follower killed, restarted once its session expired (it
    registers at once, truncates to its checkpointed high watermark and
    fetches again), and the leader killed a second or so after it is back,
    before it caught up. The leader's kill follows the restart in the same
    lane, so it waits until the follower is registered. With three or more
    replicas the other follower is killed while the first is down (`follower`
    is then the one left in the ISR) and stays down until the leader's death
    was handled: an election among the in-sync would never pick the restarted
    one."""
    out_of_isr = k.lag_s + rng.uniform(1.0, 3.0)
    restarted = out_of_isr + rng.uniform(1.0, 3.0)
    parts = [Part(0.0, "kill", restarted, "follower", lane=0)]
    leader_killed = restarted + rng.uniform(0.2, 1.5)
    parts.append(Part(leader_killed, "kill", rng.uniform(5.0, 10.0), "leader", lane=0))
    if k.replication_factor >= 3:
        handled = leader_killed + RESTART_S + k.lag_s + 3.0
        parts.append(Part(out_of_isr, "kill", handled - out_of_isr, "follower", lane=1))
    return parts


def _power_loss_of_leader_and_follower(rng: random.Random, k: Knobs) -> list[Part]:
    """KIP-101's second scenario: the leader and a follower lose power (each
    replica cut back to its last fsync) within half a second; the follower
    comes back first, shorter, and may lead and take writes at offsets the
    old leader still holds with other values; the old leader returns after
    that, as its follower."""
    follower_back = rng.uniform(2.0, 6.0)
    return [Part(0.0, "lose-unfsynced", follower_back + k.lag_s + rng.uniform(2.0, 5.0), "leader",
                 lane=0),
            Part(rng.uniform(0.0, 0.5), "lose-unfsynced", follower_back, "follower", lane=1)]


# -- control-plane transitions, each followed by failures aimed at what it produced ---------

def _shutdown_then_new_leader_lost(rng: random.Random, k: Knobs) -> list[Part]:
    """A controlled shutdown of the leader (SIGTERM: the controller moves its
    leaderships away and takes it out of the ISRs first), then, while it is
    down, the new leader killed: the partition's next election has one
    replica fewer and must still pick an in-sync one."""
    new_leader_lost = rng.uniform(1.0, 3.0)
    return [Part(0.0, "stop", new_leader_lost + rng.uniform(4.0, 8.0), "leader", lane=0),
            Part(new_leader_lost, "kill", rng.uniform(4.0, 8.0), "leader", lane=1)]


def _shutdown_with_a_follower_cut_off(rng: random.Random, k: Knobs) -> list[Part]:
    """A follower cut off from the other brokers (ZooKeeper untouched: it
    stays registered) until it has left the ISR, then a controlled shutdown
    of the leader; the follower's links heal while the old leader is still
    down. The transition must reach the replica outside the ISR too: it
    learns the new leader, catches up and rejoins."""
    out_of_isr = k.lag_s + rng.uniform(1.0, 3.0)
    stopped = rng.uniform(6.0, 10.0)
    healed = out_of_isr + rng.uniform(1.0, stopped - 3.0)
    return [Part(0.0, "partition-isolate", healed, "follower", {"among": "brokers"}, lane=0),
            Part(out_of_isr, "stop", stopped, "leader", lane=1)]


def _followers_down_then_leader_lost(rng: random.Random, k: Knobs) -> list[Part]:
    """Two followers down at once (the ISR shrinks to the leader), both back
    (each catches up and is added to the ISR on its own), and the leader
    killed soon after they are back, perhaps before one rejoined: the ISR
    changes while more than one follower is out of sync, then an election."""
    out_of_isr = k.lag_s + rng.uniform(1.0, 3.0)
    back = out_of_isr + rng.uniform(1.0, 4.0)
    parts = [Part(0.0, "kill", back, "follower", lane=0)]
    if k.replication_factor >= 3:
        second = rng.uniform(0.0, 1.0)
        parts.append(Part(second, "kill", back - second, "follower", lane=1))
    parts.append(Part(back + RESTART_S + rng.uniform(0.5, 3.0), "kill", rng.uniform(4.0, 8.0),
                      "leader", lane=2))
    return parts


def _follower_misses_epochs(rng: random.Random, k: Knobs) -> list[Part]:
    """A follower frozen while the leadership changes twice (the leader
    killed, back, then its successor killed): the follower wakes up two or
    more leader epochs behind, with records of an old epoch past the point
    where the logs part, and must truncate to where its leader's history
    and its own agree."""
    first = rng.uniform(0.5, 2.0)
    first_down = RESTART_S + k.lag_s + rng.uniform(1.0, 3.0)
    second = first + first_down + rng.uniform(1.0, 3.0)
    woken = second + rng.uniform(2.0, 5.0)
    return [Part(0.0, "pause", woken, "follower", lane=0),
            Part(first, "kill", first_down, "leader", lane=1),
            Part(second, "kill", rng.uniform(4.0, 8.0), "leader", lane=2)]


def _preferred_while_catching_up(rng: random.Random, k: Knobs) -> list[Part]:
    """The leader (most often the preferred replica) killed, restarted, and
    a preferred election asked for while it catches up: it may lead only
    once it is in the ISR again."""
    down = k.lag_s + rng.uniform(1.0, 3.0)
    return [Part(0.0, "kill", down, "leader", lane=0),
            Part(down + rng.uniform(0.0, 1.5), "elect-preferred", rng.uniform(2.0, 6.0), None,
                 lane=1)]


def _reassignments_under_failures(rng: random.Random, k: Knobs) -> list[Part]:
    """Replicas moved, added and dropped one after the other (each a
    reassignment the controller or, in V2, the leader carries out step by
    step; a move or an addition needs a partition with fewer replicas than
    there are brokers), with a leader killed early in the first and a
    follower frozen during the second: the steps must resume and finish
    with the new replicas in sync."""
    move = rng.uniform(6.0, 10.0)
    grow = rng.uniform(6.0, 10.0)
    return [Part(0.0, "reassign", move, None, {"how": "move"}, lane=0),
            Part(move, "reassign", grow, None, {"how": "grow"}, lane=0),
            Part(move + grow, "reassign", rng.uniform(4.0, 8.0), None, {"how": "shrink"}, lane=0),
            Part(rng.uniform(0.5, 2.0), "kill", rng.uniform(4.0, 8.0), "leader", lane=1),
            Part(move + rng.uniform(0.5, 2.0), "pause", rng.uniform(3.0, 6.0), "follower",
                 lane=2)]


RECIPES: dict[str, Recipe] = {r.name: r for r in [
    Recipe("isr-shrink-then-leader-loss",
           "the leader cut off from the brokers until the ISR is itself, then killed (Jepsen 2013)",
           _isr_shrink_then_leader_loss),
    Recipe("restarted-follower-elected",
           "a follower restarted, the leader killed before it caught up (KIP-101)",
           _restarted_follower_elected),
    Recipe("power-loss-of-leader-and-follower",
           "the leader and a follower lose unfsynced data at once, the follower back first "
           "(KIP-101 scenario 2)", _power_loss_of_leader_and_follower),
    Recipe("shutdown-then-new-leader-lost",
           "a controlled shutdown of the leader, then its successor killed",
           _shutdown_then_new_leader_lost),
    Recipe("shutdown-with-a-follower-cut-off",
           "a follower cut off until it left the ISR, the leader shut down, the follower back "
           "while it is down", _shutdown_with_a_follower_cut_off),
    Recipe("followers-down-then-leader-lost",
           "two followers down, both back, then the leader killed while they rejoin",
           _followers_down_then_leader_lost),
    Recipe("follower-misses-epochs",
           "a follower frozen through two leader changes, then woken",
           _follower_misses_epochs),
    Recipe("preferred-while-catching-up",
           "the leader killed and restarted, a preferred election while it catches up",
           _preferred_while_catching_up),
    Recipe("reassignments-under-failures",
           "replicas added, moved and dropped while a leader dies and a follower freezes",
           _reassignments_under_failures),
]}
# The recipes about control-plane transitions (the pressure suite's own run).
TRANSITIONS = ("shutdown-then-new-leader-lost", "shutdown-with-a-follower-cut-off",
               "followers-down-then-leader-lost",
               "follower-misses-epochs", "preferred-while-catching-up",
               "reassignments-under-failures")


def check_name(name: str) -> None:
    """Refuse a name that is neither a fault of the catalogue nor a recipe."""
    if name not in RECIPES and name not in injectors.CATALOGUE:
        raise FaultError(f"unknown fault {name!r}; faults are {', '.join(injectors.CATALOGUE)}; "
                         f"recipes are {', '.join(RECIPES)}")


def faults_of(names: Iterable[str]) -> set[str]:
    """The catalogue faults that faults and recipes `names` use."""
    out: set[str] = set()
    for name in names:
        out |= RECIPES[name].faults() if name in RECIPES else {name}
    return out
