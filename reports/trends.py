"""The trends page: what the warehouse (reports/warehouse.py) says across nights.

    chaoslog trends WAREHOUSE --out trends.html [--master spark://HOST:PORT]

Spark SQL over the warehouse's tables, one HTML page, newest news first:

  1. new since the last night: anomaly types a configuration found in the
     latest night and not in the night before;
  2. verdicts per night and configuration, and a bar per night of its runs
     (the invalid ones in red);
  3. anomaly counts by type per night, and by the faults active when they
     happened (a fault's window and 5 s after it);
  4. flake rate per campaign cell: the share of its runs that failed, where a
     cell both passed and failed;
  5. availability and p99 send latency per fault kind (seconds with no fault
     as the baseline).
"""
from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from reports.warehouse import register

CSS = """
body { font: 14px/1.45 -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 20px auto; max-width: 1200px; color: #1b1b1b; }
h1 { font-size: 24px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 2px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { border: 1px solid #d9d9d9; padding: 3px 8px; text-align: left; }
th { background: #eeeeea; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.bad { background: #fbd9d5; } .good { background: #dff3e3; } .note { color: #555; }
.news { border-left: 4px solid #c0392b; padding: 4px 12px; background: #fdf1ef; }
"""

QUERIES = {
    "verdicts": """
        SELECT night, config, count(*) AS runs,
               sum(CASE WHEN verdict = 'valid' THEN 1 ELSE 0 END) AS valid,
               sum(CASE WHEN verdict = 'invalid' THEN 1 ELSE 0 END) AS invalid,
               sum(CASE WHEN verdict NOT IN ('valid', 'invalid') THEN 1 ELSE 0 END) AS other
        FROM runs GROUP BY night, config ORDER BY night, config""",
    "types_per_night": """
        SELECT night, type, count(*) AS instances, count(DISTINCT run) AS runs
        FROM anomalies WHERE fatal GROUP BY night, type ORDER BY night, type""",
    "types_per_fault": """
        SELECT f.fault, a.type, count(*) AS instances, count(DISTINCT a.run) AS runs
        FROM anomalies a JOIN faults f ON a.run = f.run
          AND a.time_s BETWEEN f.start_s AND coalesce(f.stop_s, a.time_s) + 5
        WHERE a.fatal GROUP BY f.fault, a.type ORDER BY instances DESC, f.fault""",
    "new": """
        WITH nights AS (SELECT DISTINCT night FROM runs),
             last AS (SELECT max(night) AS night FROM nights),
             prev AS (SELECT max(night) AS night FROM nights WHERE night < (SELECT night FROM last)),
             found AS (SELECT r.night, r.config, t.type, count(DISTINCT r.run) AS runs
                       FROM runs r LATERAL VIEW explode(r.fatal) t AS type
                       GROUP BY r.night, r.config, t.type)
        SELECT f.config, f.type, f.runs, (SELECT night FROM last) AS night,
               (SELECT night FROM prev) AS previous
        FROM found f
        WHERE f.night = (SELECT night FROM last)
          AND NOT EXISTS (SELECT 1 FROM found g WHERE g.night = (SELECT night FROM prev)
                          AND g.config = f.config AND g.type = f.type)
        ORDER BY f.runs DESC""",
    "flakes": """
        SELECT coalesce(cell, config) AS cell, count(*) AS runs,
               sum(CASE WHEN verdict = 'invalid' THEN 1 ELSE 0 END) AS invalid,
               round(sum(CASE WHEN verdict = 'invalid' THEN 1 ELSE 0 END) / count(*), 3) AS rate
        FROM runs GROUP BY coalesce(cell, config)
        HAVING sum(CASE WHEN verdict = 'invalid' THEN 1 ELSE 0 END) > 0
           AND sum(CASE WHEN verdict = 'valid' THEN 1 ELSE 0 END) > 0
        ORDER BY rate DESC""",
    "availability": """
        SELECT fault,
               round(sum(send_ok) / greatest(sum(send_ok + send_fail + send_info), 1), 4)
                 AS availability,
               count(*) AS windows
        FROM faults GROUP BY fault ORDER BY availability""",
    "latency": """
        SELECT fault, round(percentile_approx(send_p99_ms, 0.99), 1) AS p99_ms,
               round(percentile_approx(send_p50_ms, 0.5), 1) AS p50_ms, count(*) AS seconds
        FROM (SELECT CASE WHEN size(faults) = 0 THEN '(no fault)' ELSE f END AS fault,
                     send_p99_ms, send_p50_ms
              FROM seconds LATERAL VIEW OUTER explode(faults) x AS f)
        WHERE send_p99_ms IS NOT NULL GROUP BY fault ORDER BY p99_ms DESC""",
}


def collect(spark: Any, warehouse: Path) -> dict[str, list[dict[str, Any]]]:
    """Every query's rows, as plain dicts."""
    tables = register(spark, warehouse)
    if "runs" not in tables:
        raise ValueError(f"{warehouse} holds no runs table: load runs with `chaoslog warehouse` first")
    needs = {"types_per_night": "anomalies", "types_per_fault": "faults",
             "availability": "faults", "latency": "seconds"}
    return {name: ([r.asDict() for r in spark.sql(q).collect()]
                   if needs.get(name, "runs") in tables else [])
            for name, q in QUERIES.items()}


def _table(rows: list[dict[str, Any]], cols: list[str], bad: str | None = None) -> str:
    if not rows:
        return "<p class='note'>nothing</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = []
    for r in rows:
        cls = " class='bad'" if bad and r.get(bad) else ""
        cells = "".join(
            f"<td class='n'>{r[c]}</td>" if isinstance(r.get(c), (int, float))
            else f"<td>{escape(str(r.get(c, '')))}</td>" for c in cols)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def verdict_bars(verdicts: list[dict[str, Any]], nights: list[str]) -> str:
    """An SVG bar per night: its runs, the invalid ones red on top."""
    per = {n: [0, 0, 0] for n in nights}
    for r in verdicts:
        per[r["night"]][0] += r["valid"]
        per[r["night"]][1] += r["invalid"]
        per[r["night"]][2] += r["other"]
    top = max((sum(v) for v in per.values()), default=1) or 1
    w, h, bar = max(440, 70 * len(nights) + 60), 180, 36
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h + 40}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="4" y="12">runs per night: valid (green), invalid (red), unjudged (grey)</text>']
    for i, n in enumerate(nights):
        x, y = 40 + 70 * i, h + 10
        for count, colour in zip(per[n], ("#5aa469", "#d9534f", "#aaaaaa")):
            height = (h - 30) * count / top
            y -= height
            if count:
                out.append(f'<rect x="{x}" y="{y:.1f}" width="{bar}" height="{height:.1f}" '
                           f'fill="{colour}"><title>{escape(n)}: {count}</title></rect>')
        out.append(f'<text x="{x + bar / 2}" y="{h + 24}" text-anchor="middle">{escape(n)}</text>')
        out.append(f'<text x="{x + bar / 2}" y="{y - 4:.1f}" text-anchor="middle">'
                   f'{per[n][1]}/{sum(per[n])}</text>')
    out.append("</svg>")
    return "".join(out)


def render(data: dict[str, list[dict[str, Any]]], warehouse: Path) -> str:
    verdicts = data["verdicts"]
    nights = sorted({r["night"] for r in verdicts})
    configs = sorted({r["config"] for r in verdicts})
    chart = verdict_bars(verdicts, nights)
    new = data["new"]
    news = ("<div class='news'>" + _table(new, ["config", "type", "runs", "night", "previous"])
            + "</div>") if new else "<p class='note'>nothing new: every fatal anomaly type of the " \
                                    "last night was found the night before too (or none was)</p>"
    runs = sum(r["runs"] for r in verdicts)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>chaoslog trends</title>
<style>{CSS}</style></head><body>
<h1>chaoslog trends</h1>
<p>{runs} runs over {len(nights)} night(s), {len(configs)} configuration(s); warehouse
<code>{escape(str(warehouse))}</code>.</p>
<h2>New since the night before</h2>{news}
<h2>Verdicts per night and configuration</h2>
{_table(verdicts, ["night", "config", "runs", "valid", "invalid", "other"], bad="invalid")}
{chart}
<h2>Fatal anomalies by type, per night</h2>
{_table(data["types_per_night"], ["night", "type", "instances", "runs"])}
<h2>Fatal anomalies by the faults active when they happened</h2>
{_table(data["types_per_fault"], ["fault", "type", "instances", "runs"])}
<h2>Flaky cells (both passed and failed)</h2>
{_table(data["flakes"], ["cell", "runs", "invalid", "rate"])}
<h2>Availability and latency per fault kind</h2>
{_table(data["availability"], ["fault", "availability", "windows"])}
{_table(data["latency"], ["fault", "p50_ms", "p99_ms", "seconds"])}
<p class="note">Availability: sends acknowledged among those made during the fault's windows.
Latency: over the seconds the fault was active, the median of the per-second median and the
99th percentile of the per-second p99.</p>
</body></html>
"""


def write_trends(spark: Any, warehouse: Path, out: Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(collect(spark, warehouse), Path(warehouse)))
    return out
