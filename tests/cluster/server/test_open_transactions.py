"""cluster/server/open_transactions.py: open transactions, the last stable
offset and the aborted transactions of one partition replica."""
from __future__ import annotations

import pytest

from cluster.log.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader
from cluster.server.open_transactions import AbortedTxn, OpenTransactions


def _batch(offset: int, pid: int, records: int = 1, txn: bool = True, control: bool = False):
    attrs = (ATTR_TRANSACTIONAL if txn else 0) | (ATTR_CONTROL if control else 0)
    return BatchHeader((offset, 0, 0, 2, 0, attrs, records - 1, 0, 0, pid, 0, 0, records), 0)


def _marker(offset: int, pid: int):
    return _batch(offset, pid, control=True)


def test_the_lso_is_the_first_offset_of_the_oldest_open_transaction():
    t = OpenTransactions()
    t.append(_batch(0, -1, txn=False))            # a plain record: no transaction
    t.append(_batch(1, 7, records=3))             # producer 7 opens at 1 (offsets 1-3)
    t.append(_batch(4, 8))                        # producer 8 opens at 4
    t.append(_batch(5, 7))                        # 7's transaction goes on: still from 1
    t.update_hw(6)
    # Exactly the first offset, not one past it (Redpanda 21.10's bug).
    assert t.last_stable_offset() == 1
    t.append(_marker(6, 7), commit=True)
    t.update_hw(7)
    assert t.last_stable_offset() == 4
    t.append(_marker(7, 8), commit=True)
    t.update_hw(8)
    assert t.last_stable_offset() == 8 and t.aborted == []


def test_a_transaction_is_unstable_until_the_hw_passes_its_marker():
    t = OpenTransactions()
    t.append(_batch(0, 7))
    t.update_hw(1)
    t.append(_marker(1, 7), commit=True)          # written, not yet replicated
    assert t.last_stable_offset() == 0
    t.update_hw(2)
    assert t.last_stable_offset() == 2


def test_without_open_transactions_the_lso_is_the_hw():
    t = OpenTransactions()
    t.append(_batch(0, 3, txn=False))
    t.update_hw(1)
    assert t.last_stable_offset() == 1


def test_aborted_transactions_are_reported_where_a_fetch_overlaps_them():
    t = OpenTransactions()
    t.append(_batch(0, 7, records=2))             # 0-1, aborted at 4
    t.append(_batch(2, 8))                        # 2, committed at 3
    t.append(_marker(3, 8), commit=True)
    t.append(_marker(4, 7), commit=False)
    t.append(_batch(5, 7))                        # 7's next transaction, aborted at 6
    t.append(_marker(6, 7), commit=False)
    t.update_hw(7)
    assert t.aborted == [AbortedTxn(7, 0, 4), AbortedTxn(7, 5, 6)]
    assert t.aborted_between(0, 2) == [AbortedTxn(7, 0, 4)]
    assert t.aborted_between(4, 5) == [AbortedTxn(7, 0, 4)]   # only its marker is in range
    assert t.aborted_between(5, 7) == [AbortedTxn(7, 5, 6)]
    assert t.aborted_between(7, 9) == []


def test_a_marker_without_a_transaction_closes_nothing():
    t = OpenTransactions()
    t.append(_marker(0, 7), commit=False)         # a retried WriteTxnMarkers
    t.update_hw(1)
    assert (t.aborted, t.last_stable_offset()) == ([], 1)
    with pytest.raises(ValueError, match="marker's type"):
        t.append(_marker(1, 7))


def test_a_marker_truncated_away_opens_its_transaction_again():
    log = [(_batch(0, 7), None), (_batch(1, 8), None), (_marker(2, 7), False)]
    t = OpenTransactions()
    t.rebuild(log, hw=3)
    assert (t.last_stable_offset(), t.aborted) == (1, [AbortedTxn(7, 0, 2)])
    t.rebuild(log[:2], hw=2)                      # truncated to offset 2
    assert (t.last_stable_offset(), t.aborted) == (0, [])
