"""Leader selectors (KAFKA-42 §5), pure functions of the current leaderAndISR,
the assigned replicas and the live brokers.

Each returns a LeaderChoice: the new leader and ISR, and which replicas must be
told (the LeaderAndIsr recipients). The caller writes the choice to ZooKeeper
conditionally with leader_epoch + 1 and the controller epoch; selectors never
touch ZooKeeper. A selector that cannot choose raises NoLeaderError and the
partition keeps its old state.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Collection, Sequence

from cluster.zkpaths import NO_LEADER, LeaderAndIsr

log = logging.getLogger("chaoslog.controller")


class NoLeaderError(Exception):
    """The selector found no acceptable leader."""


@dataclass(frozen=True)
class LeaderChoice:
    leader: int
    isr: tuple[int, ...]
    recipients: tuple[int, ...]  # replicas to send the LeaderAndIsr to
    unclean: bool = False        # an out-of-sync replica was chosen: data loss possible


def _live(replicas: Sequence[int], live: Collection[int]) -> tuple[int, ...]:
    return tuple(r for r in replicas if r in live)


def init_leader(assigned: Sequence[int], live: Collection[int]) -> LeaderChoice:
    """A new partition (docs/design.md#partition-states): the first live
    replica of AR (the preferred one when it is up, as Kafka does) leads, all
    live AR replicas form the ISR."""
    live_ar = _live(assigned, live)
    if not live_ar:
        raise NoLeaderError(f"no replica of {list(assigned)} is alive")
    return LeaderChoice(live_ar[0], live_ar, live_ar)


def offline_leader(assigned: Sequence[int], current: LeaderAndIsr, live: Collection[int],
                   unclean_enabled: bool) -> LeaderChoice:
    """The offline selector (docs/design.md#leader-selection): a live ISR
    member if there is one (ISR = its live members); otherwise, only if
    unclean election is enabled, a live AR replica with ISR = [it] (data
    loss: the caller logs a WARNING); otherwise leader -1.

    With leader -1 the ISR is left as it was, so that when one of its members
    returns it can be elected cleanly (Kafka >= 1.1 keeps the last ISR too).
    The ISR member chosen is the first in AR order, which prefers the
    preferred replica (Kafka 0.8 took ISR order; later Kafka took AR order)."""
    live_isr = [r for r in current.isr if r in live]
    if live_isr:
        ordered = [r for r in assigned if r in live_isr] + [r for r in live_isr if r not in assigned]
        return LeaderChoice(ordered[0], tuple(live_isr), _live(assigned, live))
    live_ar = _live(assigned, live)
    if live_ar and unclean_enabled:
        return LeaderChoice(live_ar[0], (live_ar[0],), live_ar, unclean=True)
    return LeaderChoice(NO_LEADER, tuple(current.isr), live_ar)


def reassigned_leader(reassigned: Sequence[int], current: LeaderAndIsr,
                      live: Collection[int]) -> LeaderChoice:
    """KAFKA-42: a live, in-sync member of RAR leads; the ISR is unchanged
    (old replicas leave it when they are stopped)."""
    candidates = [r for r in reassigned if r in live and r in current.isr]
    if not candidates:
        raise NoLeaderError(f"no live in-sync replica among reassigned {list(reassigned)} "
                            f"(isr {list(current.isr)})")
    return LeaderChoice(candidates[0], tuple(current.isr), _live(reassigned, live))


def preferred_leader(assigned: Sequence[int], current: LeaderAndIsr,
                     live: Collection[int]) -> LeaderChoice:
    """The first AR replica, if it is live and in the ISR."""
    preferred = assigned[0]
    if current.leader == preferred:
        raise NoLeaderError(f"preferred replica {preferred} already leads")
    if preferred not in live or preferred not in current.isr:
        raise NoLeaderError(f"preferred replica {preferred} is not live and in sync "
                            f"(isr {list(current.isr)})")
    return LeaderChoice(preferred, tuple(current.isr), _live(assigned, live))


def controlled_shutdown_leader(assigned: Sequence[int], current: LeaderAndIsr,
                               live: Collection[int], shutting_down: Collection[int]) -> LeaderChoice:
    """Another live ISR member leads and the shutting-down brokers leave the
    ISR. `live` must already exclude the shutting-down brokers."""
    new_isr = tuple(r for r in current.isr if r not in shutting_down)
    candidates = [r for r in assigned if r in new_isr and r in live]
    if not candidates:
        raise NoLeaderError(f"no other live replica in isr {list(current.isr)}")
    recipients = tuple(r for r in assigned if r in live and r not in shutting_down)
    return LeaderChoice(candidates[0], new_isr, recipients)
