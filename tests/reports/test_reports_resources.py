"""The resource samples of a run (reports/resources.py) reach summary.json
and the report's charts; runs without them say so."""
from __future__ import annotations

import json

from reports_histgen import HistoryBuilder, run_json, write_run

from reports import analyze
from reports.resources import read_samples, resource_series

NS = 1_000_000_000


def _sample(t_s: float, nodes: dict, watches) -> dict:
    return {"kind": "resources", "time": int(t_s * NS), "nodes": nodes, "zk_watches": watches}


def test_series_line_up_the_samples_with_gaps_where_a_node_was_down(tmp_path):
    lines = [_sample(10, {"broker-1": {"rss_kb": 2048, "fds": 30, "threads": 7}}, 5),
             {"kind": "metadata", "time": 11 * NS, "partitions": []},
             _sample(0, {"broker-1": {"rss_kb": 1024, "fds": 20, "threads": 6},
                         "broker-2": {"rss_kb": 1000, "fds": 21, "threads": 6}}, None)]
    (tmp_path / "observations.jsonl").write_text(
        "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in lines) + '{"kind":"resources","ti')
    samples = read_samples(tmp_path)
    assert [s["time"] for s in samples] == [0, 10 * NS]      # in time order, the cut line left out
    series = resource_series(samples)
    assert series["seconds"] == [0.0, 10.0] and series["zk_watches"] == [None, 5]
    assert series["nodes"]["broker-1"]["fds"] == [20, 30]
    assert series["nodes"]["broker-2"]["rss_kb"] == [1000, None]
    assert resource_series(read_samples(tmp_path / "nowhere")) is None


def test_the_report_charts_the_samples(tmp_path):
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.poll(1, [(0, 1)], hw=1, final=True)
    with_samples = write_run(tmp_path / "with", b.events, run_json(run="with"))
    (with_samples / "observations.jsonl").write_text("".join(
        json.dumps(_sample(t, {"broker-1": {"rss_kb": 40000 + t, "fds": 25, "threads": 7}}, 4)) + "\n"
        for t in (0, 10, 20)))
    without = write_run(tmp_path / "without", b.events, run_json(run="without"))
    v_with, v_without = analyze([with_samples, without], out=tmp_path / "out", checker="reference")
    assert v_with.summary["resources"]["nodes"]["broker-1"]["rss_kb"] == [40000, 40010, 40020]
    html = v_with.report_path.read_text()
    assert "Resident memory per node (MiB)" in html and "ZooKeeper watches" in html
    assert v_without.summary["resources"] is None
    assert "No resource samples in this run." in v_without.report_path.read_text()
