"""`chaoslog warehouse` / `chaoslog trends` from the command line, and the
same job on a real standalone Spark cluster (a master and two workers
started from the pyspark package) in a process of its own."""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import warehouse_cli
from reports.exit_codes import EXIT_REFUSED

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "reports"))
from reports_histgen import HistoryBuilder, run_json, write_run  # noqa: E402


def cli(*argv):
    p = argparse.ArgumentParser()
    warehouse_cli.add_parser(p.add_subparsers())
    a = p.parse_args(list(argv))
    return a.func(a)


@pytest.mark.parametrize("argv,message", [
    (["warehouse", "/no/such/dir", "--into", "/tmp/x"], "no such directory: /no/such/dir"),
    (["warehouse", ".", "--into", "/tmp/x", "--night", "yesterday"], "--night 'yesterday'"),
    (["trends", "/no/such/warehouse"], "holds no runs table"),
])
def test_bad_arguments_are_refused_in_one_line(capsys, argv, message):
    assert cli(*argv) == EXIT_REFUSED
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def _runs(root: Path, n: int) -> Path:
    for i in range(n):
        b = HistoryBuilder()
        for k in range(20):
            b.send(0, 100 * i + k, offset=k)
        b.poll(1, [(k, 100 * i + k) for k in range(20)], hw=20, final=True)
        write_run(root / f"r{i}", b.events, run_json(run=f"r{i}", seed=i))
    return root


def test_the_warehouse_job_on_a_standalone_spark_cluster(tmp_path):
    """Master and two workers from the pyspark package, the job's executors
    on the workers: the master's own record shows the application finished
    with both workers alive, and the warehouse holds every run."""
    from harness.spark_cluster import StandaloneSpark
    runs = _runs(tmp_path / "runs", 4)
    with StandaloneSpark(workers=2, log_dir=tmp_path / "spark") as cluster:
        out = subprocess.run(
            [sys.executable, "-m", "harness.cli", "warehouse", str(runs), "--into",
             str(tmp_path / "wh"), "--night", "2026-11-25", "--master", cluster.master_url],
            cwd=REPO, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "4 run(s) loaded" in out.stdout
        state = cluster.state()
        assert sum(w["state"] == "ALIVE" for w in state["workers"]) == 2
        apps = state.get("completedapps", []) + state.get("activeapps", [])
        assert [a["name"] for a in apps] == ["chaoslog-checker"], apps
        jvms = list(cluster.procs)
    assert len(jvms) == 3 and all(p.poll() is not None for p in jvms)   # stopped with the block
    parts = sorted((tmp_path / "wh" / "runs").glob("night=*"))
    assert [p.name for p in parts] == ["night=2026-11-25"]
