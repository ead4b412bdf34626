"""The anomaly types, one entry each (docs/anomalies.md defines them).

An entry says everything about an anomaly type but how it is found: its name
(summary.json's key), its title (what it means, in one line), when it is
fatal, what it is judged from, the canonical order of its instances, what
the report shows around an instance and the line it writes for it; and it
names the two functions that find it, one per checker:

  reference  reports/reference_analysis.py: Analysis of one run -> [instance]
  spark      reports/spark_analysis.py:     SparkAnalysis of a batch -> {run: Found}

Both must find the same instances, field for field. summary.py (names,
fatality), report.py (titles, lines), context.py (what to fetch) and both
checkers (which function, in which order) read this table and no list of
their own: adding an anomaly type is an entry here and one function in each
checker (docs/architecture.md, "Adding an anomaly").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from reports import reference_analysis as ref
from reports import spark_analysis as sp

# What an anomaly type is judged from, besides the clients' history.
HISTORY = "history"              # the history alone
OBSERVATIONS = "observations"    # what the harness observed of the cluster (observations.jsonl)
GROUPS = "groups"                # consumer groups' commits and rebalances (groups.jsonl)
INCARNATIONS = "incarnations"    # topics deleted and created again (observations.jsonl)
TRANSACTIONS = "transactions"    # a transactional run's txn fields (and its pipeline's groups.jsonl)


# -- when a type is fatal: f(findings, final reads complete) -> bool ----------------------

def always(findings, final_complete: bool) -> bool:
    return True


def never(findings, final_complete: bool) -> bool:
    return False


def once_final_reads_complete(findings, final_complete: bool) -> bool:
    return final_complete


def idempotent_writes(findings, final_complete: bool) -> bool:
    """`duplicate`: fatal when a duplicated value's producer was idempotent,
    or the run's was; a duplicate the client re-sent as a new write
    (observations.py, writers_of_duplicates) is reported, not fatal."""
    dups = findings.anomalies["duplicate"]
    all_resent = (bool(dups) and len(dups) == findings.anomaly_counts["duplicate"]
                  and all(d.get("resent") for d in dups))
    return bool(findings.idempotent_duplicates) or (findings.idempotent and not all_resent)


# -- the canonical order of instances (both checkers sort by it before capping) ------------

def by(*fields: str) -> Callable[[dict], tuple]:
    return lambda a: tuple(a[f] for f in fields)


def observed_order(a: dict) -> tuple:
    """Instances of the observations: some name no partition (the controller, a broker)."""
    return (a["topic"] or "", a["partition"] if a["partition"] is not None else -1,
            a["time"], json.dumps(a, sort_keys=True, default=str))


SEQUENCE_ORDER = by("topic", "partition", "process", "index", "offset", "previous")


@dataclass(frozen=True)
class Context:
    """What the report shows around an instance (reports/context.py): the
    events of the ops its fields `ops` name; the reads of its value; the
    acknowledgements at the offset its field `acks_at` names and the reads
    at the offset `reads_at` names (`around`: and that many offsets either
    side), with `note` on those reads."""

    ops: tuple[str, ...] = ()
    reads_of_value: bool = False
    acks_at: str | None = None
    reads_at: str | None = None
    around: int = 0
    note: str = ""


NOTHING = Context()  # the instance says it all (observations, groups.jsonl)
AT_OFFSET = Context(acks_at="offset", reads_at="offset")
OF_ACK = Context(ops=("op",), acks_at="offset", reads_at="offset", around=1)
OF_READS = Context(ops=("send_op",), reads_of_value=True)
OF_POLLS = Context(ops=("previous_op", "op"))


@dataclass(frozen=True)
class Anomaly:
    name: str
    title: str                                  # the report's "meaning" of the type
    fatal: Callable[..., bool]                  # (findings, final reads complete) -> fatal?
    evidence: str                               # HISTORY, OBSERVATIONS, GROUPS, INCARNATIONS or TRANSACTIONS
    order: Callable[[dict], tuple]              # sort key of an instance
    context: Context                            # what the report fetches around an instance
    line: Callable[[dict], str]                 # the report's line for an instance
    reference: Callable                         # reference_analysis: Analysis -> list[dict]
    spark: Callable                             # spark_analysis: SparkAnalysis -> {run: Found}


# -- the report's line for one instance ----------------------------------------------------

def _tp(a: dict) -> str:
    return f"{a['topic']}/{a['partition']}"


def _acknowledged(a: dict) -> str:
    return f"{_tp(a)}: value {a['value']} acknowledged at offset {a['offset']} (op {a['op']}, process {a['process']})"


def _read_by(a: dict) -> str:
    return f"{_tp(a)}: value {a['value']} read at offset {a['offset']} by process {a['process']} (op {a['op']})"


def _returned(a: dict, extra: str = "") -> str:
    return (f"{_tp(a)}: process {a['process']} returned offset {a['offset']} right after {a['previous']}"
            f"{extra} (poll op {a['op']})")


def _duplicate(a: dict) -> str:
    text = f"{_tp(a)}: value {a['value']} read at offsets {', '.join(map(str, a['offsets']))}"
    writers = [w for w in a.get("writers") or [] if w[1] is not None]
    if writers:
        text += "; written by " + ", ".join(
            f"producer {pid} epoch {epoch} sequence {seq} (offset {o})" for o, pid, epoch, seq in writers)
    if a.get("resent"):
        text += ": the client sent it again as a new write"
    return text


def _torn(a: dict) -> str:
    return (f"{_tp(a)}: transaction {a['txn']} ({a['status']}): final reads returned "
            f"{', '.join(map(str, a['present']))}, not {', '.join(map(str, a['missing']))}")


def _inconsistent(a: dict) -> str:
    acked = f"; acknowledged: {', '.join(map(str, a['acknowledged']))}" if a["acknowledged"] else ""
    return f"{_tp(a)}: offset {a['offset']} holds values {', '.join(map(str, a['values']))}{acked}"


def _epoch_regression(a: dict) -> str:
    where = _tp(a) if a["topic"] is not None else "controller"
    return f"{where}: {a['what']}: {a['previous']} then {a['current']}"


def _stale_metadata(a: dict) -> str:
    if a["topic"] is None:
        return f"{a['broker']}: no Metadata answer: {a.get('detail')}"
    return f"{_tp(a)}: {a['broker']} served {a['served']}, ZooKeeper {a['zookeeper']}"


def _unrecovered(a: dict) -> str:
    if a["kind"] == "cluster":
        return f"the cluster did not recover within {a['seconds']} s: {a['detail']}"
    return f"{_tp(a)}: every send after the recovery failed ({a['failed']}): {a['errors']}"


def _hw_regression(a: dict) -> str:
    if a["rule"] == "HW past the LEO":
        return f"{_tp(a)}: broker {a['broker']} (epoch {a['leader_epoch']}): HW {a['hw']} past its LEO {a['leo']}"
    return (f"{_tp(a)}: leader {a['broker']} (epoch {a['leader_epoch']}): HW {a['previous']} "
            f"then {a['hw']}")


def _invariant(name: str, title: str, line: Callable[[dict], str]) -> Anomaly:
    """An invariant oracle's entry (reports/invariants.py): fatal, judged
    from the observations (where the run's configuration promises it), each
    instance saying it all."""
    fn = name.replace("-", "_")
    return Anomaly(name=name, title=title, fatal=always, evidence=OBSERVATIONS, order=observed_order,
                   context=NOTHING, line=line, reference=getattr(ref, fn), spark=getattr(sp, fn))


# -- the table -------------------------------------------------------------------------------

ANOMALIES: tuple[Anomaly, ...] = (
    Anomaly(
        name="lost",
        title="acknowledged write never read, although reads went past its offset",
        fatal=always,
        evidence=HISTORY,
        order=by("topic", "partition", "offset", "value"),
        context=OF_ACK,
        line=_acknowledged,
        reference=ref.lost,
        spark=sp.lost,
    ),
    Anomaly(
        name="unseen",
        title="acknowledged write never read; reads never got that far",
        fatal=once_final_reads_complete,
        evidence=HISTORY,
        order=by("topic", "partition", "offset", "value"),
        context=OF_ACK,
        line=_acknowledged,
        reference=ref.unseen,
        spark=sp.unseen,
    ),
    Anomaly(
        name="duplicate",
        title="one value read at two or more offsets",
        fatal=idempotent_writes,
        evidence=HISTORY,
        order=by("topic", "partition", "value"),
        context=OF_READS,
        line=_duplicate,
        reference=ref.duplicate,
        spark=sp.duplicate,
    ),
    Anomaly(
        name="inconsistent-offset",
        title="one offset bound to two or more values (acks and reads)",
        fatal=always,
        evidence=HISTORY,
        order=by("topic", "partition", "offset"),
        context=AT_OFFSET,
        line=_inconsistent,
        reference=ref.inconsistent_offset,
        spark=sp.inconsistent_offset,
    ),
    Anomaly(
        name="aborted-read",
        title="a read returned a value whose send failed",
        fatal=always,
        evidence=HISTORY,
        order=by("topic", "partition", "value", "offset"),
        context=OF_READS,
        line=_read_by,
        reference=ref.aborted_read,
        spark=sp.aborted_read,
    ),
    Anomaly(
        name="phantom-read",
        title="a read returned a value nobody sent",
        fatal=always,
        evidence=HISTORY,
        order=by("topic", "partition", "value", "offset"),
        context=Context(reads_of_value=True, acks_at="offset"),
        line=_read_by,
        reference=ref.phantom_read,
        spark=sp.phantom_read,
    ),
    Anomaly(
        name="nonmonotonic-poll",
        title="a consumer's offsets went backwards or repeated without a re-seek",
        fatal=always,
        evidence=HISTORY,
        order=SEQUENCE_ORDER,
        context=OF_POLLS,
        line=_returned,
        reference=ref.nonmonotonic_poll,
        spark=sp.nonmonotonic_poll,
    ),
    Anomaly(
        name="poll-skip",
        title="a consumer skipped over an offset known to hold a value, without a re-seek",
        fatal=always,
        evidence=HISTORY,
        order=SEQUENCE_ORDER,
        context=Context(ops=("previous_op", "op"), acks_at="skipped", reads_at="skipped",
                        note="the skipped offset"),
        line=lambda a: _returned(a, f" (offset {a['skipped']} skipped)"),
        reference=ref.poll_skip,
        spark=sp.poll_skip,
    ),
    # chaoslog's oracles beyond the clients' reads (docs/anomalies.md)
    Anomaly(
        name="lost-unreplicated",
        title="an acks=1 write acknowledged and then gone (acks=1 promises nothing more)",
        fatal=never,
        evidence=HISTORY,
        order=by("topic", "partition", "offset", "value"),
        context=OF_ACK,
        line=_acknowledged,
        reference=ref.lost_unreplicated,
        spark=sp.lost_unreplicated,
    ),
    Anomaly(
        name="read-uncommitted",
        title="a fetch returned a record at or past the high watermark it reported",
        fatal=always,
        evidence=HISTORY,
        order=by("topic", "partition", "offset", "value", "index"),
        context=AT_OFFSET,
        line=lambda a: (f"{_tp(a)}: offset {a['offset']} (value {a['value']}) returned by a fetch that "
                        f"reported high watermark {a['high_watermark']}, log start {a['log_start_offset']}"),
        reference=ref.read_uncommitted,
        spark=sp.read_uncommitted,
    ),
    Anomaly(
        name="truncated-read",
        title="a record a consumer read is gone from the final log",
        fatal=once_final_reads_complete,
        evidence=HISTORY,
        order=by("topic", "partition", "offset", "value"),
        context=AT_OFFSET,
        line=lambda a: (f"{_tp(a)}: value {a['value']} read at offset {a['offset']}, but the final log "
                        f"ends at {a['final_high_watermark']}"),
        reference=ref.truncated_read,
        spark=sp.truncated_read,
    ),
    Anomaly(
        name="resurrected",
        title="a topic deleted and created again served a record of its deleted incarnation",
        fatal=always,
        evidence=INCARNATIONS,
        order=by("topic", "partition", "value", "offset"),
        context=OF_READS,
        line=lambda a: (f"{_tp(a)}: value {a['value']}, acknowledged in {a['acknowledged_in']}, read at "
                        f"offset {a['offset']} by process {a['process']} (op {a['op']})"),
        reference=ref.resurrected,
        spark=sp.resurrected,
    ),
    Anomaly(
        name="nonmonotonic-send",
        title="an idempotent producer's writes landed out of the order it sent them",
        fatal=always,
        evidence=HISTORY,
        order=by("topic", "partition", "node", "index"),
        context=Context(ops=("op",)),
        line=lambda a: (f"{_tp(a)}: {a['node']} sent {a['previous_value']} then {a['value']}, "
                        f"acknowledged at offsets {a['previous_offset']} then {a['offset']}"),
        reference=ref.nonmonotonic_send,
        spark=sp.nonmonotonic_send,
    ),
    Anomaly(
        name="ack-below-min-isr",
        title="an acks=all write acknowledged while the ISR was below min.insync.replicas",
        fatal=always,
        evidence=OBSERVATIONS,
        order=by("topic", "partition", "offset", "value"),
        context=OF_ACK,
        line=lambda a: (f"{_tp(a)}: value {a['value']} acknowledged at offset {a['offset']} while the "
                        f"ISR was {a['isr']} (min.insync.replicas {a['min_isr']})"),
        reference=ref.ack_below_min_isr,
        spark=sp.ack_below_min_isr,
    ),
    Anomaly(
        name="replica-divergence",
        title="a replica's committed records differ from the leader's",
        fatal=always,
        evidence=OBSERVATIONS,
        order=observed_order,
        context=NOTHING,
        line=lambda a: (f"{_tp(a)}: {a['broker']} against {a['reference']}, {a['kind']} at offset "
                        f"{a['offset']} ({a['count']} offsets): expected {a['expected']}, found {a['found']}"),
        reference=ref.replica_divergence,
        spark=sp.replica_divergence,
    ),
    Anomaly(
        name="isr-invariant",
        title=("the cluster's metadata showed a leader outside its ISR, or an ISR "
               "outside the replicas"),
        fatal=always,
        evidence=OBSERVATIONS,
        order=observed_order,
        context=NOTHING,
        line=lambda a: f"{_tp(a)}: {a['rule']}: leader {a['leader']}, ISR {a['isr']}, replicas {a['replicas']}",
        reference=ref.isr_invariant,
        spark=sp.isr_invariant,
    ),
    Anomaly(
        name="epoch-regression",
        title="a controller or leader epoch went back, or a leader changed without a new epoch",
        fatal=always,
        evidence=OBSERVATIONS,
        order=observed_order,
        context=NOTHING,
        line=_epoch_regression,
        reference=ref.epoch_regression,
        spark=sp.epoch_regression,
    ),
    Anomaly(
        name="leaderless",
        title="a partition stayed without a live leader while an in-sync replica was alive",
        fatal=always,
        evidence=OBSERVATIONS,
        order=observed_order,
        context=NOTHING,
        line=lambda a: (f"{_tp(a)}: no live leader (leader {a['leader']}) for {a['seconds']} s while "
                        f"in-sync replicas {a['live_isr']} were alive"),
        reference=ref.leaderless,
        spark=sp.leaderless,
    ),
    Anomaly(
        name="stale-metadata",
        title="after recovery a broker served other leaders or ISRs than ZooKeeper",
        fatal=always,
        evidence=OBSERVATIONS,
        order=observed_order,
        context=NOTHING,
        line=_stale_metadata,
        reference=ref.stale_metadata,
        spark=sp.stale_metadata,
    ),
    Anomaly(
        name="unrecovered",
        title="after the faults healed the cluster or a partition did not recover in time",
        fatal=always,
        evidence=OBSERVATIONS,
        order=observed_order,
        context=NOTHING,
        line=_unrecovered,
        reference=ref.unrecovered,
        spark=sp.unrecovered,
    ),
    # The invariant oracles (reports/invariants.py): the design's definitions
    # at every sample of the brokers' own state and of ZooKeeper, judged only
    # where the run's configuration promises them (invariants.Promises:
    # summary.json `oracles` says why not).
    _invariant("isr-behind-hw",
               "a leader's ISR held a follower whose LEO was below the HW "
               "(checked with replication.truncation=leader-epoch)",
               lambda a: (f"{_tp(a)}: leader {a['leader']} (epoch {a['leader_epoch']}) had follower "
                          f"{a['follower']} in its ISR {a['isr']} at LEO {a['follower_leo']}, below "
                          f"the HW {a['hw']}")),
    _invariant("hw-regression",
               "a leader's HW went back within its leader epoch, or a replica's HW passed its LEO",
               _hw_regression),
    _invariant("committed-divergence",
               "two replicas held different batches at one committed offset (checked with "
               "replication.truncation=leader-epoch and no disk fault)",
               lambda a: (f"{_tp(a)}: committed batch at offset {a['offset']}: broker {a['broker']} "
                          f"holds {a['batch']}, broker {a['other_broker']} held {a['other_batch']} "
                          f"(batch: base, last offset, leader epoch, CRC)")),
    _invariant("unclean-election",
               "a leader was elected from outside the ISR (checked with "
               "unclean.leader.election.enable=false)",
               lambda a: (f"{_tp(a)}: leader {a['leader']} (epoch {a['leader_epoch']}) elected from "
                          f"outside the ISR {a['previous_isr']} (leader before: {a['previous_leader']})")),
    _invariant("dead-isr-member",
               "an unregistered broker, or one outside the partition's replicas, stayed in a live "
               "leader's ISR past replica.lag.time.max.ms + the ZooKeeper session timeout + 10 s",
               lambda a: (f"{_tp(a)}: {a.get('rule', 'unregistered')} broker {a['broker']} still "
                          f"in the ISR {a['isr']} of leader {a['leader']} after {a['seconds']} s")),
    _invariant("reassignment-unsynced",
               "a reassignment finished while a live new replica was outside the ISR",
               lambda a: (f"{_tp(a)}: reassignment to {a['targets']} finished with {a['missing']} "
                          f"outside the ISR {a['isr']}")),
    Anomaly(
        name="commit-regressed",
        title="a consumer group's acknowledged committed offset went backwards",
        fatal=always,
        evidence=GROUPS,
        order=by("topic", "partition", "group", "seq"),
        context=NOTHING,
        line=lambda a: (f"{_tp(a)}: group {a['group']}: {a['member']}'s {a['kind']} at offset "
                        f"{a['offset']} after an acknowledged commit at {a['previous']}"),
        reference=ref.commit_regressed,
        spark=sp.commit_regressed,
    ),
    Anomaly(
        name="group-skipped",
        title="a consumer group committed past an acknowledged record no member polled",
        fatal=always,
        evidence=GROUPS,
        order=by("topic", "partition", "group", "offset", "value"),
        context=Context(acks_at="offset", reads_at="offset", note="never polled by the group"),
        line=lambda a: (f"{_tp(a)}: group {a['group']} committed {a['committed']} but never polled "
                        f"value {a['value']} at offset {a['offset']}"),
        reference=ref.group_skipped,
        spark=sp.group_skipped,
    ),
    Anomaly(
        name="resume-past-commit",
        title="a group member resumed past the last commit over records the group never polled",
        fatal=always,
        evidence=GROUPS,
        order=by("topic", "partition", "group", "seq"),
        context=Context(acks_at="skipped", reads_at="skipped", note="never polled by the group"),
        line=lambda a: (f"{_tp(a)}: group {a['group']}: {a['member']} started at {a['offset']}, "
                        f"committed {a['committed']}; offset {a['skipped']} never polled by the group"),
        reference=ref.resume_past_commit,
        spark=sp.resume_past_commit,
    ),
    # Transactions (reports/transactions.py): judged in a run whose run.json says
    # workload.transactions, else summary.json `oracles` says `no input`.
    Anomaly(
        name="aborted-txn-read",
        title="a read_committed read returned a value of an aborted transaction",
        fatal=always,
        evidence=TRANSACTIONS,
        order=by("topic", "partition", "value", "offset"),
        context=OF_READS,
        line=lambda a: f"{_read_by(a)}: its transaction {a['txn']} aborted",
        reference=ref.aborted_txn_read,
        spark=sp.aborted_txn_read,
    ),
    Anomaly(
        name="torn-txn",
        title="the final log holds some of a transaction's values and not the others",
        fatal=always,
        evidence=TRANSACTIONS,
        order=by("topic", "partition", "txn"),
        context=NOTHING,
        line=_torn,
        reference=ref.torn_txn,
        spark=sp.torn_txn,
    ),
    Anomaly(
        name="precommitted-read",
        title="a read_committed read returned a value before its transaction's commit was invoked",
        fatal=always,
        evidence=TRANSACTIONS,
        order=by("topic", "partition", "value", "offset"),
        context=OF_READS,
        line=lambda a: (f"{_read_by(a)} at index {a['index']}, before transaction {a['txn']} "
                        f"invoked its commit (index {a['commit_index']})"),
        reference=ref.precommitted_read,
        spark=sp.precommitted_read,
    ),
    Anomaly(
        name="txn-reorder",
        title="a transaction's writes to a partition landed out of the order it sent them",
        fatal=always,
        evidence=TRANSACTIONS,
        order=by("topic", "partition", "txn", "index"),
        context=Context(ops=("previous_op", "op")),
        line=lambda a: (f"{_tp(a)}: transaction {a['txn']} sent {a['previous_value']} then {a['value']}, "
                        f"{a['seen']} at offsets {a['previous_offset']} then {a['offset']}"),
        reference=ref.txn_reorder,
        spark=sp.txn_reorder,
    ),
    Anomaly(
        name="eos-missing",
        title="a pipeline input below its group's committed offset has no output read at read_committed",
        fatal=once_final_reads_complete,
        evidence=TRANSACTIONS,
        order=by("topic", "partition", "offset", "value"),
        context=Context(reads_at="offset", note="the input"),
        line=lambda a: (f"{_tp(a)}: input value {a['value']} at offset {a['offset']}, below group "
                        f"{a['group']}'s committed offset {a['committed']}, has no output read at "
                        f"read_committed"),
        reference=ref.eos_missing,
        spark=sp.eos_missing,
    ),
    Anomaly(
        name="eos-duplicate",
        title=("a pipeline input has two outputs read at read_committed, or one while its offset "
               "was not committed"),
        fatal=always,
        evidence=TRANSACTIONS,
        order=by("topic", "partition", "value"),
        context=Context(ops=("op",)),
        line=lambda a: (f"{_tp(a)}: input value {a['value']} at offset {a['offset']} has outputs "
                        f"{', '.join(map(str, a['outputs']))} read at read_committed (group "
                        f"{a['group']} committed {a['committed']})"),
        reference=ref.eos_duplicate,
        spark=sp.eos_duplicate,
    ),
)

NAMES = tuple(e.name for e in ANOMALIES)
BY_NAME = {e.name: e for e in ANOMALIES}


def of_evidence(evidence: str) -> tuple[str, ...]:
    """The names of the types judged from `evidence`, in the table's order."""
    return tuple(e.name for e in ANOMALIES if e.evidence == evidence)
