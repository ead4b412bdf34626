"""Nemesis schedules: which fault, when, for how long, aimed at which role.

A Schedule is plain data drawn from one random.Random(seed): the same seed
and the same settings give the same schedule, byte for byte, whether printed
(`chaoslog run --seed S --print-schedule`) or run. Roles, not nodes, are
stored; who holds a role is decided from ZooKeeper when the step starts, with
the nemesis's own random.Random(seed) for choices among candidates.

Faults run one at a time: start, hold for the step's duration, heal, wait the
interval, next. A recipe (faults/recipes.py) is drawn like a fault and becomes
several steps, marked with its name, in lanes of their own where they overlap.
Every schedule ends the same way: a final heal of everything (faults/heal.py),
a quiet period for the cluster to settle, then the workload's final reads.
"""
from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping

from contracts.deadline import Deadline
from faults import injectors, recipes
from faults.heal import FINAL_HEAL, final_heal
from faults.injectors.base import FaultContext, FaultError, Injector
from faults.targets import TargetError, qualify

@dataclass(frozen=True)
class Step:
    at_s: float
    fault: str
    duration_s: float
    target: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    lane: int = 0            # steps of one lane run one after the other; lanes overlap
    recipe: str | None = None  # the recipe (faults/recipes.py) this step is part of
    chain: int | None = None   # which drawn recipe: the steps of one draw share it


@dataclass
class Schedule:
    seed: int
    duration_s: float
    quiet_s: float
    steps: list[Step]
    settings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "duration_s": self.duration_s, "quiet_s": self.quiet_s,
                "settings": self.settings, "steps": [asdict(s) for s in self.steps],
                "final": {"heal_at_s": self.duration_s, "final_reads_at_s": self.duration_s + self.quiet_s}}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Schedule":
        return cls(d["seed"], d["duration_s"], d["quiet_s"],
                   [Step(s["at_s"], s["fault"], s["duration_s"], s.get("target"),
                         dict(s.get("params") or {}), int(s.get("lane", 0)), s.get("recipe"),
                         s.get("chain"))
                    for s in d["steps"]], dict(d.get("settings") or {}))

    def to_text(self) -> str:
        lines = [f"schedule seed={self.seed} duration={self.duration_s:g}s quiet={self.quiet_s:g}s "
                 f"steps={len(self.steps)}"]
        lanes = self.settings.get("overlap", 1) > 1 or any(s.lane for s in self.steps)
        for s in self.steps:
            params = " ".join(f"{k}={v}" for k, v in sorted(s.params.items()))
            lane = f"  lane {s.lane}" if lanes else ""
            recipe = f"  [{s.recipe}]" if s.recipe else ""
            lines.append(f"  {s.at_s:8.1f}s  {s.fault:<18} for {s.duration_s:5.1f}s  "
                         f"target={s.target or '-':<12} {params}".rstrip() + lane + recipe)
        lines.append(f"  {self.duration_s:8.1f}s  {FINAL_HEAL}")
        lines.append(f"  {self.duration_s + self.quiet_s:8.1f}s  final reads")
        return "\n".join(lines)


def parse_weights(faults: Iterable[str] | Mapping[str, float]) -> dict[str, float]:
    """`["kill", "pause"]` or `["kill:3", "pause:1"]` or {"kill": 3}: fault or
    recipe -> weight."""
    if isinstance(faults, Mapping):
        items = list(faults.items())
    else:
        items = []
        for f in faults:
            name, _, w = f.partition(":")
            try:
                items.append((name.strip(), float(w) if w else 1.0))
            except ValueError:
                raise FaultError(f"fault weight in {f!r} is not a number") from None
    out: dict[str, float] = {}
    for name, w in items:
        recipes.check_name(name)  # unknown names are refused here
        if w <= 0:
            raise FaultError(f"fault {name!r}: weight must be positive")
        out[name] = out.get(name, 0.0) + w
    return out


def make_schedule(seed: int, faults: Iterable[str] | Mapping[str, float], *, duration_s: float,
                  interval_s: tuple[float, float] = (5.0, 10.0),
                  fault_duration_s: tuple[float, float] = (5.0, 15.0),
                  quiet_s: float = 10.0, brokers: int = 3, zookeepers: int = 1,
                  replication_factor: int = 3, targets: Mapping[str, str] | None = None,
                  params: Mapping[str, Mapping[str, Any]] | None = None,
                  overlap: int = 1, lag_s: float | None = None,
                  refuses: Callable[[str, str | None], str | None] | None = None) -> Schedule:
    """Draw a schedule. `targets` pins a fault's role (fault -> role), `params`
    fixes some of its parameters (fault -> {k: v}); everything else is drawn,
    a role among those the cluster does not refuse (`refuses(fault, role)`,
    e.g. the controller in V2 coordination).
    `overlap` lanes of faults run side by side (each lane one fault at a
    time), so faults overlap: a kill during a partition, a pause during a
    session expiry. Times are rounded to 0.1 s so the printed and the run
    schedule agree.

    `faults` may name recipes (faults/recipes.py) too: a recipe drawn is
    placed whole in its lane, which goes on after the recipe's last part;
    near the end only what fits in the time left is drawn. Recipes choose
    their own roles and parameters (`targets` and `params` are for faults
    drawn alone) and time themselves by `lag_s` (default: the broker's
    defaults, recipes.lag_s_of)."""
    weights = parse_weights(faults)
    lo_i, hi_i = interval_s
    lo_d, hi_d = fault_duration_s
    if not (0 <= lo_i <= hi_i and 0 < lo_d <= hi_d):
        raise FaultError("intervals and fault durations must be ranges of positive seconds")
    if overlap < 1:
        raise FaultError("overlap is the number of fault lanes: at least 1")
    knobs = recipes.Knobs(recipes.lag_s_of() if lag_s is None else lag_s, replication_factor)
    drawn_recipes = [n for n in weights if n in recipes.RECIPES]
    if drawn_recipes and replication_factor < 2:
        raise FaultError(f"recipe {drawn_recipes[0]} needs followers: a replication factor of 2 or more")
    # The least time a draw needs: a fault its shortest duration, a recipe its longest span.
    least = {n: recipes.span(recipes.RECIPES[n].longest(knobs)) if n in recipes.RECIPES else lo_d
             for n in weights}
    rng = random.Random(seed)
    names = sorted(weights)
    steps: list[Step] = []
    for lane in range(overlap if weights else 0):
        t = round(rng.uniform(lo_i, hi_i), 1)
        while fit := [n for n in names if t + least[n] <= duration_s]:
            name = rng.choices(fit, weights=[weights[n] for n in fit])[0]
            if name in recipes.RECIPES:
                placed = place_recipe(recipes.RECIPES[name], rng, knobs, t, lane, overlap,
                                      chain=len(steps))
            else:
                roles = injectors.roles_for(name, brokers=brokers, zookeepers=zookeepers,
                                            replication_factor=replication_factor)
                if refuses is not None:
                    roles = [r for r in roles if refuses(name, r) is None] or roles
                if targets and name in targets:
                    role = targets[name]
                elif roles:
                    role = rng.choice(roles)
                else:
                    role = None
                drawn = injectors.kind(name).draw(rng)
                drawn.update((params or {}).get(name, {}))
                need = injectors.kind(name).min_duration_s(drawn)
                dur = round(min(max(rng.uniform(lo_d, hi_d), need), duration_s - t), 1)
                placed = [Step(t, name, dur, role, drawn, lane)]
            steps += placed
            t = round(max(s.at_s + s.duration_s for s in placed) + rng.uniform(lo_i, hi_i), 1)
    steps.sort(key=lambda s: (s.at_s, s.lane))
    settings = {"faults": weights, "interval_s": list(interval_s),
                "fault_duration_s": list(fault_duration_s), "brokers": brokers,
                "zookeepers": zookeepers, "replication_factor": replication_factor,
                "overlap": overlap}
    if drawn_recipes:
        settings["lag_s"] = knobs.lag_s
    return Schedule(seed, float(duration_s), float(quiet_s), steps, settings)


def place_recipe(recipe: recipes.Recipe, rng: random.Random, knobs: recipes.Knobs, t: float,
                 lane: int, overlap: int, chain: int = 0) -> list[Step]:
    """A recipe's parts drawn, as Steps from time `t` in `lane`, marked with
    `chain` (unique in the schedule). The recipe's own lane j becomes
    lane + overlap * j: lane j = 0 is the lane itself, the others are lanes
    no other draw uses, so the recipe's overlapping parts run side by side."""
    return [Step(round(t + p.at_s, 1), p.fault, p.duration_s, p.target, dict(p.params),
                 lane + overlap * p.lane, recipe.name, chain) for p in recipe.parts(rng, knobs)]


# Faults that take their targets down (the node cannot take another such
# fault, nor join a partition, until they heal).
DOWN = frozenset({"kill", "stop", "pause", "hard-bounce", "clean-bounce", "truncate-tail",
                  "bitflip", "bad-offset", "lose-unfsynced", "zk-pause", "zk-kill"})
# Faults on the network: their heal undoes every network fault at once.
NETWORK_FAMILIES = ("partition", "link")


def conflict(inj: Injector, others: list[Injector]) -> str | None:
    """Why `inj` cannot start beside the faults `others` now, or None. Faults
    overlap freely except where one would undo or block another: a node
    already down takes no second process fault and no session expiry; a
    partition cannot be cut while a node is down (iptables runs inside it);
    one network fault at a time (healing one heals them all)."""
    down = {n: o.fault for o in others if o.fault in DOWN for n in o.targets}
    if inj.fault in DOWN or inj.fault == "zk-expire":
        busy = sorted(set(inj.targets) & set(down))
        if busy:
            return f"{', '.join(busy)} already under {down[busy[0]]}"
    family = injectors.kind(inj.fault).family
    if family == "partition" and down:
        return f"a partition waits until {', '.join(sorted(down))} is back"
    if family in NETWORK_FAMILIES:
        busy_net = [o.fault for o in others if injectors.kind(o.fault).family in NETWORK_FAMILIES]
        if busy_net:
            return f"one network fault at a time ({busy_net[0]} is active)"
    return None


class Nemesis:
    """Runs a Schedule against a cluster: each lane of the schedule in a
    thread of its own, one fault at a time per lane, so faults of different
    lanes overlap.

    A step whose role nobody holds (no out-of-ISR replica, no controller) or
    that would clash with an active fault (`conflict`) is skipped and listed
    in `skipped`; an injector that fails to start has healed itself
    (Injector.start does that). `final_heal()` cancels what is left, heals
    everything and waits until every broker is registered.
    """

    def __init__(self, ctx: FaultContext, schedule: Schedule,
                 clock: Callable[[], float] = time.monotonic, *,
                 partition: tuple[str, int] | None = None):
        self.ctx = ctx
        self.schedule = schedule
        self.partition = partition  # of partition roles that name none (else the context's)
        self._clock = clock
        self._cancel = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._active: list[Injector] = []
        self.done: list[dict[str, Any]] = []
        self.skipped: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.t0: float | None = None

    def start(self) -> "Nemesis":
        self.t0 = self._clock()
        lanes = sorted({s.lane for s in self.schedule.steps})
        for lane in lanes:
            t = threading.Thread(target=self._run_lane, args=(lane,), name=f"nemesis-{lane}",
                                 daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def active(self) -> list[dict[str, Any]]:
        with self._lock:
            return [i.describe() for i in self._active]

    def _wait_until(self, at_s: float) -> bool:
        """Sleep until `at_s` after start; False if cancelled first."""
        delay = self.t0 + at_s - self._clock()
        return not self._cancel.wait(max(0.0, delay))

    def _run_lane(self, lane: int) -> None:
        for step in self.schedule.steps:
            if step.lane != lane:
                continue
            if not self._wait_until(step.at_s):
                return
            self.run_step(step)

    def _admit(self, inj: Injector) -> str | None:
        with self._lock:
            return conflict(inj, [i for i in self._active if i is not inj])

    def run_step(self, step: Step) -> None:
        try:
            inj = injectors.make(step.fault, self.ctx, qualify(step.target, self.partition),
                                 **step.params)
            with self._lock:
                self._active.append(inj)
            inj.start(admit=self._admit)
        except (TargetError, FaultError) as e:
            with self._lock:
                self._active = [i for i in self._active if i.active]
            self.skipped.append({**asdict(step), "reason": str(e)})
            self.ctx.log(f"nemesis: skipped {step.fault} at {step.at_s}s: {e}")
            return
        except Exception as e:  # noqa: BLE001 - keep the schedule going
            with self._lock:
                self._active = [i for i in self._active if i.active]
            self.errors.append(f"{step.fault} at {step.at_s}s: {e!r}")
            self.ctx.log(f"nemesis: {step.fault} failed to start: {e!r}")
            return
        deadline = self._clock() + step.duration_s
        finished = getattr(inj, "done", None)
        while not self._cancel.is_set() and self._clock() < deadline:
            if finished is not None and finished():
                break
            self._cancel.wait(min(0.2, max(0.0, deadline - self._clock())))
        self._heal(inj)

    def _heal(self, inj: Injector) -> None:
        try:
            inj.stop()
        except Exception as e:  # noqa: BLE001 - heal_all at the end is the backstop
            self.errors.append(f"healing {inj.fault}: {e!r}")
            self.ctx.log(f"nemesis: healing {inj.fault} failed: {e!r}")
        with self._lock:
            if inj in self._active:
                self._active.remove(inj)
        self.done.append(inj.describe())

    def stop(self) -> None:
        """Cancel the schedule and heal the active faults (no global heal)."""
        self._cancel.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()
        with self._lock:
            active = list(self._active)
        for inj in active:
            self._heal(inj)

    def final_heal(self, wait_registered: bool = True) -> list[str]:
        """Stop, heal everything, wait for every broker to be registered.
        Recorded as a `final-heal` start/stop pair in the history."""
        self.stop()
        return final_heal(self.ctx, wait_registered)

    def join(self, timeout: float | None = None) -> None:
        """Until every lane has played its steps (at most `timeout` in all)."""
        deadline = Deadline(float("inf") if timeout is None else timeout)
        for t in self._threads:
            t.join(deadline.remaining() if timeout is not None else None)

