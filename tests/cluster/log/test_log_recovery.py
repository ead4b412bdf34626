"""Log recovery: a torn or corrupt tail is cut, everything valid before it is
kept, the index is rebuilt, and the log accepts appends again."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from log_support import (assert_index_consistent, decode_values, make_batch,  # noqa: E402
                              read_all, small_config)

from cluster.log import Log  # noqa: E402


def snapshot(lg: Log) -> list[dict]:
    """Every batch with its segment, position and raw bytes."""
    out = []
    for seg in lg.segments:
        raw = seg.log_path.read_bytes()
        for h in seg.scan(0):
            out.append(dict(seg=seg.base_offset, pos=h.position, size=h.size,
                            base=h.base_offset, last=h.last_offset,
                            epoch=h.partition_leader_epoch,
                            raw=raw[h.position:h.position + h.size]))
    return out


def summary(lg: Log) -> list[tuple[int, int, int]]:
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in lg.batches()]


def epochs_of(batches) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for b in batches:
        if not out or b["epoch"] > out[-1][0]:
            out.append((b["epoch"], b["base"]))
    return out


def flip(path: Path, byte: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(byte)
        v = f.read(1)[0]
        f.seek(byte)
        f.write(bytes([v ^ (1 << bit)]))


def check_reopened(lg: Log, kept: list[dict]) -> None:
    """The log holds exactly `kept`, consistently, and works."""
    assert summary(lg) == [(b["base"], b["last"], b["epoch"]) for b in kept]
    leo = kept[-1]["last"] + 1 if kept else 0
    assert lg.log_end_offset == leo
    assert read_all(lg) == b"".join(b["raw"] for b in kept)
    assert_index_consistent(lg)
    epoch = max([b["epoch"] for b in kept], default=0) + 1
    assert lg.append_as_leader(make_batch([b"after"]), epoch) == (leo, leo)
    assert decode_values(lg.read(leo, 1000)) == [(leo, b"after")]
    assert lg.leader_epoch_cache.latest_epoch == epoch


# -- the two named cases ----------------------------------------------------


def three_batch_segment(dir: Path) -> tuple[Log, list[dict]]:
    lg = Log(dir, small_config(segment_bytes=1 << 20))
    for i in range(3):
        lg.append_as_leader(make_batch([b"record-%d-%d" % (i, j) for j in range(4)]), i)
    batches = snapshot(lg)
    lg.close()
    assert len(batches) == 3 and all(len(b["raw"]) > 37 for b in batches)
    return lg, batches


def test_last_37_bytes_cut(tmp_path):
    _, batches = three_batch_segment(tmp_path / "t-0")
    seg = tmp_path / "t-0" / f"{0:020d}.log"
    os.truncate(seg, seg.stat().st_size - 37)
    lg = Log(tmp_path / "t-0", small_config())
    assert seg.stat().st_size == sum(b["size"] for b in batches[:2])
    assert lg.leader_epoch_cache.entries() == [(0, 0), (1, 4)]
    check_reopened(lg, batches[:2])
    lg.close()


def test_flipped_bit_in_middle_batch(tmp_path):
    _, batches = three_batch_segment(tmp_path / "t-0")
    seg = tmp_path / "t-0" / f"{0:020d}.log"
    mid = batches[1]
    flip(seg, mid["pos"] + mid["size"] // 2, 3)
    lg = Log(tmp_path / "t-0", small_config())
    # Kafka drops the corrupt batch and everything after it, valid or not.
    assert seg.stat().st_size == batches[0]["size"]
    assert lg.leader_epoch_cache.entries() == [(0, 0)]
    check_reopened(lg, batches[:1])
    lg.close()


def test_every_cut_point_of_a_segment(tmp_path):
    _, batches = three_batch_segment(tmp_path / "orig")
    raw = (tmp_path / "orig" / f"{0:020d}.log").read_bytes()
    ends = [sum(b["size"] for b in batches[:i]) for i in range(4)]
    d = tmp_path / "t-0"
    for cut in range(0, len(raw) + 1, 7):
        d.mkdir(exist_ok=True)
        (d / f"{0:020d}.log").write_bytes(raw[:cut])
        lg = Log(d, small_config())
        n = max(i for i in range(4) if ends[i] <= cut)
        assert lg.log_end_offset == 4 * n and lg.active_segment.size == ends[n]
        lg.delete()


# -- damage to other files ----------------------------------------------------


def test_index_rebuilt_when_missing_or_garbage(tmp_path):
    cfg = small_config(segment_bytes=1 << 20, index_interval_bytes=64)
    lg = Log(tmp_path / "t-0", cfg)
    for i in range(30):
        lg.append_as_leader(make_batch(2), 0)
    entries = lg.active_segment.index.entries()
    assert len(entries) > 5
    data = read_all(lg)
    lg.close()
    idx = tmp_path / "t-0" / f"{0:020d}.index"
    idx.write_bytes(b"\x07" * 13)
    lg = Log(tmp_path / "t-0", cfg, recovery_point=60)
    assert lg.active_segment.index.entries() == entries and read_all(lg) == data
    lg.close()
    idx.unlink()
    lg = Log(tmp_path / "t-0", cfg)
    assert lg.active_segment.index.entries() == entries and read_all(lg) == data
    lg.close()


def test_trusted_segments_below_recovery_point(tmp_path):
    """Segments before the one holding the recovery point are not rescanned
    (they were fsynced), but a later corrupt segment is still caught, and a
    trusted segment's damaged index still triggers a rebuild."""
    cfg = small_config()
    lg = Log(tmp_path / "t-0", cfg)
    for i in range(40):
        lg.append_as_leader(make_batch([b"x" * 30] * 2), i // 10)
    batches = snapshot(lg)
    segs = [s.base_offset for s in lg.segments]
    lg.close()
    assert len(segs) >= 4
    rp = segs[2]
    last = [b for b in batches if b["seg"] == segs[-1]]
    flip(tmp_path / "t-0" / f"{segs[-1]:020d}.log", last[0]["pos"] + 30, 0)
    (tmp_path / "t-0" / f"{segs[0]:020d}.index").write_bytes(b"\xff" * 16)
    lg = Log(tmp_path / "t-0", cfg, recovery_point=rp)
    kept = [b for b in batches if b["seg"] < segs[-1]]
    assert lg.recovery_point == rp
    check_reopened(lg, kept)
    lg.close()


def test_missing_middle_segment_drops_the_rest(tmp_path):
    cfg = small_config()
    lg = Log(tmp_path / "t-0", cfg)
    for i in range(40):
        lg.append_as_leader(make_batch([b"y" * 30] * 2), 0)
    batches = snapshot(lg)
    segs = [s.base_offset for s in lg.segments]
    lg.close()
    (tmp_path / "t-0" / f"{segs[2]:020d}.log").unlink()
    lg = Log(tmp_path / "t-0", cfg)
    check_reopened(lg, [b for b in batches if b["seg"] < segs[2]])
    assert not (tmp_path / "t-0" / f"{segs[3]:020d}.log").exists()
    lg.close()


def test_epoch_cache_ahead_of_log_is_truncated(tmp_path):
    _, batches = three_batch_segment(tmp_path / "t-0")
    seg = tmp_path / "t-0" / f"{0:020d}.log"
    os.truncate(seg, batches[0]["size"] + 5)
    lg = Log(tmp_path / "t-0", small_config())
    assert lg.leader_epoch_cache.entries() == [(0, 0)]
    lg.close()


def test_epoch_checkpoint_lost_is_rebuilt_from_batches(tmp_path):
    _, batches = three_batch_segment(tmp_path / "t-0")
    (tmp_path / "t-0" / "leader-epoch-checkpoint").unlink()
    lg = Log(tmp_path / "t-0", small_config())
    assert lg.leader_epoch_cache.entries() == [(0, 0), (1, 4), (2, 8)]
    lg.close()


# -- property: any cut, any bit flip ------------------------------------------

batch_st = st.tuples(
    st.lists(st.binary(max_size=60), min_size=1, max_size=4),  # values
    st.integers(0, 2),                                         # epoch increment
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.lists(batch_st, min_size=1, max_size=25),
       segment_bytes=st.sampled_from([300, 700, 1 << 20]),
       damage=st.sampled_from(["cut", "flip"]),
       where=st.floats(0, 1, exclude_max=True),
       bit=st.integers(0, 7),
       lose_index=st.booleans())
def test_recovery_keeps_exactly_the_valid_prefix(spec, segment_bytes, damage, where, bit,
                                                 lose_index):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "t-0"
        cfg = small_config(segment_bytes=segment_bytes, index_interval_bytes=100)
        lg = Log(d, cfg)
        epoch = 0
        for values, inc in spec:
            epoch += inc
            lg.append_as_leader(make_batch(values), epoch)
        batches = snapshot(lg)
        segs = [s.base_offset for s in lg.segments]
        sizes = [s.size for s in lg.segments]
        lg.close()

        # Pick a damaged byte across all segment files, uniformly.
        total = sum(sizes)
        at = int(where * total)
        k = 0
        while at >= sizes[k]:
            at -= sizes[k]
            k += 1
        path = d / f"{segs[k]:020d}.log"
        kept = [b for b in batches if b["seg"] < segs[k]]
        in_seg = [b for b in batches if b["seg"] == segs[k]]
        if damage == "cut":
            os.truncate(path, at)
            kept += [b for b in in_seg if b["pos"] + b["size"] <= at]
        else:
            flip(path, at, bit)
            hit = next(b for b in in_seg if b["pos"] <= at < b["pos"] + b["size"])
            rel = at - hit["pos"]
            if 12 <= rel < 16:
                # partitionLeaderEpoch is outside the CRC (by Kafka's design, so
                # brokers can stamp it): the flip goes unnoticed, nothing is lost.
                hit["epoch"] ^= 1 << (bit + 8 * (15 - rel))
                if hit["epoch"] >= 2**31:
                    hit["epoch"] -= 2**32
                raw = bytearray(hit["raw"])
                raw[rel] ^= 1 << bit
                hit["raw"] = bytes(raw)
                kept = batches
            else:
                kept += [b for b in in_seg if b["pos"] < hit["pos"]]
        if lose_index:
            (d / f"{segs[k]:020d}.index").unlink()

        lg = Log(d, cfg)
        assert sorted(p.name for p in d.glob("*.log")) == \
            [f"{s.base_offset:020d}.log" for s in lg.segments]
        if kept is not batches:
            assert lg.leader_epoch_cache.entries() == epochs_of(kept)
            check_reopened(lg, kept)
        else:
            assert summary(lg) == [(b["base"], b["last"], b["epoch"]) for b in kept]
            assert read_all(lg) == b"".join(b["raw"] for b in kept)
        lg.close()


def test_epoch_checkpoint_lost_or_corrupt_is_rebuilt_even_when_trusted(tmp_path):
    cfg = small_config()
    lg = Log(tmp_path / "t-0", cfg)
    for i in range(30):
        lg.append_as_leader(make_batch([b"e" * 30] * 2), i // 10)
    entries = lg.leader_epoch_cache.entries()
    leo = lg.log_end_offset
    lg.close()
    assert entries == [(0, 0), (1, 20), (2, 40)]
    path = tmp_path / "t-0" / "leader-epoch-checkpoint"
    for damage in ("missing", "garbage"):
        if damage == "missing":
            path.unlink()
        else:
            path.write_text("0\n7\nnonsense\n")
        lg = Log(tmp_path / "t-0", cfg, recovery_point=leo)
        assert lg.leader_epoch_cache.entries() == entries
        assert lg.end_offset_for_epoch(1) == (1, 40)
        lg.close()
