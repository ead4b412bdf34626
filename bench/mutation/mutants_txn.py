"""Hand-written one-spot bugs in the transaction code of cluster/ (issue 37),
2026-11-29.

Not blind: written by the author of the transaction code and its tests,
with both in view, so the score says whether those tests are wired to the
guarantees, not how an outsider's bugs fare. Measured with the `txn`
target (the transaction tests: unit and against three broker processes)
until a transactional chaos suite exists.

Format as in mutants.py; ids start with "txn-".
"""
from __future__ import annotations
from mutants import Mutant   # the dataclass: id, file, find, replace, breaks, note, equivalent

MUTANTS_TXN: list[Mutant] = [
    Mutant(
        id="txn-lso-is-hw",
        file="cluster/server/open_transactions.py",
        find="        return min([self.hw, *firsts])\n",
        replace="        return self.hw\n",
        breaks="transactions",
        note="read_committed readers see the records of transactions still open, "
             "before their commit or abort",
    ),
    Mutant(
        id="txn-no-aborted-list",
        file="cluster/server/kafka_apis.py",
        find="                        aborted = [(a.producer_id, a.first_offset) for a in\n",
        replace="                        aborted = [] and [(a.producer_id, a.first_offset) for a in\n",
        breaks="transactions",
        note="a read_committed fetch is not told which transactions aborted: their records "
             "are read as committed",
    ),
    Mutant(
        id="txn-follower-flips-markers",
        file="cluster/server/partition.py",
        find="                commit = (self._commit_of(data[h.position:h.position + h.size], h)\n",
        replace="                commit = (not self._commit_of(data[h.position:h.position + h.size], h)\n",
        breaks="transactions",
        note="a follower takes COMMIT for ABORT: after a failover aborted transactions are "
             "read as committed and committed ones disappear",
    ),
    Mutant(
        id="txn-marker-keeps-old-epoch",
        file="cluster/server/producer_state.py",
        find="        if p is None or h.producer_epoch > p.epoch:\n"
             "            self.producers[h.producer_id] = _Producer(h.producer_epoch)\n",
        replace="        if p is None:\n"
                "            self.producers[h.producer_id] = _Producer(h.producer_epoch)\n",
        breaks="transactions",
        note="a KIP-890 marker does not move the partition to the bumped epoch: a late "
             "produce of the ended transaction lands in the next one",
    ),
    Mutant(
        id="txn-cache-before-append",
        file="cluster/server/transaction_coordinator.py",
        find="        if err == E.NONE and p in self.loaded:\n            self.loaded[p][tid] = md\n",
        replace="        if p in self.loaded:\n            self.loaded[p][tid] = md\n",
        breaks="transactions",
        note="the coordinator acts on a state its log may not hold: a failed append still "
             "moves the transaction on, and a new coordinator loads something else",
    ),
    Mutant(
        id="txn-offsets-before-commit",
        file="cluster/server/group_metadata_manager.py",
        find="                group.pending_txn_offsets.setdefault(producer_id, {}).update(valid)\n",
        replace="                group.offsets.update(valid)\n",
        breaks="transactions",
        note="offsets sent to a transaction are committed at once: an aborted transaction's "
             "inputs are skipped by the pipeline (never written)",
    ),
    Mutant(
        id="txn-load-drops-committed-offsets",
        file="cluster/server/group_metadata_manager.py",
        find="            if commit:\n                self.offsets.setdefault(group, {}).update(offsets)\n",
        replace="            if not commit:\n                self.offsets.setdefault(group, {}).update(offsets)\n",
        breaks="transactions",
        note="a coordinator that loads the offsets partition takes the aborted transactions' "
             "offsets and drops the committed ones",
    ),
    Mutant(
        id="txn-markers-all-commit",
        file="cluster/server/txn_markers.py",
        find="            err, required = p.append_marker(m.producer_id, m.producer_epoch, m.commit,\n",
        replace="            err, required = p.append_marker(m.producer_id, m.producer_epoch, True,\n",
        breaks="transactions",
        note="every marker a leader writes is COMMIT: aborted transactions become visible",
    ),
]
