"""cluster/server/transaction_log.py: Kafka's __transaction_state records."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.server import transaction_log as tl
from cluster.server.transaction_metadata import TransactionMetadata, TxnState


def _md(state=TxnState.ONGOING, partitions=frozenset({("t", 0), ("t", 2)})):
    return TransactionMetadata("tx", 7, 1, 60000, state, partitions, txn_start_ms=4, last_update_ms=5)


def test_the_bytes_are_kafka_s_version_0():
    assert tl.encode_key("tx").hex() == "0000" "0002" "7478"
    assert tl.encode_value(_md()).hex() == (
        "0000" "0000000000000007" "0001" "0000ea60" "01"   # version, pid, epoch, timeout, ONGOING
        "00000001" "0001" "74" "00000002" "00000000" "00000002"   # [("t", [0, 2])]
        "0000000000000005" "0000000000000004")             # last update, start


def test_empty_is_written_without_partitions_and_dead_as_a_tombstone():
    empty = _md(TxnState.EMPTY, frozenset())
    assert tl.encode_value(empty)[17:21] == b"\xff\xff\xff\xff"   # a null array
    assert tl.decode_value("tx", tl.encode_value(empty)) == empty
    assert tl.encode_value(_md(TxnState.DEAD, frozenset())) is None
    assert tl.decode_value("tx", None) is None
    with pytest.raises(ValueError, match="EMPTY with partitions"):
        tl.encode_value(_md(TxnState.EMPTY))


_TP = st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 2**31 - 1))


@given(st.text(max_size=20), st.integers(0, 2**63 - 1), st.integers(0, 32767),
       st.integers(1, 2**31 - 1), st.sampled_from([s for s in TxnState if s is not TxnState.DEAD]),
       st.frozensets(_TP, max_size=6), st.integers(-1, 2**62), st.integers(-1, 2**62))
def test_every_metadata_reads_back_as_written(tid, pid, epoch, timeout, state, parts, start, upd):
    if state is TxnState.EMPTY:
        parts = frozenset()
    md = TransactionMetadata(tid, pid, epoch, timeout, state, parts, start, upd)
    assert tl.decode_key(tl.encode_key(tid)) == tid
    assert tl.decode_value(tid, tl.encode_value(md)) == md


@pytest.mark.parametrize("mangle, error", [
    (lambda b: b[:-1], "truncated"),
    (lambda b: b + b"\0", "1 bytes past its end"),
    (lambda b: b"\x00\x05" + b[2:], "version 5"),
    (lambda b: b[:16] + b"\x09" + b[17:], "unknown state 9"),
    (lambda b: b[:17] + b"\xff\xff\xff\xf0" + b[21:], "impossible count"),
])
def test_a_damaged_value_is_refused_with_where(mangle, error):
    with pytest.raises(tl.TransactionLogError, match=error):
        tl.decode_value("tx", mangle(tl.encode_value(_md())))


def test_a_damaged_key_is_refused():
    with pytest.raises(tl.TransactionLogError, match="version 1"):
        tl.decode_key(b"\x00\x01\x00\x00")
    with pytest.raises(tl.TransactionLogError, match="bad string length"):
        tl.decode_key(b"\x00\x00\x00\x09ab")


def test_an_id_lives_where_kafka_puts_it():
    # Java: Math.abs("tx".hashCode()) % 50 == 3716 % 50
    assert tl.partition_of("tx", 50) == ("tx".encode()[0] * 31 + "tx".encode()[1]) % 50
