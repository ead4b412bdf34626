"""Log: appends as leader and follower, reads, roll, truncation, retention,
flush policy and reopening, on real files."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from log_support import (assert_index_consistent, decode_values, make_batch,  # noqa: E402
                              read_all, small_config)

from cluster.config import BrokerConfig  # noqa: E402
from cluster.log import (CorruptRecordError, InvalidOffsetError, Log, LogConfig,  # noqa: E402
                         OffsetOutOfRangeError, iter_batches)
from cluster.log.batch import set_base_offset  # noqa: E402


def fill(lg: Log, n_batches: int, per_batch: int = 3, epoch: int = 0, size: int = 20):
    for i in range(n_batches):
        lg.append_as_leader(make_batch([bytes([65 + i % 26]) * size] * per_batch), epoch)


def test_config_from_broker_config():
    cfg = LogConfig.from_broker_config(BrokerConfig.from_dict(
        {"log.segment.bytes": "1000", "log.flush.interval.messages": "5"}))
    assert cfg.segment_bytes == 1000 and cfg.flush_interval_messages == 5
    assert cfg.index_interval_bytes == 4096 and cfg.retention_bytes == -1
    assert LogConfig.from_broker_config(BrokerConfig()).flush_interval_ms == 2**63 - 1


def test_new_log_is_empty(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig())
    assert (lg.log_start_offset, lg.log_end_offset, lg.recovery_point) == (0, 0, 0)
    assert lg.read(0, 100) == b""
    assert (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert (tmp_path / "t-0" / "00000000000000000000.index").exists()
    assert lg.last_batch() is None
    lg.close()


def test_append_as_leader_assigns_offsets_and_epoch(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig())
    assert lg.append_as_leader(make_batch([b"a", b"b", b"c"]), 5) == (0, 2)
    assert lg.append_as_leader(make_batch([b"d"]) + make_batch([b"e", b"f"]), 6) == (3, 5)
    assert lg.log_end_offset == 6
    data = lg.read(0, 1 << 20)
    assert decode_values(data) == list(enumerate([b"a", b"b", b"c", b"d", b"e", b"f"]))
    assert [(h.base_offset, h.partition_leader_epoch) for h in iter_batches(data)] == \
        [(0, 5), (3, 6), (4, 6)]
    assert lg.leader_epoch_cache.entries() == [(5, 0), (6, 3)]
    assert lg.last_batch().base_offset == 4
    lg.close()


def test_append_as_leader_rejects_corrupt_input_atomically(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig())
    good = make_batch(2)
    bad = bytearray(make_batch(2))
    bad[-1] ^= 0x40
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(good + bytes(bad), 0)
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(good[:-3], 0)
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(b"", 0)
    assert lg.log_end_offset == 0 and lg.active_segment.size == 0
    assert lg.leader_epoch_cache.entries() == []
    lg.close()


def test_append_as_follower_keeps_offsets_and_epochs(tmp_path):
    leader = Log(tmp_path / "leader", LogConfig())
    leader.append_as_leader(make_batch(3), 1)
    leader.append_as_leader(make_batch(2), 2)
    follower = Log(tmp_path / "follower", LogConfig())
    data = leader.read(0, 1 << 20)
    # A fetch response may end in a partial batch: it is ignored.
    assert follower.append_as_follower(data + data[:30]) == (0, 4)
    assert follower.read(0, 1 << 20) == data
    assert follower.leader_epoch_cache.entries() == [(1, 0), (2, 3)]
    with pytest.raises(InvalidOffsetError):
        follower.append_as_follower(data)  # starts at 0, LEO is 5
    assert follower.append_as_follower(b"") == (5, 4)
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(data[:-1] + bytes([data[-1] ^ 1]))
    leader.close()
    follower.close()


def test_follower_rejects_gap_inside_a_fetch(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig())
    a = bytearray(make_batch(2))
    b = bytearray(make_batch(2))
    set_base_offset(b, 0, 3)
    with pytest.raises(InvalidOffsetError):
        lg.append_as_follower(bytes(a + b))
    assert lg.log_end_offset == 0
    lg.close()


def test_read_semantics(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=64))
    fill(lg, 10, per_batch=3)  # batches at 0, 3, 6, ... 27
    batch_size = len(lg.read(0, 1))
    # The batch holding the offset comes first, even mid-batch.
    assert next(iter_batches(lg.read(7, 1))).base_offset == 6
    # At least one batch even if larger than max_bytes; else only whole batches.
    assert len(lg.read(0, 1)) == batch_size
    assert len(lg.read(0, 2 * batch_size + 5)) == 2 * batch_size
    # max_offset (exclusive) excludes a batch that reaches it.
    assert [h.base_offset for h in iter_batches(lg.read(0, 1 << 20, max_offset=9))] == [0, 3, 6]
    assert [h.base_offset for h in iter_batches(lg.read(0, 1 << 20, max_offset=8))] == [0, 3]
    assert lg.read(3, 1 << 20, max_offset=3) == b""
    assert lg.read(3, 1 << 20, max_offset=4) == b""  # batch 3..5 is not below 4
    assert lg.read(30, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(31, 100)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 100)
    lg.close()


def test_roll_and_index(tmp_path):
    cfg = small_config()
    lg = Log(tmp_path / "t-0", cfg)
    fill(lg, 60)
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert len(names) == len(lg.segments) > 5
    assert names == [f"{s.base_offset:020d}.log" for s in lg.segments]
    assert all(s.size <= cfg.segment_bytes for s in lg.segments)
    assert any(len(s.index) for s in lg.segments)
    assert_index_consistent(lg)
    assert decode_values(read_all(lg)) == decode_values(read_all(lg, max_bytes=1))
    assert [o for o, _ in decode_values(read_all(lg))] == list(range(180))
    # Rolling fsyncs the finished segment: the recovery point is at the last roll.
    assert lg.recovery_point == lg.active_segment.base_offset
    lg.close()


def test_reads_stop_at_segment_end_and_continue(tmp_path):
    lg = Log(tmp_path / "t-0", small_config())
    fill(lg, 30)
    seg2 = lg.segments[1]
    data = lg.read(seg2.base_offset - 1, 1 << 20)
    assert list(iter_batches(data))[-1].next_offset == seg2.base_offset
    assert next(iter_batches(lg.read(seg2.base_offset, 1))).base_offset == seg2.base_offset
    lg.close()


def test_batch_larger_than_segment_gets_its_own_segment(tmp_path):
    lg = Log(tmp_path / "t-0", small_config(segment_bytes=200))
    lg.append_as_leader(make_batch([b"x" * 500]), 0)
    lg.append_as_leader(make_batch([b"y" * 500]), 0)
    assert [s.base_offset for s in lg.segments] == [0, 1]
    assert decode_values(read_all(lg)) == [(0, b"x" * 500), (1, b"y" * 500)]
    lg.close()


def test_truncate_to(tmp_path):
    lg = Log(tmp_path / "t-0", small_config())
    fill(lg, 20, epoch=1)
    fill(lg, 20, epoch=2)  # epoch 2 starts at 60
    n_segments = len(lg.segments)
    lg.truncate_to(200)  # beyond LEO: nothing
    assert lg.log_end_offset == 120
    lg.truncate_to(61)  # mid-batch: the whole batch 60..62 goes
    assert lg.log_end_offset == 60
    assert lg.leader_epoch_cache.entries() == [(1, 0)]
    assert len(lg.segments) < n_segments
    assert lg.recovery_point <= 60
    assert_index_consistent(lg)
    assert [o for o, _ in decode_values(read_all(lg))] == list(range(60))
    lg.append_as_leader(make_batch(2), 3)
    assert lg.log_end_offset == 62
    lg.truncate_to(30)
    assert lg.log_end_offset == 30
    lg.close()
    lg = Log(tmp_path / "t-0", small_config())
    assert lg.log_end_offset == 30
    assert lg.leader_epoch_cache.entries() == [(1, 0)]
    assert_index_consistent(lg)
    lg.close()


def test_truncate_to_segment_base_leaves_empty_active_segment(tmp_path):
    lg = Log(tmp_path / "t-0", small_config())
    fill(lg, 20)
    base = lg.segments[2].base_offset
    lg.truncate_to(base)
    assert lg.log_end_offset == base and lg.active_segment.base_offset == base
    assert lg.active_segment.size == 0
    assert lg.read(base, 100) == b""
    fill(lg, 1)
    assert decode_values(lg.read(base, 1000))[0][0] == base
    lg.close()


def test_truncate_fully_and_start_at(tmp_path):
    lg = Log(tmp_path / "t-0", small_config())
    fill(lg, 20, epoch=3)
    lg.truncate_fully_and_start_at(500)
    assert (lg.log_start_offset, lg.log_end_offset) == (500, 500)
    assert [p.name for p in (tmp_path / "t-0").glob("*.log")] == [f"{500:020d}.log"]
    assert lg.leader_epoch_cache.entries() == []
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)
    assert lg.append_as_leader(make_batch(2), 4) == (500, 501)
    lg.close()
    lg = Log(tmp_path / "t-0", small_config())
    assert (lg.log_start_offset, lg.log_end_offset) == (500, 502)
    lg.close()


def test_retention_by_size(tmp_path):
    cfg = small_config(retention_bytes=3000, retention_ms=-1)
    lg = Log(tmp_path / "t-0", cfg)
    fill(lg, 60, epoch=1)
    total_before = lg.size_in_bytes
    deleted = lg.maybe_apply_retention()
    assert deleted > 0
    assert lg.size_in_bytes >= 3000
    assert lg.size_in_bytes - lg.segments[0].size < 3000  # deleting one more would go under
    assert lg.size_in_bytes < total_before
    assert lg.log_start_offset == lg.segments[0].base_offset > 0
    assert lg.leader_epoch_cache.entries() == [(1, lg.log_start_offset)]
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)
    assert lg.maybe_apply_retention() == 0
    lg.close()
    lg = Log(tmp_path / "t-0", cfg)
    assert lg.log_start_offset > 0 and lg.log_end_offset == 180
    lg.close()


def test_retention_never_deletes_active_segment(tmp_path):
    lg = Log(tmp_path / "t-0", small_config(retention_bytes=0, retention_ms=0))
    fill(lg, 30)
    n_segments = len(lg.segments)
    assert lg.maybe_apply_retention(now_ms=10**15) == n_segments - 1
    assert len(lg.segments) == 1
    assert lg.log_start_offset == lg.active_segment.base_offset
    assert lg.log_end_offset == 90
    lg.close()


def test_retention_respects_high_watermark(tmp_path):
    lg = Log(tmp_path / "t-0", small_config(retention_bytes=0, retention_ms=-1))
    fill(lg, 30)
    hw = lg.segments[2].next_offset
    assert lg.maybe_apply_retention(high_watermark=hw) == 3
    assert lg.log_start_offset == hw
    lg.close()


def test_retention_by_time(tmp_path):
    day = 24 * 3600 * 1000
    lg = Log(tmp_path / "t-0", small_config(retention_ms=day))
    for i in range(40):  # batch i has timestamps around i days
        lg.append_as_leader(make_batch([b"x" * 30] * 3, timestamp=i * day), 0)
    n_segments = len(lg.segments)
    now = 20 * day
    deleted = lg.maybe_apply_retention(now_ms=now)
    assert 0 < deleted < n_segments
    # Every remaining segment (but the active) has a record newer than now - 1 day.
    for seg in lg.segments[:-1]:
        assert now - seg.max_timestamp() <= day
    assert lg.segments[0].base_offset == lg.log_start_offset
    # A segment without timestamps falls back to its mtime.
    assert lg.maybe_apply_retention(now_ms=now) == 0
    lg.close()


def test_retention_time_uses_mtime_without_timestamps(tmp_path):
    lg = Log(tmp_path / "t-0", small_config(retention_ms=1000))
    for _ in range(40):  # producers without timestamps send -1
        lg.append_as_leader(make_batch([b"x" * 40], timestamp=-1), 0)
    seg0 = lg.segments[0]
    assert seg0.max_timestamp() <= 0
    old = seg0.last_modified_ms()
    assert lg.maybe_apply_retention(now_ms=old + 500) == 0
    n_segments = len(lg.segments)
    assert lg.maybe_apply_retention(now_ms=old + 10**9) == n_segments - 1
    lg.close()


def test_flush_policy_messages(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(flush_interval_messages=5))
    lg.append_as_leader(make_batch(3), 0)
    assert lg.recovery_point == 0
    lg.append_as_leader(make_batch(3), 0)  # 6 >= 5 messages: fsync
    assert lg.recovery_point == 6
    lg.append_as_leader(make_batch(1), 0)
    assert lg.recovery_point == 6
    lg.flush()
    assert lg.recovery_point == 7
    lg.close()


def test_flush_policy_time(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(flush_interval_ms=1000))
    lg.append_as_leader(make_batch(3), 0)
    last = lg._last_flush_ms
    assert lg.flush_if_due(last + 10) is False and lg.recovery_point == 0
    assert lg.flush_if_due(last + 1000) is True and lg.recovery_point == 3
    assert lg.flush_if_due(last + 10**6) is False  # nothing new to flush
    lg.close()


def test_default_policy_never_fsyncs_on_append(tmp_path, monkeypatch):
    lg = Log(tmp_path / "t-0", LogConfig())
    lg.append_as_leader(make_batch(2), 0)  # a new epoch: its checkpoint is fsynced
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    for _ in range(49):
        lg.append_as_leader(make_batch(2), 0)
    assert calls == [] and lg.recovery_point == 0
    assert lg.flush_if_due(10**18) is False
    lg.close()  # clean shutdown flushes
    assert calls and lg.recovery_point == 100


def test_close_and_reopen(tmp_path):
    cfg = small_config()
    lg = Log(tmp_path / "t-0", cfg)
    fill(lg, 25, epoch=4)
    data = read_all(lg)
    lg.close()
    with pytest.raises(ValueError):
        lg.append_as_leader(make_batch(1), 4)
    lg = Log(tmp_path / "t-0", cfg, recovery_point=75)
    assert lg.log_end_offset == 75 and lg.recovery_point == 75
    assert read_all(lg) == data
    assert lg.leader_epoch_cache.entries() == [(4, 0)]
    assert_index_consistent(lg)
    lg.append_as_leader(make_batch(1), 5)
    assert lg.leader_epoch_cache.entries() == [(4, 0), (5, 75)]
    lg.close()


def test_batches_iterates_headers(tmp_path):
    lg = Log(tmp_path / "t-0", small_config())
    fill(lg, 20)
    assert [h.base_offset for h in lg.batches()] == list(range(0, 60, 3))
    assert [h.base_offset for h in lg.batches(31)] == list(range(30, 60, 3))
    assert list(lg.batches(60)) == []
    lg.close()


def test_delete(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig())
    fill(lg, 3)
    lg.delete()
    assert not (tmp_path / "t-0").exists()


def test_concurrent_appends_and_reads(tmp_path):
    """The broker appends from request threads while fetchers read: a reader
    must only ever see whole, valid batches at the right offsets."""
    import threading

    lg = Log(tmp_path / "t-0", small_config(segment_bytes=4096))
    errors: list[BaseException] = []
    done = threading.Event()

    def writer():
        try:
            for i in range(400):
                lg.append_as_leader(make_batch([b"%d" % i] * 2), i // 100)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    def reader():
        try:
            while not done.is_set():
                leo = lg.log_end_offset
                for start in (0, leo // 2, max(0, leo - 1)):
                    data = lg.read(start, 300)
                    values = decode_values(data)
                    if start < leo:
                        assert values and values[0][0] <= start <= values[-1][0] + 1
                    offsets = [o for o, _ in values]
                    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) \
                        if offsets else True
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert lg.log_end_offset == 800
    assert [o for o, _ in decode_values(read_all(lg))] == list(range(800))
    lg.close()


def test_truncating_to_the_log_end_drops_an_epoch_never_written_in(tmp_path):
    """A leader of epoch 3 that wrote nothing left (3, LEO) in its cache; as a
    follower of a leader whose epoch-2 records go on past that offset, it is
    told to truncate to its own end. The empty epoch must go then, or the
    follower's append of those epoch-2 batches replaces epoch 2's entry with
    one that starts where epoch 3 did (seen in a pressure run)."""
    lg = Log(tmp_path / "t-0", small_config())
    fill(lg, 5, epoch=1)                     # offsets 0..14
    lg.append_as_follower(_follower_batch(15, epoch=2))
    leo = lg.log_end_offset
    lg.leader_epoch_cache.assign(3, leo)     # became leader of epoch 3, wrote nothing
    lg.truncate_to(leo)
    assert lg.leader_epoch_cache.entries() == [(1, 0), (2, 15)]
    lg.append_as_follower(_follower_batch(leo, epoch=2))
    assert lg.leader_epoch_cache.entries() == [(1, 0), (2, 15)]
    lg.close()


def _follower_batch(base_offset: int, epoch: int) -> bytes:
    from cluster.log.batch import set_base_offset, set_leader_epoch
    buf = bytearray(make_batch(3))
    set_base_offset(buf, 0, base_offset)
    set_leader_epoch(buf, 0, epoch)
    return bytes(buf)
