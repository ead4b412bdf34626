"""LeaderEpochCache: Kafka LeaderEpochFileCache semantics, KIP-101 and KIP-279."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.log import CorruptCheckpointError, LeaderEpochCache


def cache_with(tmp_path, entries) -> LeaderEpochCache:
    c = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    for e, o in entries:
        c.assign(e, o)
    assert c.entries() == list(entries)
    return c


def test_empty(tmp_path):
    c = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    assert c.latest_epoch == -1 and c.entries() == []
    assert c.end_offset_for(0, 10) == (-1, -1)
    assert c.end_offset_for(-1, 10) == (-1, -1)


def test_end_offset_for(tmp_path):
    c = cache_with(tmp_path, [(0, 0), (2, 10), (4, 20)])
    leo = 30
    assert c.end_offset_for(4, leo) == (4, 30)       # latest epoch: the LEO
    assert c.end_offset_for(2, leo) == (2, 20)       # start of the next epoch
    assert c.end_offset_for(0, leo) == (0, 10)
    # KIP-279: an unknown epoch answers with the largest known epoch below it.
    assert c.end_offset_for(3, leo) == (2, 20)
    assert c.end_offset_for(1, leo) == (0, 10)
    # Above every known epoch, or undefined: undefined.
    assert c.end_offset_for(5, leo) == (-1, -1)
    assert c.end_offset_for(-1, leo) == (-1, -1)


def test_end_offset_for_epoch_below_all_known(tmp_path):
    c = cache_with(tmp_path, [(2, 10), (4, 20)])
    assert c.end_offset_for(1, 30) == (1, 10)
    assert c.end_offset_for(0, 30) == (0, 10)


def test_assign_ignores_same_epoch_and_negative(tmp_path):
    c = cache_with(tmp_path, [(1, 0)])
    c.assign(1, 5)
    c.assign(-1, 7)
    assert c.entries() == [(1, 0)]
    c.assign(1, 0)
    assert c.entries() == [(1, 0)]


def test_assign_earlier_start_for_latest_epoch_replaces_it(tmp_path):
    c = cache_with(tmp_path, [(1, 0), (2, 10)])
    c.assign(2, 8)
    assert c.entries() == [(1, 0), (2, 8)]


def test_assign_removes_contradicted_entries(tmp_path):
    c = cache_with(tmp_path, [(1, 0), (3, 10), (5, 20)])
    c.assign(4, 15)  # epoch 5 >= 4 goes
    assert c.entries() == [(1, 0), (3, 10), (4, 15)]
    c.assign(6, 12)  # epoch 4 starting at 15 >= 12 goes
    assert c.entries() == [(1, 0), (3, 10), (6, 12)]


def test_truncate_from_end(tmp_path):
    c = cache_with(tmp_path, [(0, 0), (2, 10), (4, 20)])
    c.truncate_from_end(25)
    assert c.entries() == [(0, 0), (2, 10), (4, 20)]
    c.truncate_from_end(15)
    assert c.entries() == [(0, 0), (2, 10)]
    c.truncate_from_end(10)
    assert c.entries() == [(0, 0)]
    c.truncate_from_end(-1)
    assert c.entries() == [(0, 0)]
    c.truncate_from_end(0)
    assert c.entries() == []


def test_truncate_from_start(tmp_path):
    c = cache_with(tmp_path, [(0, 0), (2, 10), (4, 20)])
    c.truncate_from_start(5)
    assert c.entries() == [(0, 5), (2, 10), (4, 20)]
    c.truncate_from_start(15)
    assert c.entries() == [(2, 15), (4, 20)]
    c.truncate_from_start(20)
    assert c.entries() == [(4, 20)]
    c.truncate_from_start(40)
    assert c.entries() == [(4, 40)]
    c.truncate_from_start(3)
    assert c.entries() == [(4, 40)]


def test_persisted_in_kafka_format(tmp_path):
    c = cache_with(tmp_path, [(0, 0), (2, 10)])
    path = tmp_path / "leader-epoch-checkpoint"
    assert path.read_text() == "0\n2\n0 0\n2 10\n"
    c.truncate_from_end(10)
    assert path.read_text() == "0\n1\n0 0\n"
    c.assign(3, 10)
    assert LeaderEpochCache(path).entries() == [(0, 0), (3, 10)]
    c.clear()
    assert LeaderEpochCache(path).entries() == []


def test_corrupt_checkpoint_raises(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n2\n0 0\n")
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCache(path)
    path.write_text("0\n1\n0 x\n")
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCache(path)


# -- model-based property test -------------------------------------------------


class Model:
    """A deliberately naive re-statement of the cache's rules."""

    def __init__(self):
        self.entries: list[tuple[int, int]] = []

    def assign(self, e, o):
        if e < 0:
            return
        if self.entries and self.entries[-1][0] == e and self.entries[-1][1] <= o:
            return
        while self.entries and (self.entries[-1][0] >= e or self.entries[-1][1] >= o):
            self.entries.pop()
        self.entries.append((e, o))

    def end_offset_for(self, e, leo):
        if e < 0 or not self.entries:
            return -1, -1
        if e == self.entries[-1][0]:
            return e, leo
        higher = [x for x in self.entries if x[0] > e]
        if not higher:
            return -1, -1
        lower = [x for x in self.entries if x[0] <= e]
        return (lower[-1][0] if lower else e), higher[0][1]

    def truncate_from_end(self, o):
        if o >= 0:
            self.entries = [x for x in self.entries if x[1] < o]

    def truncate_from_start(self, o):
        if o < 0:
            return
        gone = [x for x in self.entries if x[1] <= o]
        if gone:
            self.entries = [(gone[-1][0], o)] + [x for x in self.entries if x[1] > o]


op_st = st.one_of(
    st.tuples(st.just("assign"), st.integers(-1, 8), st.integers(0, 60)),
    st.tuples(st.just("end"), st.integers(0, 60)),
    st.tuples(st.just("start"), st.integers(0, 60)),
)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(op_st, max_size=30), queries=st.lists(st.integers(-1, 10), max_size=10))
def test_matches_model_and_survives_reload(ops, queries):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "leader-epoch-checkpoint"
        c, m = LeaderEpochCache(path), Model()
        for op in ops:
            if op[0] == "assign":
                c.assign(op[1], op[2])
                m.assign(op[1], op[2])
            elif op[0] == "end":
                c.truncate_from_end(op[1])
                m.truncate_from_end(op[1])
            else:
                c.truncate_from_start(op[1])
                m.truncate_from_start(op[1])
            assert c.entries() == m.entries
        leo = 100
        for q in queries:
            assert c.end_offset_for(q, leo) == m.end_offset_for(q, leo)
        assert LeaderEpochCache(path).entries() == m.entries
