"""Campaigns: randomized chaos runs back to back until a time budget is spent.

A campaign file (TOML) names a matrix of runs as data. `[base]` holds the
fields of a RunSpec (harness/run.py, `RunSpec.from_data`: the fields
`chaoslog run`'s options map onto, in a run's run.json as `spec`) that every
run has; each axis maps value names to tables of such fields. Every run
takes the base, one value of each axis laid over it, a fresh seed and its
own output directory:

    [campaign]
    name = "nightly"
    budget = "8h"
    seed = 1                     # the runs' seeds follow from it
    checker = "reference"        # each run's verdict; a warehouse job checks again
    shrink = true                # shrink each failure (chaoslog shrink) ...
    shrink_budget = "30m"        # ... for at most this long

    [base]
    workload.rate = 200
    schedule.interval_s = [2, 8]

    [axes.config.fixed]
    cluster.broker_config = {"min.insync.replicas" = 2}

    [axes.faults.everything]
    schedule.faults = {kill = 3, pause = 2, zk-expire = 1}
    schedule.overlap = 3

A `[client]` table gives every run the clients' security settings (the
RunSpec field `client`, in Kafka's key names, as a `--client-config` TOML
file holds them; docs/targets.md, "Security settings"):

    [client]
    "security.protocol" = "SASL_SSL"
    "sasl.mechanism" = "SCRAM-SHA-512"
    "sasl.username" = "chaos"
    "sasl.password.env" = "CHAOSLOG_SASL_PASSWORD"   # the password's source, never the password
    "ssl.ca.location" = "/etc/kafka/ca.pem"

A value's field replaces the base's, except in the tables `cluster`,
`workload`, `workload.producer` and `schedule`, which are merged field by
field (OVERLAID). A `schedule` without steps is drawn (harness.run.Draw).

The runs walk the matrix's combinations in an order shuffled by the seed,
so a short campaign still covers different cells; a long one goes round
again with new seeds. Every combination is checked by RunSpec.validate when
the file is loaded, so a bad cell is refused before anything runs, not at
3 a.m.

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
# The tables of a spec's data merged field by field when a value is laid over the base.
OVERLAID = ("cluster", "workload", "producer", "schedule")
CAMPAIGN_KEYS = ("name", "budget", "seed", "checker", "shrink", "shrink_budget", "shrink_tries")


class CampaignError(ValueError):
    """A campaign file or state that cannot be used; the message says why."""


UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_budget(text: str, what: str = "--budget") -> float:
    """'90', '45m', '8h' -> seconds; ValueError says what is wrong."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(text))
    if not m or float(m[1]) <= 0:
        raise ValueError(f"{what} {text!r}: a positive time such as 3600, 90m or 8h")
    return float(m[1]) * UNITS[m[2] or "s"]


def overlay(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` laid over `base`: its fields replace the base's, the tables of
    OVERLAID merged field by field."""
    out = dict(base)
    for k, v in over.items():
        if k in OVERLAID and isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = overlay(out[k], v)
        else:
            out[k] = v
    return out


OLD_FORM = ("{where}: {what} is a list of `chaoslog run` options, the old form of a campaign; "
            "a campaign now names RunSpec fields: a [base] table and [axes.NAME.VALUE] tables "
            "(see harness/campaigns/nightly.toml)")


@dataclass
class Campaign:
    name: str
    budget_s: float
    seed: int
    base: dict[str, Any]
    axes: dict[str, dict[str, dict[str, Any]]]
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
        if "base" in c:
            raise CampaignError(OLD_FORM.format(where=where, what="[campaign] base"))
        unknown = set(c) - set(CAMPAIGN_KEYS)
        if unknown:
            raise CampaignError(f"{where}: unknown [campaign] keys {', '.join(sorted(unknown))}")
        unknown = set(d) - {"campaign", "base", "axes", "client"}
        if unknown:
            raise CampaignError(f"{where}: unknown tables {', '.join(sorted(unknown))}: a campaign "
                                f"has [campaign], [base], [axes.NAME.VALUE] and [client]")
        base = d.get("base") or {}
        if not isinstance(base, dict):
            raise CampaignError(f"{where}: [base] is a table of RunSpec fields")
        if "client" in d:
            if "client" in base:
                raise CampaignError(f"{where}: [client] and [base.client] both give the clients' "
                                    f"security settings: keep one")
            base = {**base, "client": d["client"]}
        axes = d.get("axes") or {}
        for axis, values in (axes.items() if isinstance(axes, dict) else [("?", None)]):
            if isinstance(values, dict):
                for value, fields in values.items():
                    if isinstance(fields, list):
                        raise CampaignError(OLD_FORM.format(where=where,
                                                            what=f"axes.{axis}.{value}"))
            if not (isinstance(values, dict) and values
                    and all(isinstance(f, dict) for f in values.values())):
                raise CampaignError(f"{where}: [axes.{axis}.VALUE] tables map each value name to "
                                    f"RunSpec fields, e.g. [axes.config.fixed] with "
                                    f"cluster.broker_config = {{\"min.insync.replicas\" = 2}}")
        if c.get("checker", "reference") not in ("reference", "spark"):
            raise CampaignError(f"{where}: checker is reference or spark")
        try:
            budget = parse_budget(c.get("budget", "8h"), "budget")
            shrink_budget = parse_budget(c.get("shrink_budget", "30m"), "shrink_budget")
        except ValueError as e:
            raise CampaignError(f"{where}: {e}") from None
        return cls(name=str(c.get("name") or Path(source).stem or "campaign"), budget_s=budget,
                   seed=int(c.get("seed", 1)), base=dict(base),
                   axes={a: {k: dict(v) for k, v in sorted(vals.items())}
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
        fields = self.base
        for axis, value in cell.items():
            fields = overlay(fields, self.axes[axis][value])
        return PlannedRun(index, seed, cell, overlay(fields, {"schedule": {"seed": seed}}))


@dataclass
class PlannedRun:
    index: int
    seed: int
    cell: dict[str, str]
    fields: dict[str, Any]   # the RunSpec's data (RunSpec.from_data), without its output

    @property
    def label(self) -> str:
        return " × ".join(self.cell.values()) or "the base run"


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
