"""Property test: random appends (leader and follower), truncations, reads and
reopenings keep the log equal to a simple model, with consistent segments and
indexes."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from log_support import (assert_index_consistent, decode_values, make_batch,  # noqa: E402
                              read_all)

from cluster.log import Log, LogConfig, iter_batches  # noqa: E402
from cluster.log.batch import set_base_offset, set_leader_epoch  # noqa: E402

values_st = st.lists(st.binary(max_size=50), min_size=1, max_size=5)
op_st = st.one_of(
    st.tuples(st.just("leader"), st.lists(values_st, min_size=1, max_size=3)),
    st.tuples(st.just("follower"), st.lists(values_st, min_size=1, max_size=3)),
    st.tuples(st.just("truncate"), st.floats(0, 1.2)),
    st.tuples(st.just("read"), st.floats(0, 1), st.integers(1, 600),
              st.one_of(st.none(), st.floats(0, 1.2))),
    st.tuples(st.just("reopen"), st.booleans()),
)


@settings(max_examples=50, deadline=None)
@given(ops=st.lists(op_st, min_size=1, max_size=25),
       segment_bytes=st.sampled_from([250, 600, 1 << 20]),
       index_interval=st.sampled_from([0, 90, 4096]))
def test_log_matches_model(ops, segment_bytes, index_interval):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "t-0"
        cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval)
        lg = Log(d, cfg)
        model: list[tuple[int, int, int, list[bytes]]] = []  # (base, last, epoch, values)
        epoch = 0

        def leo():
            return model[-1][1] + 1 if model else 0

        for op in ops:
            kind = op[0]
            if kind == "leader":
                epoch += 1
                data = b"".join(make_batch(v) for v in op[1])
                first, last = lg.append_as_leader(data, epoch)
                assert first == leo()
                for v in op[1]:
                    model.append((leo(), leo() + len(v) - 1, epoch, v))
                assert last == leo() - 1
            elif kind == "follower":
                epoch += 1
                buf = bytearray()
                base = leo()
                for v in op[1]:
                    b = bytearray(make_batch(v))
                    set_base_offset(b, 0, base)
                    set_leader_epoch(b, 0, epoch)
                    model.append((base, base + len(v) - 1, epoch, v))
                    base += len(v)
                    buf += b
                lg.append_as_follower(bytes(buf))
            elif kind == "truncate":
                target = int(op[1] * leo())
                lg.truncate_to(target)
                model = [b for b in model if b[1] < target]
                epoch_entries = lg.leader_epoch_cache.entries()
                assert all(start < leo() for _, start in epoch_entries) or not model
            elif kind == "read":
                if not model:
                    continue
                start = int(op[1] * leo())
                max_offset = None if op[3] is None else int(op[3] * leo())
                data = lg.read(start, op[2], max_offset)
                got = [(h.base_offset, h.last_offset) for h in iter_batches(data)]
                if start == leo():
                    assert data == b""
                    continue
                i = next(i for i, b in enumerate(model) if b[1] >= start)
                if max_offset is not None and model[i][1] >= max_offset:
                    assert got == []
                    continue
                assert got, "a read below the LEO returns at least one batch"
                want = [(b[0], b[1]) for b in model[i:i + len(got)]]
                assert got == want
                assert len(got) == 1 or len(data) <= op[2]
                if max_offset is not None:
                    assert got[-1][1] < max_offset
            else:
                rp = lg.recovery_point if op[1] else 0
                lg.close()
                lg = Log(d, cfg, recovery_point=rp)
            assert lg.log_end_offset == leo()
            assert [(h.base_offset, h.last_offset, h.partition_leader_epoch)
                    for h in lg.batches()] == [b[:3] for b in model]
            # One append never spans segments (as in Kafka), so only a segment
            # holding one append may exceed segment_bytes; bound it loosely.
            assert all(s.size <= segment_bytes + 3 * 200 for s in lg.segments)
            assert lg.recovery_point <= lg.log_end_offset
        assert_index_consistent(lg)
        expected = [(b[0] + j, v) for b in model for j, v in enumerate(b[3])]
        assert decode_values(read_all(lg)) == expected
        # Epoch cache: one entry per epoch change, at its first offset.
        entries = []
        for b in model:
            if not entries or entries[-1][0] != b[2]:
                entries.append((b[2], b[0]))
        assert lg.leader_epoch_cache.entries() == entries
        lg.close()
