"""What people and CI read: summary.json, report.html, junit.xml, the CLI's exit status, the overview."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from reports_histgen import INJECTIONS, HistoryBuilder, SimulatedRun, run_json, write_run

from reports import analyze, cli
from reports.aggregate import write_aggregate
from reports.api import combined_exit
from reports.summary import ANOMALY_TYPES

ROOT = Path(__file__).resolve().parents[2]


def make_runs(root: Path) -> dict[str, Path]:
    import random

    runs = {}
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.poll(1, [(0, 1)], hw=1, final=True)
    runs["valid"] = write_run(root / "valid", b.events, run_json(run="valid", seed=1, faults=["kill"]))
    sim = SimulatedRun(random.Random(3), inject=list(INJECTIONS), n_ops=80).simulate()
    runs["invalid"] = write_run(root / "invalid", sim.events,
                                run_json(run="invalid", seed=3, faults=["partition", "kill"]))
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.send(0, 2, offset=1)
    runs["unknown"] = write_run(root / "unknown", b.events, run_json(run="unknown", seed=1, faults=["pause"]))
    d = root / "error"
    write_run(d, b.events, run_json(run="error"))
    with open(d / "history.jsonl", "a") as fh:
        fh.write("{oops}\n{}\n")
    runs["error"] = d
    return runs


def args_for(*argv):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli.add_parser(sub)
    return parser.parse_args(["analyze", *argv])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return make_runs(tmp_path_factory.mktemp("runs"))


def test_analyze_writes_the_three_files(runs, tmp_path):
    verdicts = analyze([runs["valid"], runs["invalid"], runs["unknown"], runs["error"]], out=tmp_path,
                       checker="reference")
    assert [v.verdict for v in verdicts] == ["valid", "invalid", "unknown", "error"]
    assert [v.exit_code for v in verdicts] == [0, 1, 3, 4]
    assert combined_exit(verdicts) == 4 and combined_exit(verdicts[:3]) == 1
    assert "history.jsonl:5" in verdicts[3].error
    for v in verdicts[:3]:
        assert v.out_dir == tmp_path / v.run_dir.name
        on_disk = json.loads(v.summary_path.read_text())
        assert on_disk == json.loads(json.dumps(v.summary))
        assert set(on_disk["anomalies"]) == set(ANOMALY_TYPES)
        html = v.report_path.read_text()
        assert v.verdict.upper() in html and "<svg" in html
        assert "<script" not in html and 'src="http' not in html and "<link" not in html
        suites = ET.parse(v.junit_path).getroot()
        cases = suites.findall("./testsuite/testcase")
        assert [c.get("name") for c in cases] == [*ANOMALY_TYPES, "final-reads"]
        failed = [c.get("name") for c in cases if c.find("failure") is not None]
        assert failed == v.summary["fatal"]
    invalid = verdicts[1]
    html = invalid.report_path.read_text()
    found = [k for k in ANOMALY_TYPES if invalid.summary["anomaly_counts"][k]]
    assert set(ANOMALY_TYPES[:8]) <= set(found)  # this crafted history has every client-read type
    for kind in found:
        assert f'id="{kind}"' in html  # a section per anomaly type found
    assert "send ok" in html and "read" in html  # the ops around them
    skipped = ET.parse(verdicts[2].junit_path).getroot().find("./testsuite/testcase[@name='final-reads']/skipped")
    assert skipped is not None


def test_outputs_default_to_the_run_directory(tmp_path):
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.poll(1, [(0, 1)], hw=1, final=True)
    d = write_run(tmp_path / "r", b.events, run_json(run="r"))
    [v] = analyze([d], checker="reference")
    assert v.summary_path == d / "summary.json" and (d / "report.html").exists() and (d / "junit.xml").exists()
    # An oracle that had no input is "not checked", with why, never "none".
    html = (d / "report.html").read_text()
    assert "<td>not checked</td>" in html and "(no input: no replica files observed)" in html
    assert '<td>lost</td><td class="n">0</td><td>none</td>' in html


@pytest.mark.parametrize("name, code", [("valid", 0), ("invalid", 1), ("unknown", 3), ("error", 4)])
def test_cli_exit_status(runs, tmp_path, capsys, name, code):
    assert cli.run(args_for(str(runs[name]), "--checker", "reference", "--out", str(tmp_path))) == code
    out, err = capsys.readouterr()
    if code == 4:
        assert "ERROR" in err and "history.jsonl:5" in err
    else:
        assert name.upper() in out and "acknowledged" in out and "report:" in out


def test_cli_worst_verdict_wins(runs, tmp_path):
    assert cli.run(args_for(str(runs["valid"]), str(runs["unknown"]), "--checker", "reference",
                            "--out", str(tmp_path))) == 3


def test_cli_with_spark(spark, runs, tmp_path, capsys):
    """The default checker, in-process (the CLI finds the session the fixture made)."""
    code = cli.run(args_for(str(runs["valid"]), str(runs["invalid"]), "--out", str(tmp_path)))
    assert code == 1
    out, _ = capsys.readouterr()
    assert "INVALID" in out and "VALID" in out
    html = (tmp_path / "invalid" / "report.html").read_text()
    s = json.loads((tmp_path / "invalid" / "summary.json").read_text())
    assert s["checker"] == "spark"
    assert all(f'id="{k}"' in html for k in ANOMALY_TYPES if s["anomaly_counts"][k])
    assert all(s["anomaly_counts"][k] for k in ANOMALY_TYPES[:8])
    assert "send ok" in html  # context rows fetched from Spark


def test_aggregate(runs, tmp_path):
    out = tmp_path / "nightly"
    analyze([runs["valid"], runs["invalid"], runs["unknown"]], out=out, checker="reference")
    page = write_aggregate([out], out / "index.html")
    html = page.read_text()
    assert html.count('href="valid/report.html"') == 1 and 'href="invalid/report.html"' in html
    assert "By seed" in html and "By fault kind" in html
    assert ">partition<" in html and ">pause<" in html
    assert "3 runs: 1 valid, 1 invalid, 1 unknown" in html


def test_python_dash_m_and_script_entry_points(runs, tmp_path):
    r = subprocess.run([sys.executable, "-m", "reports", "analyze", "--checker", "reference", "--no-report",
                        "--out", str(tmp_path), str(runs["invalid"])], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1, r.stderr
    assert (tmp_path / "invalid" / "summary.json").exists()
    # spark-submit runs reports/__main__.py as a script: its imports must work from there
    r = subprocess.run([sys.executable, str(ROOT / "reports" / "__main__.py"), "analyze", "--help"],
                       capture_output=True, text=True, cwd=ROOT / "reports")
    assert r.returncode == 0 and "RUN_DIR" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "reports", "validate", str(runs["valid"])],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_print_verdict_for_the_harness(runs, tmp_path, capsys):
    """harness/run_cli.py prints a run's verdict with reports.cli.print_verdict."""
    [v] = analyze([runs["invalid"]], out=tmp_path, checker="reference")
    cli.print_verdict(v)
    out = capsys.readouterr().out
    assert "INVALID" in out and "report:" in out and str(v.report_path) in out


def test_the_spark_checker_keeps_the_jvm_quiet(runs, tmp_path):
    """The Spark checker in a fresh process: the verdict on the terminal, the
    JVM's start-up and WARN lines in its log file, not on stderr."""
    r = subprocess.run([sys.executable, "-m", "reports", "analyze", "--checker", "spark", "--no-report",
                        "--out", str(tmp_path), str(runs["valid"])], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    for noise in ("log4j", "WARN", "WARNING: Using incubator modules", "UserWarning"):
        assert noise not in r.stderr + r.stdout, (noise, r.stderr)


def test_the_report_names_the_system_that_ran():
    from reports.report import _system
    assert _system({"system": "tansu", "brokers": 3}) == "tansu, 3 brokers"
    assert _system({"brokers": 1}) == "chaoslog (controller), 1 broker"  # older runs name none
    assert _system({"system": "chaoslog", "brokers": 3, "broker_config": {
        "coordination": "v2"}}) == "chaoslog (V2 coordination), 3 brokers"
    assert _system({}) == ""
