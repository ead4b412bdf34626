"""The per-run HTML report: one self-contained file a person reads after a run.

Order follows the questions people ask: is the run valid (verdict first, big),
what went wrong and how much, when (timeline against the fault windows),
which exact ops show it (a small table per anomaly), and how the run was
configured. Inline CSS and SVG only: it opens from a CI artifact store, offline.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from reports.charts import CHART_CSS, line_chart
from reports.context import PER_TYPE, rows_for
from reports.figures import NS_PER_SECOND
from reports.registry import ANOMALIES

CSS = """
body { font: 14px/1.45 -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 0; color: #1b1b1b; background: #f6f6f4; }
main { max-width: 1040px; margin: 0 auto; padding: 0 18px 40px; }
header.verdict { padding: 22px 18px; color: #fff; }
header.valid { background: #1e7b34; } header.invalid { background: #b3261e; } header.unknown { background: #9a6700; }
header .big { font: 700 44px/1.1 sans-serif; letter-spacing: 1px; }
header .sub { font-size: 15px; opacity: .95; margin-top: 6px; }
header .why { font-size: 16px; margin-top: 8px; }
h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 2px solid #ddd; padding-bottom: 3px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 10px; background: #fff; }
th, td { border: 1px solid #d9d9d9; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #eeeeea; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.bad td { background: #fdecea; } tr.warn td { background: #fff6e0; }
.tag { display: inline-block; padding: 0 6px; border-radius: 3px; font-size: 12px; color: #fff; }
.tag.fatal { background: #b3261e; } .tag.nonfatal { background: #8a8a8a; } .tag.ok { background: #1e7b34; }
.inst { margin: 10px 0 14px; padding: 6px 10px; background: #fff; border-left: 4px solid #b3261e; }
.inst.nf { border-left-color: #8a8a8a; }
.inst table { font-size: 12.5px; }
.faults table { font-size: 12.5px; width: 100%; }
.faults td:nth-child(7), .faults td:nth-child(9), .faults td:nth-child(10) { min-width: 200px; }
code, pre { font: 12.5px/1.4 ui-monospace, Menlo, Consolas, monospace; }
pre { background: #fff; border: 1px solid #ddd; padding: 8px; overflow-x: auto; }
.muted { color: #666; }
"""


# How the report names the built-in broker's coordination modes.
MODE_TITLES = {"controller": "controller", "v2": "V2 coordination"}


def _e(x) -> str:
    return escape("" if x is None else str(x))


def _secs(ns) -> str:
    return "" if ns is None else f"{ns / NS_PER_SECOND:.3f}"


def _ms(ns) -> str:
    return "–" if ns is None else f"{ns / 1e6:.1f} ms"


def verdict_reason(summary: dict) -> str:
    if summary["valid"] is False:
        parts = [f"{summary['anomaly_counts'][k]} {k}" for k in summary["fatal"]]
        return "fatal anomalies: " + ", ".join(parts)
    if summary["valid"] is None:
        missing = [f"{p['topic']}/{p['partition']}" for p in summary["final_reads"]["partitions"]
                   if not p["final_complete"] and not p.get("deleted")]
        shown = ", ".join(missing[:10]) + (" …" if len(missing) > 10 else "")
        return f"no fatal anomaly, but the final reads did not complete (partitions {shown})"
    return "no fatal anomaly, and the final reads read every partition to its high watermark"


def _table(headers, rows, num=()) -> str:
    h = "".join(f'<th class="n">{_e(x)}</th>' if x in num else f"<th>{_e(x)}</th>" for x in headers)
    body = []
    for row, cls in rows:
        cells = "".join(
            f'<td class="n">{_e(v)}</td>' if headers[i] in num else f"<td>{_e(v)}</td>"
            for i, v in enumerate(row)
        )
        body.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    return f"<table><tr>{h}</tr>{''.join(body)}</table>"


def _key_numbers(s: dict) -> str:
    c = s["counts"]
    av = s["availability"]
    lat = s["latency"]

    def pct(x):
        return "–" if x is None else f"{100 * x:.2f} %"

    rows = [
        (("sends", c["send"]["ok"], c["send"]["fail"], c["send"]["info"], c["send"].get("pending", 0),
          pct(av["send"]), _ms(lat["send"].get("p50_ns")), _ms(lat["send"].get("p99_ns"))), None),
        (("polls", c["poll"]["ok"], c["poll"]["fail"], c["poll"]["info"], c["poll"].get("pending", 0),
          pct(av["poll"]), _ms(lat["poll"].get("p50_ns")), _ms(lat["poll"].get("p99_ns"))), None),
    ]
    ops = _table(["op", "ok", "fail", "info", "pending", "availability", "p50 latency", "p99 latency"],
                 rows, num={"ok", "fail", "info", "pending"})
    vals = _table(
        ["acknowledged", "read", "lost", "unseen", "duplicated", "records returned", "events"],
        [((c["acknowledged"], c["read"], c["lost"], c["unseen"], c["duplicated"], c["records"],
           s["events"]), "bad" if c["lost"] else None)],
        num={"acknowledged", "read", "lost", "unseen", "duplicated", "records returned", "events"},
    )
    return ops + vals


def _anomaly_table(s: dict) -> str:
    rows = []
    in_windows = {e.name: sum(w["anomalies"][e.name] for w in s["fault_windows"]) for e in ANOMALIES}
    for e in ANOMALIES:
        k = e.name
        n = s["anomaly_counts"][k]
        fatal = k in s["fatal_types"]
        # An oracle without input found nothing because it could not look.
        # (or because the run's configuration does not promise what it checks)
        unchecked = (s.get("oracles") or {}).get(k, "checked")
        meaning = e.title
        if n:
            status = "FATAL" if fatal else "reported, not fatal"
        elif unchecked != "checked":
            status, meaning = "not checked", f"{meaning} ({unchecked})"
        else:
            status = "none"
        cls = "bad" if n and fatal else ("warn" if n else None)
        rows.append(((k, n, status, in_windows[k], meaning), cls))
    return _table(["anomaly", "count", "status", "in fault windows", "meaning"], rows,
                  num={"count", "in fault windows"})


def _windows_for_charts(s: dict) -> list[dict]:
    out = []
    for w in s["fault_windows"]:
        targets = ",".join(w["targets"])
        out.append({"start_s": w["start"] / NS_PER_SECOND, "stop_s": w["stop"] / NS_PER_SECOND,
                    "label": f"#{w['id']} {w['fault']} {targets}".strip()})
    return out


def _charts(s: dict) -> str:
    tl = s["timeline"]
    if not tl:
        return "<p class=muted>No completed ops.</p>"
    x_max = max(s["duration_ns"] / NS_PER_SECOND, tl[-1]["second"] + 1)
    windows = _windows_for_charts(s)
    # every second present, zeros where nothing completed
    by_sec = {r["second"]: r for r in tl}
    secs = range(0, int(x_max) + 1)

    def series(key, scale=1.0, zero=True):
        pts = []
        for sec in secs:
            r = by_sec.get(sec)
            v = None if r is None else r.get(key)
            if v is None:
                v = 0 if zero else None
            pts.append((sec + 0.5, None if v is None else v * scale))
        return pts

    throughput = line_chart(
        "Throughput: ok ops per second",
        [("ok sends", series("send_ok")), ("ok polls", series("poll_ok"))],
        x_max, windows, "ops/s")
    errors = line_chart(
        "Errors per second (fail and info)",
        [("send fail", series("send_fail")), ("send info", series("send_info")),
         ("poll fail", series("poll_fail")), ("poll info", series("poll_info"))],
        x_max, windows, "ops/s")
    latency = line_chart(
        "Latency of ok ops (ms), per second",
        [("send p50", series("send_p50_ns", 1e-6, False)), ("send p99", series("send_p99_ns", 1e-6, False)),
         ("poll p50", series("poll_p50_ns", 1e-6, False)), ("poll p99", series("poll_p99_ns", 1e-6, False))],
        x_max, windows, "ms")
    return throughput + errors + latency


def _resources(s: dict) -> str:
    """Memory, file descriptors and threads per node, and ZooKeeper's watches,
    over the run (reports/resources.py): lines that only climb are leaks."""
    r = s.get("resources")
    if not r:
        return "<p class=muted>No resource samples in this run.</p>"
    xs = r["seconds"]
    x_max = max(s["duration_ns"] / NS_PER_SECOND, xs[-1] + 1)
    windows = _windows_for_charts(s)

    def per_node(metric: str, scale: float = 1.0):
        return [(name, [(x, None if v is None else v * scale) for x, v in zip(xs, m[metric])])
                for name, m in sorted(r["nodes"].items())]
    charts = [line_chart("Resident memory per node (MiB)", per_node("rss_kb", 1 / 1024), x_max,
                         windows, "MiB"),
              line_chart("Open file descriptors per node", per_node("fds"), x_max, windows, "fds"),
              line_chart("Threads per node", per_node("threads"), x_max, windows, "threads")]
    if any(v is not None for v in r["zk_watches"]):
        charts.append(line_chart("ZooKeeper watches", [("watches", list(zip(xs, r["zk_watches"])))],
                                 x_max, windows, "watches"))
    return "".join(charts)


def _fault_windows(s: dict) -> str:
    """The fault-coverage table: each fault, whether it took effect (what the
    injector noted, what the cluster showed), what overlapped it."""
    if not s["fault_windows"]:
        return "<p class=muted>No nemesis faults in this run.</p>"
    rows = []
    end = max((w["stop"] or w["start"] for w in s["fault_windows"]), default=0)
    span = {w["id"]: (w["start"], w["stop"] if w["stop"] is not None else end)
            for w in s["fault_windows"]}
    for w in s["fault_windows"]:
        a, b = span[w["id"]]
        overlapped = [f"#{o['id']} {o['fault']}" for o in s["fault_windows"] if o is not w
                      and o["fault"] != "final-heal" and span[o["id"]][0] < b and a < span[o["id"]][1]]
        anomalies = ", ".join(f"{n} {k}" for k, n in w["anomalies"].items() if n) or "none"
        errs = []
        for f, by_outcome in w.get("errors", {}).items():
            for outcome, by_err in by_outcome.items():
                for err, n in sorted(by_err.items()):
                    errs.append(f"{n} {f} {outcome} {err}")
        ops = w.get("ops", {})
        okd = " / ".join(f"{f}: {o.get('ok', 0)} ok" for f, o in ops.items())
        took = w.get("took_effect")
        seen = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in (w.get("observed") or {}).items() if n)
        effect = "; ".join(x for x in (w.get("stop_detail") or "", seen) if x)
        fatal_inside = any(n and k in s["fatal_types"] for k, n in w["anomalies"].items())
        cls = "bad" if fatal_inside else ("warn" if took is False or anomalies != "none" else None)
        rows.append(((w["id"], w["fault"], ", ".join(w["targets"]), _secs(w["start"]),
                      _secs(w["stop"]) + ("" if w["stopped"] else " (never stopped)"),
                      {True: "yes", False: "NO", None: "cannot tell"}[took], effect or "-",
                      ", ".join(overlapped) or "-", okd, "; ".join(errs) or "none", anomalies), cls))
    return '<div class="faults">' + _table(
        ["#", "fault", "targets", "start s", "stop s", "took effect", "effect", "overlapped by",
         "ops completed", "errors", "anomalies"], rows) + "</div>"


def _oracles(s: dict) -> str:
    rows = [((k, status), None if status == "checked" else "warn")
            for k, status in s.get("oracles", {}).items()]
    return _table(["oracle", "status"], rows)


def _final_reads(s: dict) -> str:
    fr = s["final_reads"]
    rows = []
    for p in fr["partitions"]:
        done = "yes" if p["final_complete"] else "deleted" if p.get("deleted") else "NO"
        rows.append(((f"{p['topic']}/{p['partition']}", p["sends"], p["acknowledged"], p["polls"],
                      p["max_ack_offset"], p["max_read_offset"], p["final_polls"], p["final_high_watermark"],
                      done), None if done != "NO" else "warn"))
    head = "<p>Final reads " + ("completed." if fr["complete"] else "<b>did not complete</b>.") + "</p>"
    return head + _table(
        ["partition", "sends", "acked", "polls", "max acked offset", "max read offset", "final polls",
         "final high watermark", "complete"], rows,
        num={"sends", "acked", "polls", "max acked offset", "max read offset", "final polls",
             "final high watermark"})


def _instances(s: dict, ctx: dict | None) -> str:
    out = []
    for e in ANOMALIES:
        kind = e.name
        items = s["anomalies"][kind]
        total = s["anomaly_counts"][kind]
        if not total:
            continue
        fatal = kind in s["fatal_types"]
        tag = '<span class="tag fatal">fatal</span>' if fatal else '<span class="tag nonfatal">not fatal</span>'
        out.append(f'<h3 id="{kind}">{_e(kind)}: {total} {tag}</h3>')
        for a in items[:PER_TYPE]:
            rows = rows_for(kind, a, ctx) if ctx else []
            table = ""
            if rows:
                table = _table(
                    ["index", "time s", "process", "op", "event", "offset", "value", "note"],
                    [((r["index"], _secs(r["time"]), r["process"], r["op"], r["what"], r["offset"],
                       r["value"], r["note"]), None) for r in rows],
                    num={"index", "time s", "process", "op", "offset", "value"},
                )
            cls = "inst" if fatal else "inst nf"
            out.append(f'<div class="{cls}"><div>{_e(e.line(a))} '
                       f'<span class=muted>— seen at {_secs(a["time"])} s</span></div>{table}</div>')
        rest = total - min(len(items), PER_TYPE)
        if rest > 0:
            out.append(f"<p class=muted>… and {rest} more {kind} (all in summary.json"
                       f"{', up to its cap' if kind in s['anomalies_truncated'] else ''}).</p>")
    return "".join(out) or "<p>No anomalies.</p>"


def _system(cluster: dict) -> str:
    """Which system ran, and its size: "tansu, 3 brokers" (run.json `cluster`;
    older runs name no system: the built-in broker), and for the built-in
    broker its coordination mode: "chaoslog (V2 coordination), 3 brokers"."""
    if not cluster:
        return ""
    n = cluster.get("brokers")
    size = f", {n} broker{'s' if n != 1 else ''}" if isinstance(n, int) else ""
    system = cluster.get("system") or "chaoslog"
    if system == "chaoslog":
        mode = str((cluster.get("broker_config") or {}).get("coordination") or "controller")
        system += f" ({MODE_TITLES.get(mode, mode)})"
    return f"{system}{size}"


def render(summary: dict, run_json: dict, ctx: dict | None = None) -> str:
    s = summary
    verdict = s["verdict"]
    sub = " · ".join(x for x in (
        f"run {s['run']}",
        f"seed {run_json.get('seed')}" if run_json.get("seed") is not None else "",
        str(run_json.get("started_at") or ""),
        _system(run_json.get("cluster") or {}),
        f"faults: {', '.join(map(str, run_json.get('faults') or [])) or 'none'}",
        f"checker: {s['checker']}",
    ) if x)
    warn = ""
    if s["warnings"]:
        warn = "<h2>Warnings</h2><ul>" + "".join(f"<li>{_e(w)}</li>" for w in s["warnings"]) + "</ul>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(verdict.upper())} — chaoslog run {_e(s['run'])}</title>
<style>{CSS}{CHART_CSS}</style></head>
<body>
<header class="verdict {verdict}">
<div class="big">{_e(verdict.upper())}</div>
<div class="sub">{_e(sub)}</div>
<div class="why">{_e(verdict_reason(s))}</div>
</header>
<main>
{warn}
<h2>Key numbers</h2>
{_key_numbers(s)}
<h2>Anomalies</h2>
{_anomaly_table(s)}
<h2>Timeline</h2>
{_charts(s)}
<h2>Resources</h2>
<p class=muted>Sampled every 10 s from the nodes' processes and ZooKeeper; a gap is a node that was
down. Over a long run these lines stay flat unless something leaks.</p>
{_resources(s)}
<h2>Fault coverage</h2>
<p class=muted>Every fault of the run: did it take effect (the injector's notes, and what the
cluster's metadata samples showed within it and the 10 s after), and what happened meanwhile.</p>
{_fault_windows(s)}
<h2>Oracles</h2>
<p class=muted>A guarantee is checked only when the run recorded what its oracle reads.</p>
{_oracles(s)}
<h2>Final reads</h2>
{_final_reads(s)}
<h2>Anomalies in detail</h2>
<p class=muted>Up to {PER_TYPE} per type, each with the ops around it. Times are seconds since the run started.</p>
{_instances(s, ctx)}
<h2>Configuration (run.json)</h2>
<pre>{_e(json.dumps(run_json, indent=2, sort_keys=True))}</pre>
</main></body></html>
"""


def write_report(path: Path, summary: dict, run_json: dict, ctx: dict | None = None) -> Path:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(summary, run_json, ctx), encoding="utf-8")
    tmp.replace(path)
    return path
