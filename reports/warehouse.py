"""The results warehouse: every night's runs in one Parquet store.

    chaoslog warehouse CAMPAIGN_OR_RUN_DIR... --into WAREHOUSE [--night YYYY-MM-DD]
                       [--master spark://HOST:PORT]

One Spark session for the whole batch (not a JVM per run): the runs that
are not in the store yet are checked by the Spark checker
(reports.api.analyze, all of them in that session), then their rows are
appended, partitioned by night, to four tables:

  runs/       one row per run: campaign, cell, run id, seed, configuration,
              faults, verdict, fatal types, anomaly counts, events, seconds
  anomalies/  one row per anomaly instance: run, type, fatal, topic,
              partition, offset, value, time (s from the run's start)
  faults/     one row per fault window: run, fault, targets, start and stop
              (s), took effect, sends ok/failed/unknown during it
  seconds/    one row per run second: sends and polls ok/failed/unknown,
              p50/p99 latency, availability, the faults active

A run already in the store (by run id) is skipped, so loading a campaign
directory again after more runs finished appends only the new ones. Spark
SQL works on the store directly (README: three example queries); the trends
page (reports/trends.py) is built from it.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Iterable

from reports.api import analyze

TABLES = ("runs", "anomalies", "faults", "seconds")
NS = 1e9


def _schemas():
    from pyspark.sql import types as T
    s, i, l, d, b = T.StringType(), T.IntegerType(), T.LongType(), T.DoubleType(), T.BooleanType()

    def st(*fields):
        return T.StructType([T.StructField(n, t, True) for n, t in fields])
    counts = T.MapType(s, l)
    return {
        "runs": st(("night", s), ("campaign", s), ("cell", s), ("run", s), ("run_dir", s),
                   ("seed", l), ("config", s), ("brokers", i), ("faults", T.ArrayType(s)),
                   ("verdict", s), ("fatal", T.ArrayType(s)), ("anomaly_counts", counts),
                   ("events", l), ("seconds", d), ("acknowledged", l), ("version", s),
                   ("started_at", s)),
        "anomalies": st(("night", s), ("run", s), ("type", s), ("fatal", b), ("topic", s),
                        ("partition", i), ("offset", l), ("value", l), ("time_s", d)),
        "faults": st(("night", s), ("run", s), ("fault", s), ("targets", T.ArrayType(s)),
                     ("start_s", d), ("stop_s", d), ("took_effect", b), ("send_ok", l),
                     ("send_fail", l), ("send_info", l)),
        "seconds": st(("night", s), ("run", s), ("second", i), ("send_ok", l), ("send_fail", l),
                      ("send_info", l), ("poll_ok", l), ("poll_fail", l), ("poll_info", l),
                      ("send_p50_ms", d), ("send_p99_ms", d), ("availability", d),
                      ("faults", T.ArrayType(s))),
    }


def config_name(broker_config: dict[str, Any]) -> str:
    """A configuration as people name it: the keys that decide the design's
    guarantees (docs/design.md#config), the rest left out."""
    c = broker_config or {}
    unclean = c.get("unclean.leader.election.enable", True)
    if isinstance(unclean, str):  # as given on the command line: "false"
        unclean = unclean.strip().lower() not in ("false", "0", "no", "off")
    return (f"min-isr={c.get('min.insync.replicas', 1)} "
            f"unclean={'on' if unclean else 'off'} "
            f"truncation={c.get('replication.truncation', 'hw')}")


def find_runs(paths: Iterable[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Run directories under the given paths, each with what its campaign
    says of it (campaign, cell); a campaign directory lists its runs in
    campaign.json."""
    out: list[tuple[Path, dict[str, Any]]] = []
    for p in map(Path, paths):
        state = p / "campaign.json"
        if state.is_file():
            d = json.loads(state.read_text())
            for r in d.get("runs", []):
                run_dir = Path(r["run_dir"])
                if (run_dir / "run.json").is_file():
                    out.append((run_dir, {"campaign": d.get("name"),
                                          "cell": r.get("label")}))
        elif (p / "run.json").is_file():
            out.append((p, {}))
        elif p.is_dir():
            out += [(d, {}) for d in sorted(p.iterdir()) if (d / "run.json").is_file()]
    return out


def rows_of(run_dir: Path, summary: dict[str, Any], meta: dict[str, Any], night: str,
            labels: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The four tables' rows of one checked run (pure: unit-tested)."""
    run = summary.get("run") or meta.get("run") or run_dir.name
    cluster = meta.get("cluster") or {}
    fatal = set(summary.get("fatal") or [])
    windows = [w for w in summary.get("fault_windows") or [] if w.get("fault") != "final-heal"]
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    rows["runs"].append({
        "night": night, "campaign": labels.get("campaign"), "cell": labels.get("cell"),
        "run": run, "run_dir": str(run_dir), "seed": meta.get("seed"),
        "config": config_name(cluster.get("broker_config") or {}),
        "brokers": cluster.get("brokers"), "faults": sorted(meta.get("faults") or []),
        "verdict": summary.get("verdict"), "fatal": sorted(fatal),
        "anomaly_counts": {k: int(v) for k, v in (summary.get("anomaly_counts") or {}).items()},
        "events": summary.get("events"), "seconds": (summary.get("duration_ns") or 0) / NS,
        "acknowledged": (summary.get("counts") or {}).get("acknowledged"),
        "version": meta.get("version"), "started_at": meta.get("started_at")})
    for kind, instances in (summary.get("anomalies") or {}).items():
        for a in instances:
            offsets = a.get("offsets") or [a.get("offset")]
            rows["anomalies"].append({
                "night": night, "run": run, "type": kind, "fatal": kind in fatal,
                "topic": a.get("topic"), "partition": a.get("partition"),
                "offset": offsets[0] if offsets and isinstance(offsets[0], int) else None,
                "value": a.get("value") if isinstance(a.get("value"), int) else None,
                "time_s": a["time"] / NS if isinstance(a.get("time"), (int, float)) else None})
    for w in windows:
        sends = (w.get("ops") or {}).get("send") or {}
        rows["faults"].append({
            "night": night, "run": run, "fault": w.get("fault"), "targets": w.get("targets") or [],
            "start_s": (w.get("start") or 0) / NS,
            "stop_s": w["stop"] / NS if w.get("stop") is not None else None,
            "took_effect": w.get("took_effect"), "send_ok": sends.get("ok", 0),
            "send_fail": sends.get("fail", 0), "send_info": sends.get("info", 0)})
    for t in summary.get("timeline") or []:
        sec = t.get("second", 0)
        active = sorted({w["fault"] for w in windows
                         if w.get("start", 0) / NS <= sec
                         and (w.get("stop") is None or sec - 1 <= w["stop"] / NS)})
        rows["seconds"].append({
            "night": night, "run": run, "second": sec,
            **{k: t.get(k, 0) for k in ("send_ok", "send_fail", "send_info", "poll_ok",
                                        "poll_fail", "poll_info")},
            "send_p50_ms": t["send_p50_ns"] / 1e6 if t.get("send_p50_ns") is not None else None,
            "send_p99_ms": t["send_p99_ns"] / 1e6 if t.get("send_p99_ns") is not None else None,
            "availability": t.get("availability"), "faults": active})
    return rows


def stored_runs(spark: Any, warehouse: Path) -> set[str]:
    path = warehouse / "runs"
    if not path.is_dir():
        return set()
    return {r["run"] for r in spark.read.parquet(str(path)).select("run").collect()}


def load(spark: Any, paths: Iterable[Path], warehouse: Path, night: str | None = None,
         log=lambda m: None) -> dict[str, Any]:
    """Check the new runs under `paths` in this Spark session and append them
    to the warehouse. Returns what was done: loaded, skipped, failed runs."""
    warehouse = Path(warehouse)
    night = night or dt.date.today().isoformat()
    found = find_runs(paths)
    have = stored_runs(spark, warehouse)
    new = [(d, lab) for d, lab in found if _run_id(d) not in have]
    log(f"{len(found)} run(s) found, {len(found) - len(new)} already in the warehouse, "
        f"checking {len(new)} in one Spark job")
    verdicts = analyze([d for d, _ in new], spark=spark, checker="spark") if new else []
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    failed = []
    for (run_dir, labels), v in zip(new, verdicts):
        if v.summary is None:
            failed.append({"run_dir": str(run_dir), "error": v.error or v.verdict})
            continue
        meta = json.loads((run_dir / "run.json").read_text())
        for t, rs in rows_of(run_dir, v.summary, meta, night, labels).items():
            rows[t] += rs
    schemas = _schemas()
    for t in TABLES:
        if rows[t]:
            (spark.createDataFrame(rows[t], schemas[t]).write.mode("append")
             .partitionBy("night").parquet(str(warehouse / t)))
    return {"night": night, "found": len(found), "loaded": len(rows["runs"]),
            "skipped": len(found) - len(new), "failed": failed}


def _run_id(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "run.json").read_text()).get("run")
    except (OSError, ValueError):
        return None


def register(spark: Any, warehouse: Path) -> list[str]:
    """The warehouse's tables as Spark SQL views (runs, anomalies, faults,
    seconds); returns the names of those that exist."""
    from pyspark.sql import functions as F
    names = []
    for t in TABLES:
        path = Path(warehouse) / t
        if path.is_dir():
            # The night as written, not the date Spark's partition discovery infers.
            (spark.read.parquet(str(path)).withColumn("night", F.col("night").cast("string"))
             .createOrReplaceTempView(t))
            names.append(t)
    return names

