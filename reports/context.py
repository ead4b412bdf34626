"""The ops around an anomaly, for the report: who wrote it, who read what where.

A report shows, for each of the first few instances of each anomaly type, the
events that explain it. `requests_for` lists what to fetch (ops by id, reads
of a value, reads and acknowledgements at an offset); each checker fetches
those keys its own way (`spark_context`: broadcast joins against the cached
data; `reference_context`: a second pass over the history); `rows_for` then
assembles one small table per instance.
"""

from __future__ import annotations

from collections import defaultdict

from reports.summary import ANOMALY_TYPES

PER_TYPE = 50  # instances shown per anomaly type
PER_KEY = 20  # rows fetched per key (reads of a value, reads at an offset...)
RECORDS_SHOWN = 12  # records listed for a poll


def _shown(summary: dict, per_type: int = PER_TYPE):
    for kind in ANOMALY_TYPES:
        for inst in summary["anomalies"][kind][:per_type]:
            yield kind, inst


def requests_for(summary: dict, per_type: int = PER_TYPE) -> dict:
    """The keys whose events the report needs for the instances it shows."""
    req = {"ops": set(), "reads_of": set(), "reads_at": set(), "acks_at": set()}
    for kind, a in _shown(summary, per_type):
        tp = (a["topic"], a["partition"])
        if kind in ("lost", "unseen"):
            req["ops"].add(a["op"])
            for o in (a["offset"] - 1, a["offset"], a["offset"] + 1):
                req["reads_at"].add((*tp, o))
            req["acks_at"].add((*tp, a["offset"]))
        elif kind in ("duplicate", "aborted-read"):
            if a.get("send_op") is not None:
                req["ops"].add(a["send_op"])
            req["reads_of"].add((*tp, a["value"]))
        elif kind == "phantom-read":
            req["reads_of"].add((*tp, a["value"]))
            req["acks_at"].add((*tp, a["offset"]))
        elif kind == "inconsistent-offset":
            req["reads_at"].add((*tp, a["offset"]))
            req["acks_at"].add((*tp, a["offset"]))
        else:  # nonmonotonic-poll, poll-skip
            req["ops"].add(a["op"])
            if a.get("previous_op") is not None:
                req["ops"].add(a["previous_op"])
            if kind == "poll-skip":
                req["reads_at"].add((*tp, a["skipped"]))
                req["acks_at"].add((*tp, a["skipped"]))
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
    tp = (a["topic"], a["partition"])
    rows: list[dict] = []
    if kind in ("lost", "unseen"):
        rows += _op_rows(ctx["ops"].get(a["op"], []))
        rows += _ack_rows([r for r in ctx["acks_at"].get((*tp, a["offset"]), []) if r["op"] != a["op"]])
        for o in (a["offset"] - 1, a["offset"], a["offset"] + 1):
            rows += _read_rows(ctx["reads_at"].get((*tp, o), []))
    elif kind in ("duplicate", "aborted-read"):
        if a.get("send_op") is not None:
            rows += _op_rows(ctx["ops"].get(a["send_op"], []))
        rows += _read_rows(ctx["reads_of"].get((*tp, a["value"]), []))
    elif kind == "phantom-read":
        rows += _read_rows(ctx["reads_of"].get((*tp, a["value"]), []))
        rows += _ack_rows(ctx["acks_at"].get((*tp, a["offset"]), []))
    elif kind == "inconsistent-offset":
        rows += _ack_rows(ctx["acks_at"].get((*tp, a["offset"]), []))
        rows += _read_rows(ctx["reads_at"].get((*tp, a["offset"]), []))
    else:
        for op in (a.get("previous_op"), a["op"]):
            if op is not None:
                rows += _op_rows(ctx["ops"].get(op, []))
        if kind == "poll-skip":
            rows += _ack_rows(ctx["acks_at"].get((*tp, a["skipped"]), []))
            rows += _read_rows(ctx["reads_at"].get((*tp, a["skipped"]), []), note="the skipped offset")
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
    from reports.readers import iter_events

    ctx = empty_context()
    pending: dict[int, dict] = {}
    for ev in iter_events(run):
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


def spark_context(checker, requests: dict[int, dict], per_key: int = PER_KEY) -> dict[int, dict]:
    """The same keys fetched from the Spark checker's cached data, for a batch of runs."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from reports.spark_checker import F_NAMES, OUTCOMES

    spark = checker.spark
    out = {k: empty_context() for k in requests}
    c = F.col
    types = {**OUTCOMES, 0: "invoke"}

    def limited(df, key):
        w = Window.partitionBy("tp", key).orderBy("index")
        return df.withColumn("_n", F.row_number().over(w)).filter(c("_n") <= per_key)

    ops = [(k, op) for k, r in requests.items() for op in r["ops"]]
    if ops:
        keys = spark.createDataFrame(ops, "run int, op long")
        rows = checker._collect(
            checker.ev.filter(c("fn").isin(*F_NAMES)).join(F.broadcast(keys), ["run", "op"]).select(
                "run", "tp", "index", "time", "process", "op", "t", "fn", "value", "offset",
                "records", "high_watermark", "final", "error"),
            "context: ops",
        )
        for r in rows:
            ev = r.asDict(recursive=True)
            _run, ev["topic"], ev["partition"] = checker.tps[ev.pop("tp")]
            ev["type"], ev["f"] = types[ev.pop("t")], F_NAMES[ev.pop("fn")]
            out[ev.pop("run")]["ops"][ev["op"]].append(ev)
        for ctx in out.values():
            for evs in ctx["ops"].values():
                evs.sort(key=lambda e: e["index"])

    def fetch(name, df, key):
        ks = [(checker.tp_of(k, t, p), x) for k, r in requests.items() for (t, p, x) in r[name]]
        ks = [(tp, x) for tp, x in ks if tp is not None]
        if not ks:
            return
        keys = spark.createDataFrame(ks, f"tp long, {key} long")
        rows = checker._collect(
            limited(df.join(F.broadcast(keys), ["tp", key]), key).select(
                "run", "tp", "process", "op", "index", "time", "offset", "value"),
            f"context: {name}",
        )
        for r in rows:
            d = r.asDict()
            run, topic, partition = checker.tps[d.pop("tp")]
            del d["run"]
            out[run][name][(topic, partition, d[key])].append(d)

    fetch("reads_of", checker.reads, "value")
    fetch("reads_at", checker.reads, "offset")
    acks = checker.acks()
    fetch("acks_at", acks, "offset")
    for ctx in out.values():
        for name in ("reads_of", "reads_at", "acks_at"):
            for rows in ctx[name].values():
                rows.sort(key=lambda r: r["index"])
    return out
