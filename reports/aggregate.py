"""The nightly overview: one HTML page across many checked runs.

Reads each run's summary.json (written by `analyze`) and run.json, and shows
a table of runs (seed, faults, verdict, anomaly counts, link to the run's
report), then the same grouped per seed and per fault kind, so a regression
shows up as a column of red in the row of the fault that causes it.

    python -m reports aggregate --out nightly/index.html RUN_OR_PARENT_DIR...

A directory without summary.json is searched one level down for runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from html import escape
from pathlib import Path

from reports.summary import ANOMALY_TYPES

CSS = """
body { font: 14px/1.45 -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 20px auto; max-width: 1200px; color: #1b1b1b; }
h1 { font-size: 24px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 2px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { border: 1px solid #d9d9d9; padding: 3px 8px; text-align: left; }
th { background: #eeeeea; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.zero { color: #aaa; }
.valid { background: #dff3e3; } .invalid { background: #fbd9d5; } .unknown { background: #fff0c9; } .error { background: #e9e9e9; }
.big { font-size: 18px; }
"""


def _find_runs(paths) -> list[Path]:
    runs = []
    for p in map(Path, paths):
        if (p / "summary.json").is_file() or (p / "run.json").is_file():
            runs.append(p)
        elif p.is_dir():
            runs += sorted(d for d in p.iterdir() if (d / "summary.json").is_file())
    return runs


def _load(run_dir: Path) -> dict:
    def read(name):
        try:
            return json.loads((run_dir / name).read_text())
        except (OSError, ValueError):
            return None

    summary, meta = read("summary.json"), read("run.json") or {}
    return {"dir": run_dir, "summary": summary, "meta": meta}


def _faults(meta: dict) -> list[str]:
    f = meta.get("faults") or []
    if isinstance(f, dict):
        f = list(f)
    return [str(x if not isinstance(x, dict) else x.get("name", x)) for x in f] or ["(none)"]


def _verdict(r) -> str:
    return r["summary"]["verdict"] if r["summary"] else "error"


def _num(n) -> str:
    return f'<td class="n{" zero" if not n else ""}">{n}</td>'


def render(runs: list[dict], out_path: Path) -> str:
    base = out_path.parent
    head = "".join(f"<th>{escape(k)}</th>" for k in ANOMALY_TYPES)
    rows = []
    for r in sorted(runs, key=lambda r: (str(r["meta"].get("seed")), str(r["dir"]))):
        s = r["summary"]
        v = _verdict(r)
        report = r["dir"] / "report.html"
        link = escape(os.path.relpath(report, base)) if report.exists() else ""
        name = escape(s["run"] if s else r["dir"].name)
        cells = "".join(_num(s["anomaly_counts"][k]) for k in ANOMALY_TYPES) if s else \
            "".join("<td></td>" for _ in ANOMALY_TYPES)
        ack = s["counts"]["acknowledged"] if s else ""
        rows.append(
            f'<tr class="{v}"><td>{f"<a href={chr(34)}{link}{chr(34)}>{name}</a>" if link else name}</td>'
            f"<td>{escape(str(r['meta'].get('seed', '')))}</td>"
            f"<td>{escape(', '.join(_faults(r['meta'])))}</td><td><b>{v}</b></td>"
            f'<td class="n">{ack}</td>{cells}</tr>'
        )
    runs_table = (f"<table><tr><th>run</th><th>seed</th><th>faults</th><th>verdict</th><th>acknowledged</th>"
                  f"{head}</tr>{''.join(rows)}</table>")

    def grouped(key_fn, title):
        groups = defaultdict(list)
        for r in runs:
            for k in key_fn(r):
                groups[k].append(r)
        body = []
        for k in sorted(groups, key=str):
            rs = groups[k]
            verdicts = defaultdict(int)
            totals = defaultdict(int)
            for r in rs:
                verdicts[_verdict(r)] += 1
                if r["summary"]:
                    for a in ANOMALY_TYPES:
                        totals[a] += r["summary"]["anomaly_counts"][a]
            cls = "invalid" if verdicts["invalid"] else ("unknown" if verdicts["unknown"] or verdicts["error"]
                                                         else "valid")
            body.append(
                f'<tr class="{cls}"><td>{escape(str(k))}</td><td class="n">{len(rs)}</td>'
                + "".join(_num(verdicts[x]) for x in ("valid", "invalid", "unknown", "error"))
                + "".join(_num(totals[a]) for a in ANOMALY_TYPES) + "</tr>"
            )
        return (f"<h2>{escape(title)}</h2><table><tr><th>{escape(title.split()[-1])}</th><th>runs</th>"
                f"<th>valid</th><th>invalid</th><th>unknown</th><th>error</th>{head}</tr>"
                f"{''.join(body)}</table>")

    n = defaultdict(int)
    for r in runs:
        n[_verdict(r)] += 1
    overall = ", ".join(f"{n[v]} {v}" for v in ("valid", "invalid", "unknown", "error") if n[v])
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>chaoslog: {len(runs)} runs — {escape(overall)}</title><style>{CSS}</style></head><body>
<h1>chaoslog runs</h1>
<p class="big">{len(runs)} runs: {escape(overall or 'none')}</p>
{grouped(lambda r: [r["meta"].get("seed")], "By seed")}
{grouped(lambda r: _faults(r["meta"]), "By fault kind")}
<h2>Runs</h2>
{runs_table}
</body></html>
"""


def write_aggregate(paths, out_path) -> Path:
    """Write the overview of the runs found under `paths` to `out_path`."""
    out_path = Path(out_path)
    runs = [_load(d) for d in _find_runs(paths)]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(render(runs, out_path), encoding="utf-8")
    return out_path


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("aggregate", help="an HTML overview of many checked runs")
    p.add_argument("paths", nargs="+", metavar="RUN_OR_PARENT_DIR")
    p.add_argument("--out", required=True, help="the HTML file to write")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    path = write_aggregate(args.paths, args.out)
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m reports.aggregate")
    sub = ap.add_subparsers(dest="command", required=True)
    add_parser(sub)
    a = ap.parse_args(["aggregate", *sys.argv[1:]])
    sys.exit(a.func(a))
