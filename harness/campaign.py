"""Campaigns: randomized chaos runs back to back until a time budget is spent.

A campaign file (TOML) names a matrix in the words of `chaoslog run`: each
axis maps value names to `chaoslog run` options, and every run takes one
value of each axis plus the base options, a fresh seed and its own output
directory:

    [campaign]
    name = "nightly"
    budget = "8h"
    seed = 1                     # the runs' seeds follow from it
    base = ["--rate", "200"]
    checker = "reference"        # each run's verdict; a warehouse job checks again
    shrink = true                # shrink each failure (chaoslog shrink) ...
    shrink_budget = "30m"        # ... for at most this long

    [axes.config]
    fixed = ["--broker-config", "min.insync.replicas=2"]
    seed-faithful = ["--broker-config", "min.insync.replicas=1", ...]

    [axes.faults]
    everything = ["--faults", "kill:3,pause:2,zk-expire", "--overlap", "3"]

The runs walk the matrix's combinations in an order shuffled by the seed,
so a short campaign still covers different cells; a long one goes round
again with new seeds. Every combination is checked the way `chaoslog run`
checks its options when the file is loaded, so a bad cell is refused before
anything runs, not at 3 a.m.

The campaign's state (campaign.json in its output directory) is written
after every change, so a campaign killed at any moment resumes with the same
command: finished runs stay as they are, a run that was going when the
campaign died is recorded as interrupted (its directory kept as evidence),
and the budget already spent counts.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_FILE = Path(__file__).parent / "campaigns" / "nightly.toml"
STATE_FILE = "campaign.json"


class CampaignError(ValueError):
    """A campaign file or state that cannot be used; the message says why."""


UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_budget(text: str, what: str = "--budget") -> float:
    """'90', '45m', '8h' -> seconds; ValueError says what is wrong."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(text))
    if not m or float(m[1]) <= 0:
        raise ValueError(f"{what} {text!r}: a positive time such as 3600, 90m or 8h")
    return float(m[1]) * UNITS[m[2] or "s"]


@dataclass
class Campaign:
    name: str
    budget_s: float
    seed: int
    base: list[str]
    axes: dict[str, dict[str, list[str]]]
    checker: str = "reference"
    shrink: bool = True
    shrink_budget_s: float = 1800.0
    shrink_tries: int = 2
    source: str = ""

    @classmethod
    def load(cls, path: Path) -> "Campaign":
        try:
            d = tomllib.loads(Path(path).read_text())
        except OSError as e:
            raise CampaignError(f"{path}: cannot read it ({e.strerror})") from None
        except tomllib.TOMLDecodeError as e:
            raise CampaignError(f"{path}: not TOML ({e})") from None
        return cls.from_dict(d, str(path))

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "") -> "Campaign":
        where = source or "the campaign"
        c = d.get("campaign")
        if not isinstance(c, dict):
            raise CampaignError(f"{where}: no [campaign] table")
        unknown = set(c) - {"name", "budget", "seed", "base", "checker", "shrink",
                            "shrink_budget", "shrink_tries"}
        if unknown:
            raise CampaignError(f"{where}: unknown [campaign] keys {', '.join(sorted(unknown))}")
        axes = d.get("axes") or {}
        if not isinstance(axes, dict) or not all(
                isinstance(v, dict) and v and all(_options(o) for o in v.values())
                for v in axes.values()):
            raise CampaignError(f"{where}: [axes.NAME] tables map value names to lists of "
                                f"`chaoslog run` options, e.g. fixed = [\"--broker-config\", "
                                f"\"min.insync.replicas=2\"]")
        if not _options(c.get("base", [])):
            raise CampaignError(f"{where}: base is a list of `chaoslog run` options")
        if c.get("checker", "reference") not in ("reference", "spark"):
            raise CampaignError(f"{where}: checker is reference or spark")
        try:
            budget = parse_budget(c.get("budget", "8h"), "budget")
            shrink_budget = parse_budget(c.get("shrink_budget", "30m"), "shrink_budget")
        except ValueError as e:
            raise CampaignError(f"{where}: {e}") from None
        return cls(name=str(c.get("name") or Path(source).stem or "campaign"), budget_s=budget,
                   seed=int(c.get("seed", 1)), base=list(c.get("base", [])),
                   axes={a: {k: list(v) for k, v in sorted(vals.items())}
                         for a, vals in sorted(axes.items())},
                   checker=c.get("checker", "reference"), shrink=bool(c.get("shrink", True)),
                   shrink_budget_s=shrink_budget, shrink_tries=int(c.get("shrink_tries", 2)),
                   source=source)

    def combinations(self) -> list[dict[str, str]]:
        """Every cell of the matrix (axis -> value name), in the campaign's
        shuffled order."""
        names = list(self.axes)
        cells = [dict(zip(names, values))
                 for values in itertools.product(*(list(self.axes[a]) for a in names))]
        random.Random(self.seed).shuffle(cells)
        return cells

    def plan(self, index: int) -> "PlannedRun":
        cells = self.combinations()
        cell = cells[index % len(cells)]
        seed = random.Random(f"{self.seed}/{index}").randrange(2**31)
        argv = list(self.base)
        for axis, value in cell.items():
            argv += self.axes[axis][value]
        return PlannedRun(index, seed, cell, argv + ["--seed", str(seed)])


@dataclass
class PlannedRun:
    index: int
    seed: int
    cell: dict[str, str]
    argv: list[str]          # `chaoslog run` options, without --out

    @property
    def label(self) -> str:
        return " × ".join(self.cell.values()) or "the base run"


def _options(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


@dataclass
class CampaignState:
    """campaign.json: what ran, what it found, how much budget is spent."""
    path: Path
    name: str
    source: str
    spent_s: float = 0.0
    runs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def open(cls, out: Path, campaign: Campaign) -> "CampaignState":
        """The state of OUT: a new one, or the one a stopped campaign left
        (which must be of the same campaign)."""
        path = Path(out) / STATE_FILE
        if not path.exists():
            state = cls(path, campaign.name, campaign.source)
            state.save()
            return state
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise CampaignError(f"{path} is damaged ({e}): move it away to start afresh") from None
        if d.get("name") != campaign.name:
            raise CampaignError(f"{out} holds campaign {d.get('name')!r}, not {campaign.name!r}: "
                                f"choose another --out")
        return cls(path, d["name"], d.get("source", ""), float(d.get("spent_s", 0.0)),
                   list(d.get("runs", [])))

    def interrupted(self) -> list[dict[str, Any]]:
        """Runs that were going when the campaign died: marked so, kept."""
        hit = [r for r in self.runs if r.get("status") == "started"]
        for r in hit:
            r["status"] = "interrupted"
            r["reason"] = "the campaign stopped during this run"
        if hit:
            self.save()
        return hit

    def save(self) -> None:
        """Atomically: a campaign killed while saving leaves the old state."""
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"name": self.name, "source": self.source,
                                   "spent_s": round(self.spent_s, 1), "runs": self.runs},
                                  indent=1) + "\n")
        os.replace(tmp, self.path)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.runs:
            key = r.get("verdict") or r.get("status", "?")
            out[key] = out.get(key, 0) + 1
        return out
