"""HighWatermarkCheckpoint and LogManager: checkpoint files, partition dirs,
startup loading, recovery points and deletion."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from log_support import make_batch, read_all, small_config  # noqa: E402

from cluster.log import (CorruptCheckpointError, HighWatermarkCheckpoint,  # noqa: E402
                         LogConfig, LogManager)
from cluster.log import checkpoint as checkpoint_mod  # noqa: E402


def test_hw_checkpoint_roundtrip_and_format(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    cp = HighWatermarkCheckpoint(path)
    assert cp.read() == {}
    hws = {("orders", 0): 17, ("orders", 1): 0, ("my-topic.x_y", 12): 2**40}
    cp.write(hws)
    assert cp.read() == hws
    assert path.read_text() == "0\n3\nmy-topic.x_y 12 1099511627776\norders 0 17\norders 1 0\n"
    cp.write({})
    assert cp.read() == {} and path.read_text() == "0\n0\n"


def test_hw_checkpoint_replace_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "replication-offset-checkpoint"
    cp = HighWatermarkCheckpoint(path)
    cp.write({("t", 0): 5})

    def crash(src, dst):
        raise OSError("killed before rename")

    monkeypatch.setattr(checkpoint_mod.os, "replace", crash)
    with pytest.raises(OSError):
        cp.write({("t", 0): 6})
    monkeypatch.undo()
    # The old content survives; the leftover temporary file is ignored.
    assert cp.read() == {("t", 0): 5}
    assert (tmp_path / "replication-offset-checkpoint.tmp").exists()
    cp.write({("t", 0): 7})
    assert cp.read() == {("t", 0): 7}
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()


def test_hw_checkpoint_write_fsyncs_before_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(checkpoint_mod.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(checkpoint_mod.os, "replace", lambda a, b: (events.append("rename"), real_replace(a, b))[1])
    HighWatermarkCheckpoint(tmp_path / "hw").write({("t", 0): 1})
    assert events == ["fsync", "rename", "fsync"]  # file, rename, directory


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt x 1\n"])
def test_hw_checkpoint_malformed(tmp_path, text):
    path = tmp_path / "hw"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        HighWatermarkCheckpoint(path).read()


def test_hw_checkpoint_rejects_unwritable_topic(tmp_path):
    with pytest.raises(ValueError):
        HighWatermarkCheckpoint(tmp_path / "hw").write({("a b", 0): 1})


def test_manager_creates_and_reloads_logs(tmp_path):
    cfg = small_config()
    m = LogManager(tmp_path, cfg)
    a = m.get_or_create_log("orders", 0)
    b = m.get_or_create_log("my-topic-2", 13)
    assert m.get_or_create_log("orders", 0) is a
    assert m.get_log("orders", 1) is None
    assert a.dir == tmp_path / "orders-0" and b.dir == tmp_path / "my-topic-2-13"
    for i in range(30):
        a.append_as_leader(make_batch([b"x" * 20] * 3), 1)
    b.append_as_leader(make_batch(2), 7)
    data = read_all(a)
    m.checkpoint_high_watermarks({("orders", 0): 60, ("my-topic-2", 13): 2})
    m.close()
    assert m.read_recovery_points() == {("orders", 0): 90, ("my-topic-2", 13): 2}

    (tmp_path / "zk-session.json").write_text("{}")
    (tmp_path / "not a partition").mkdir()
    m = LogManager(tmp_path, cfg)
    logs = m.load_existing()
    assert set(logs) == {("orders", 0), ("my-topic-2", 13)} == set(m.all_logs())
    a = m.get_log("orders", 0)
    assert read_all(a) == data and a.recovery_point == 90
    assert m.get_log("my-topic-2", 13).leader_epoch_cache.entries() == [(7, 0)]
    assert m.read_high_watermarks() == {("orders", 0): 60, ("my-topic-2", 13): 2}
    m.close()


def test_manager_recovery_points_follow_flushes(tmp_path):
    m = LogManager(tmp_path, LogConfig())
    lg = m.get_or_create_log("t", 0)
    lg.append_as_leader(make_batch(4), 0)
    assert lg.recovery_point == 0
    m.flush_all()
    assert m.read_recovery_points() == {("t", 0): 4}
    lg.append_as_leader(make_batch(4), 0)
    # A kill now: the checkpoint still says 4, so reopening validates from there.
    m2 = LogManager(tmp_path, LogConfig())
    assert m2.read_recovery_points() == {("t", 0): 4}
    m.close()


def test_manager_flush_if_due(tmp_path):
    # The append applies the same policy by the wall clock: an interval far
    # longer than the test (not 10 ms, which a loaded machine can take
    # between creating the log and appending) leaves the clock to the test.
    m = LogManager(tmp_path, LogConfig(flush_interval_ms=60_000))
    lg = m.get_or_create_log("t", 0)
    lg.append_as_leader(make_batch(4), 0)
    m.flush_if_due(lg._last_flush_ms + 59_000)
    assert m.read_recovery_points() == {}
    m.flush_if_due(lg._last_flush_ms + 60_000)
    assert m.read_recovery_points() == {("t", 0): 4}
    m.close()


def test_manager_retention(tmp_path):
    m = LogManager(tmp_path, small_config(retention_bytes=0, retention_ms=-1))
    lg = m.get_or_create_log("t", 0)
    for _ in range(30):
        lg.append_as_leader(make_batch([b"z" * 30] * 3), 0)
    n = len(lg.segments)
    assert m.apply_retention(high_watermarks={("t", 0): 0}) == 0
    assert m.apply_retention() == n - 1
    m.close()


def test_manager_delete_log(tmp_path):
    m = LogManager(tmp_path, LogConfig())
    lg = m.get_or_create_log("t", 3)
    lg.append_as_leader(make_batch(2), 0)
    m.flush_all()
    m.delete_log("t", 3)
    assert m.get_log("t", 3) is None and not (tmp_path / "t-3").exists()
    m.delete_log("t", 3)  # idempotent
    fresh = m.get_or_create_log("t", 3)
    assert fresh.log_end_offset == 0  # the old recovery point does not leak in
    m.close()


def test_manager_removes_interrupted_deletions(tmp_path):
    doomed = tmp_path / "t-0.abc123-delete"
    doomed.mkdir()
    (doomed / f"{0:020d}.log").write_bytes(b"")
    m = LogManager(tmp_path, LogConfig())
    assert m.load_existing() == {}
    assert not doomed.exists()
    m.close()


def test_manager_rejects_bad_topic_names(tmp_path):
    m = LogManager(tmp_path, LogConfig())
    with pytest.raises(ValueError):
        m.get_or_create_log("a/b", 0)
    m.close()


def test_recovery_point_checkpoint_is_exact(tmp_path):
    """Every move of a log's recovery point (policy fsync, roll, truncation)
    reaches the checkpoint at once, and logs not opened keep their entries."""
    m = LogManager(tmp_path, small_config(flush_interval_messages=4, segment_bytes=1 << 20))
    a = m.get_or_create_log("a", 0)
    b = m.get_or_create_log("b", 0)
    a.append_as_leader(make_batch(4), 0)
    assert m.read_recovery_points() == {("a", 0): 4, ("b", 0): 0}
    a.append_as_leader(make_batch(2), 0)
    assert m.read_recovery_points()[("a", 0)] == 4
    a.truncate_to(2)
    assert m.read_recovery_points()[("a", 0)] == 0  # the batch 0..3 went
    b.append_as_leader(make_batch(5), 0)
    assert m.read_recovery_points() == {("a", 0): 0, ("b", 0): 5}
    m.close()
    m = LogManager(tmp_path, LogConfig())
    m.get_or_create_log("a", 0).append_as_leader(make_batch(1), 0)
    m.flush_all()
    assert m.read_recovery_points() == {("a", 0): 1, ("b", 0): 5}
    m.delete_log("a", 0)
    assert m.read_recovery_points() == {("b", 0): 5}
    m.close()


def test_checkpoint_follows_a_recovery_that_cuts_below_it(tmp_path):
    m = LogManager(tmp_path, LogConfig())
    lg = m.get_or_create_log("t", 0)
    lg.append_as_leader(make_batch(3), 0)
    m.close()
    assert m.read_recovery_points() == {("t", 0): 3}
    seg = tmp_path / "t-0" / f"{0:020d}.log"
    os.truncate(seg, seg.stat().st_size - 1)
    m = LogManager(tmp_path, LogConfig())
    m.load_existing()
    assert m.get_log("t", 0).log_end_offset == 0
    assert m.read_recovery_points() == {("t", 0): 0}
    m.close()


def test_corrupt_recovery_point_checkpoint_means_full_recovery(tmp_path):
    m = LogManager(tmp_path, LogConfig())
    m.get_or_create_log("t", 0).append_as_leader(make_batch(3), 0)
    m.close()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("garbage")
    m = LogManager(tmp_path, LogConfig())
    assert m.load_existing()[("t", 0)].log_end_offset == 3
    m.close()
    assert m.read_recovery_points() == {("t", 0): 3}
