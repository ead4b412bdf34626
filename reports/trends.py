"""The trends page: what the warehouse (reports/warehouse.py) says across nights.

    chaoslog trends WAREHOUSE --out trends.html [--master spark://HOST:PORT]

Spark SQL over the warehouse's tables, one HTML page, newest news first:

  1. new since the last night: anomaly types a configuration found in the
     latest night and not in the night before;
  2. verdicts per night and configuration (and a chart of the share of
     runs that found a fatal anomaly);
  3. anomaly counts by type per night, and by the fault kinds of the runs;
  4. flake rate per campaign cell: the share of its runs that failed, where a
     cell both passed and failed;
  5. availability and p99 send latency per fault kind (seconds with no fault
     as the baseline).
"""
from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from reports.charts import line_chart
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
        SELECT fault, t.type, count(DISTINCT r.run) AS runs
        FROM (SELECT run, explode(faults) AS fault, fatal FROM runs) r
        LATERAL VIEW explode(r.fatal) t AS type
        GROUP BY fault, t.type ORDER BY runs DESC, fault""",
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
    needs = {"types_per_night": "anomalies", "availability": "faults", "latency": "seconds"}
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


def render(data: dict[str, list[dict[str, Any]]], warehouse: Path) -> str:
    verdicts = data["verdicts"]
    nights = sorted({r["night"] for r in verdicts})
    configs = sorted({r["config"] for r in verdicts})
    series = []
    for c in configs:
        by_night = {r["night"]: r for r in verdicts if r["config"] == c}
        series.append((c, [(i, by_night[n]["invalid"] / by_night[n]["runs"] if n in by_night else None)
                           for i, n in enumerate(nights)]))
    chart = line_chart("share of runs with a fatal anomaly, per night (x: night number below)",
                       series, x_max=max(len(nights) - 1, 1), y_label="share")
    night_keys = " · ".join(f"{i}: {escape(n)}" for i, n in enumerate(nights))
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
{chart}<p class="note">{night_keys}</p>
<h2>Fatal anomalies by type, per night</h2>
{_table(data["types_per_night"], ["night", "type", "instances", "runs"])}
<h2>Fatal anomalies by the fault kinds of the run</h2>
{_table(data["types_per_fault"], ["fault", "type", "runs"])}
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
