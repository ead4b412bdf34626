"""Transactions: what run.json and groups.jsonl say of them, and the rules both checkers share.

A run whose producers write in Kafka transactions says so in run.json
(`workload.transactions: true`) and records, on its sends and polls, the
transaction each belongs to, on `f: "txn"` ops how each transaction ended,
and on a pipeline's outputs the input they were made from
(docs/history-format.md, "Transactions"). The transactional anomaly types
(docs/anomalies.md, "Transactions (chaoslog)") are judged only in such a
run; elsewhere the transaction fields are ignored and the types say
`no input`. This module holds what needs no history: whether a run is
transactional, its pipeline, the pipeline group's final committed offsets
(groups.jsonl `kind: committed`), a transaction's outcome from its txn ops,
and summary.json `oracles` of the types. Each checker finds the instances
its own way (the reference in dicts, the Spark checker in joins).
"""

from __future__ import annotations

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
READ_COMMITTED = "read_committed"
COMMIT = "commit"  # a txn op's intent that commits
# The harness times events when it receives them, and the lines of
# different workers arrive by different streams (pipes; the docker backend's
# log streams): under load one worker's event may be received after another
# worker's that it preceded. A read counts as precommitted only when it
# completed this long before the commit was invoked.
RECEIPT_SKEW_NS = 1_000_000_000

# The transaction types (reports/registry.py) that need a consume-transform-produce pipeline.
PIPELINE_TYPES = ("eos-missing", "eos-duplicate")

NO_TRANSACTIONS = "no input: no transactions in the run (run.json workload.transactions)"
NO_PIPELINE = "no input: no consume-transform-produce pipeline (run.json workload.pipeline)"
NO_COMMITTED = ("no input: no committed offset of the pipeline's group after it stopped "
                "(groups.jsonl kind committed)")


def _workload(run_json: dict) -> dict:
    w = run_json.get("workload")
    return w if isinstance(w, dict) else {}


def transactional(run_json: dict) -> bool:
    """run.json says the run's producers wrote in transactions."""
    return _workload(run_json).get("transactions") is True


def pipeline(run_json: dict) -> dict | None:
    """run.json's `workload.pipeline` ({input, output, group}) of a
    transactional run, `input` as a list of topics (one topic's name is
    read as a list of one), or None."""
    p = _workload(run_json).get("pipeline")
    if not transactional(run_json) or not isinstance(p, dict):
        return None
    inputs = [p["input"]] if isinstance(p.get("input"), str) else p.get("input")
    if not (isinstance(inputs, list) and inputs and all(isinstance(t, str) for t in inputs)):
        return None
    if not all(isinstance(p.get(k), str) for k in ("output", "group")):
        return None
    return {**p, "input": inputs}


def outcome(ends: list[tuple]) -> str:
    """A transaction's outcome from its txn ops' (intent, outcome): committed
    when a commit is `ok`; else unknown when a commit's outcome is (`info`,
    or no completion); else aborted (an abort, a commit that failed, no txn op)."""
    commits = [o for intent, o in ends if intent == COMMIT]
    if "ok" in commits:
        return COMMITTED
    if any(o in ("info", "pending") for o in commits):
        return UNKNOWN
    return ABORTED


def committed_offsets(groups: list[dict] | None, pipe: dict | None) -> dict[tuple, dict]:
    """(topic, partition) of the pipeline's input -> the last `committed`
    event of its group there (groups.jsonl, written after the pipeline stopped)."""
    if pipe is None:
        return {}
    out = {}
    for ev in groups or ():
        if (ev.get("kind") == "committed" and ev.get("group") == pipe["group"]
                and ev.get("topic") in pipe["input"] and isinstance(ev.get("partition"), int)
                and isinstance(ev.get("offset"), int)):
            out[(ev["topic"], ev["partition"])] = ev
    return out


def status(names: tuple[str, ...], run_json: dict, groups: list[dict] | None) -> dict[str, str]:
    """summary.json `oracles` of the transaction types `names`: "checked", or why not."""
    pipe = pipeline(run_json)

    def why(name: str) -> str:
        if not transactional(run_json):
            return NO_TRANSACTIONS
        if name not in PIPELINE_TYPES:
            return "checked"
        if pipe is None:
            return NO_PIPELINE
        if name == "eos-missing" and not committed_offsets(groups, pipe):
            return NO_COMMITTED
        return "checked"
    return {name: why(name) for name in names}
