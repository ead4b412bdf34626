"""cluster.log.crash: a simulated power loss keeps exactly the fsynced data."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from log_support import assert_index_consistent, decode_values, make_batch, read_all, small_config  # noqa: E402,E501

from cluster.log import LogConfig, LogManager  # noqa: E402
from cluster.log.crash import discard_unflushed  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def kill(m: LogManager) -> None:
    """Stop without a clean shutdown: close the files, flush nothing."""
    for lg in m.all_logs().values():
        lg.on_recovery_point_change = None
        lg.close(flush=False)


def test_default_policy_loses_everything_since_the_last_roll(tmp_path):
    cfg = small_config()
    m = LogManager(tmp_path, cfg)
    lg = m.get_or_create_log("t", 0)
    for i in range(30):
        lg.append_as_leader(make_batch([b"x" * 30] * 2), 1)
    durable = lg.recovery_point
    assert 0 < durable < lg.log_end_offset  # rolls fsync; the active segment is not
    kept_values = [v for v in decode_values(read_all(lg)) if v[0] < durable]
    kill(m)
    result = discard_unflushed(tmp_path)
    assert result[("t", 0)][1] < result[("t", 0)][0]
    m = LogManager(tmp_path, cfg)
    lg = m.load_existing()[("t", 0)]
    assert lg.log_end_offset == durable
    assert decode_values(read_all(lg)) == kept_values
    assert_index_consistent(lg)
    m.close()


def test_fsync_every_message_loses_nothing(tmp_path):
    cfg = small_config(flush_interval_messages=1)
    m = LogManager(tmp_path, cfg)
    lg = m.get_or_create_log("t", 0)
    for _ in range(10):
        lg.append_as_leader(make_batch(2), 0)
    kill(m)
    discard_unflushed(tmp_path)
    m = LogManager(tmp_path, cfg)
    assert m.load_existing()[("t", 0)].log_end_offset == 20
    m.close()


def test_explicit_flush_is_kept_and_the_rest_lost(tmp_path):
    m = LogManager(tmp_path, LogConfig())
    lg = m.get_or_create_log("u", 1)
    lg.append_as_leader(make_batch(1), 0)
    lg.flush()
    lg.append_as_leader(make_batch(1), 0)
    kill(m)
    discard_unflushed(tmp_path)
    m = LogManager(tmp_path, LogConfig())
    assert m.load_existing()[("u", 1)].log_end_offset == 1
    m.close()


def test_cli(tmp_path):
    m = LogManager(tmp_path, LogConfig())
    m.get_or_create_log("t", 0).append_as_leader(make_batch(3), 0)
    kill(m)
    out = subprocess.run([sys.executable, "-m", "cluster.log.crash", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout)["t-0"]
    assert before > 0 and after == 0
