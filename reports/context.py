"""The ops around an anomaly, for the report: who wrote it, who read what where.

A report shows, for each of the first few instances of each anomaly type, the
events that explain it: which, each type's entry says (reports/registry.py,
`Context`). `requests_for` lists what to fetch (ops by id, reads of a value,
reads and acknowledgements at an offset); each checker fetches those keys its
own way (SparkChecker.context: broadcast joins against the cached data;
`reference_context`: a second pass over the history); `rows_for` then
assembles one small table per instance.
"""

from __future__ import annotations

from collections import defaultdict

from reports.registry import ANOMALIES, BY_NAME, Context

PER_TYPE = 50  # instances shown per anomaly type
PER_KEY = 20  # rows fetched per key (reads of a value, reads at an offset...)
RECORDS_SHOWN = 12  # records listed for a poll


def _shown(summary: dict, per_type: int = PER_TYPE):
    for e in ANOMALIES:
        for inst in summary["anomalies"][e.name][:per_type]:
            yield e.context, inst


def _ops(shown: Context, a: dict) -> list[int]:
    return [a[name] for name in shown.ops if a.get(name) is not None]


def _offsets(shown: Context, a: dict) -> list[int]:
    """The offsets whose reads are shown."""
    at = a[shown.reads_at]
    return list(range(at - shown.around, at + shown.around + 1))


def requests_for(summary: dict, per_type: int = PER_TYPE) -> dict:
    """The keys whose events the report needs for the instances it shows."""
    req = {"ops": set(), "reads_of": set(), "reads_at": set(), "acks_at": set()}
    for shown, a in _shown(summary, per_type):
        tp = (a["topic"], a["partition"])
        req["ops"].update(_ops(shown, a))
        if shown.reads_of_value:
            req["reads_of"].add((*tp, a["value"]))
        if shown.acks_at:
            req["acks_at"].add((*tp, a[shown.acks_at]))
        if shown.reads_at:
            req["reads_at"].update((*tp, o) for o in _offsets(shown, a))
    return req


def empty_context() -> dict:
    return {"ops": defaultdict(list), "reads_of": defaultdict(list),
            "reads_at": defaultdict(list), "acks_at": defaultdict(list)}


# --------------------------------------------------------------------------
# Rows of one instance's table


def _op_rows(events: list[dict]) -> list[dict]:
    rows = []
    for ev in events:
        what = f"{ev['f']} {ev['type']}"
        if ev.get("final"):
            what += " (final)"
        row = {"index": ev["index"], "time": ev["time"], "process": ev["process"], "op": ev["op"],
               "what": what, "offset": ev.get("offset"), "value": ev.get("value"), "note": ""}
        if ev["f"] == "poll" and ev["type"] == "ok":
            recs = ev.get("records") or []
            shown = ", ".join(f"{o}:{v}" for o, v in recs[:RECORDS_SHOWN])
            more = f" … (+{len(recs) - RECORDS_SHOWN})" if len(recs) > RECORDS_SHOWN else ""
            row["note"] = f"records [{shown}{more}] hw {ev.get('high_watermark')}"
        elif ev["f"] == "poll" and ev["type"] == "invoke":
            row["note"] = "from offset " + ("(current position)" if ev.get("offset") is None else str(ev["offset"]))
            row["offset"] = None
        if ev.get("error"):
            row["note"] = (row["note"] + " " + ev["error"]).strip()
        rows.append(row)
    return rows


def _read_rows(reads: list[dict], note: str = "") -> list[dict]:
    return [{"index": r["index"], "time": r["time"], "process": r["process"], "op": r["op"],
             "what": "read", "offset": r["offset"], "value": r["value"], "note": note} for r in reads]


def _ack_rows(acks: list[dict]) -> list[dict]:
    return [{"index": r["index"], "time": r["time"], "process": r["process"], "op": r["op"],
             "what": "acknowledged", "offset": r["offset"], "value": r["value"], "note": ""}
            for r in acks]


def rows_for(kind: str, a: dict, ctx: dict) -> list[dict]:
    """The table of events explaining one anomaly instance, in index order, without repeats."""
    shown = BY_NAME[kind].context
    tp = (a["topic"], a["partition"])
    ops = _ops(shown, a)
    rows: list[dict] = []
    for op in ops:
        rows += _op_rows(ctx["ops"].get(op, []))
    if shown.reads_of_value:
        rows += _read_rows(ctx["reads_of"].get((*tp, a["value"]), []))
    if shown.acks_at:  # (an op shown above: its acknowledgement is one of its events)
        rows += _ack_rows([r for r in ctx["acks_at"].get((*tp, a[shown.acks_at]), []) if r["op"] not in ops])
    if shown.reads_at:
        for o in _offsets(shown, a):
            rows += _read_rows(ctx["reads_at"].get((*tp, o), []), note=shown.note)
    seen, out = set(), []
    for r in sorted(rows, key=lambda r: (r["index"], r["what"], r["offset"] or 0)):
        key = (r["index"], r["what"], r["offset"], r["value"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


# --------------------------------------------------------------------------
# Fetching


def reference_context(run, req: dict, per_key: int = PER_KEY) -> dict:
    """One more pass over the history, keeping the events the keys ask for."""
    from reports.readers import iter_judged_events

    ctx = empty_context()
    pending: dict[int, dict] = {}
    for ev in iter_judged_events(run):
        if ev["op"] in req["ops"] and ev["f"] != "nemesis":
            ctx["ops"][ev["op"]].append(ev)
        if ev["f"] == "send":
            if ev["type"] == "invoke":
                pending[ev["op"]] = ev
            elif ev["type"] == "ok":
                pending.pop(ev["op"], None)
                key = (ev["topic"], ev["partition"], ev["offset"])
                if key in req["acks_at"] and len(ctx["acks_at"][key]) < per_key:
                    ctx["acks_at"][key].append(
                        {"index": ev["index"], "time": ev["time"], "process": ev["process"],
                         "op": ev["op"], "offset": ev["offset"], "value": ev["value"]})
            continue
        if ev["f"] == "poll" and ev["type"] == "ok":
            for offset, value in ev["records"]:
                row = {"index": ev["index"], "time": ev["time"], "process": ev["process"],
                       "op": ev["op"], "offset": offset, "value": value}
                k1 = (ev["topic"], ev["partition"], value)
                if k1 in req["reads_of"] and len(ctx["reads_of"][k1]) < per_key:
                    ctx["reads_of"][k1].append(row)
                k2 = (ev["topic"], ev["partition"], offset)
                if k2 in req["reads_at"] and len(ctx["reads_at"][k2]) < per_key:
                    ctx["reads_at"][k2].append(row)
    return ctx
