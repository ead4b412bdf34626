"""Reading histories: malformed input names file and line; a crash-cut last line is dropped."""

from __future__ import annotations

import json
import warnings

import pytest
from reports_histgen import HistoryBuilder, run_json, write_parquet, write_run

from reports import reference
from reports.errors import HistoryError, HistoryWarning
from reports.readers import open_run
from reports.summary import build_summary


def small_history():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.send(0, 2, offset=1)
    b.poll(1, [(0, 1), (1, 2)], hw=2, final=True)
    return b.events


def lines_of(events):
    return [json.dumps(e) for e in events]


def write_lines(d, lines, meta=None, end="\n"):
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(meta or run_json(run=d.name)))
    (d / "history.jsonl").write_text("\n".join(lines) + end)
    return d


# The malformed runs, each with the line and the words its error must carry.
def bad_runs(root):
    ev = small_history()
    runs = {}
    lines = lines_of(ev)
    lines[2] = '{"index": 2, "time": 3000000, "process": 0'  # cut in the middle, not the last line
    runs["not_json"] = (write_lines(root / "not_json", lines), "history.jsonl", 3, "not a JSON object")
    bad = dict(ev[1])
    del bad["topic"]
    lines = lines_of(ev)
    lines[1] = json.dumps(bad)
    runs["missing_topic"] = (write_lines(root / "missing_topic", lines), "history.jsonl", 2, "'topic'")
    bad = dict(ev[5])
    del bad["high_watermark"]
    lines = lines_of(ev)
    lines[5] = json.dumps(bad)
    runs["missing_hw"] = (write_lines(root / "missing_hw", lines), "history.jsonl", 6, "'high_watermark'")
    lines = lines_of(ev)
    lines[0] = lines[0].replace('"value": 1', '"value": "one"')
    runs["wrong_type"] = (write_lines(root / "wrong_type", lines), "history.jsonl", 1, "not a JSON object")
    lines = lines_of(ev)
    lines[3] = lines[3].replace('"type": "ok"', '"type": "done"')
    runs["unknown_type"] = (write_lines(root / "unknown_type", lines), "history.jsonl", 4, "unknown type 'done'")
    lines = lines_of(ev)
    lines[5] = lines[5].replace('[[0, 1], [1, 2]]', '[[0, 1], [1]]')
    runs["bad_records"] = (write_lines(root / "bad_records", lines), "history.jsonl", 6, "records must be")
    # each way a record can be malformed: Spark must count it too, or the run passes as valid
    for name, records in (("null_in_record", "[[0, 1], [1, null]]"), ("null_record", "[[0, 1], null]"),
                          ("long_record", "[[0, 1], [1, 2, 3]]")):
        lines = lines_of(ev)
        lines[5] = lines[5].replace('[[0, 1], [1, 2]]', records)
        runs[name] = (write_lines(root / name, lines), "history.jsonl", 6, "records must be")
    meta = run_json(run="fmt")
    meta["format"] = 2
    runs["unknown_format"] = (write_lines(root / "unknown_format", lines_of(ev), meta), "run.json", 1,
                              "unknown format 2")
    d = root / "parquet_missing"
    bad_events = [dict(e) for e in ev]
    bad_events[3]["offset"] = None  # an ok send without its offset
    write_run(d, bad_events, run_json(run="pq"), fmt="parquet", parts=1)
    runs["parquet_missing"] = (d, "part-00000.parquet", 4, "'offset'")
    return runs


def assert_names(err, where, line, words):
    assert isinstance(err, HistoryError), err
    assert err.path.endswith(where), err
    assert err.line == line, err
    assert words in str(err), err
    assert f"{where}:{line}:" in str(err)


@pytest.mark.parametrize("name", ["not_json", "missing_topic", "missing_hw", "wrong_type", "unknown_type",
                                  "bad_records", "null_in_record", "null_record", "long_record",
                                  "unknown_format", "parquet_missing"])
def test_reference_names_file_and_line(name, tmp_path):
    d, where, line, words = bad_runs(tmp_path)[name]
    with pytest.raises(HistoryError) as e:
        reference.check(d)
    assert_names(e.value, where, line, words)


def test_spark_names_file_and_line(spark, tmp_path):
    from reports import api

    runs = bad_runs(tmp_path / "bad")
    good = write_run(tmp_path / "good", small_history(), run_json(run="good"))
    names = list(runs)
    results = api.findings([runs[n][0] for n in names] + [good], spark=spark)
    for name, err in zip(names, results):
        _d, where, line, words = runs[name]
        assert_names(err, where, line, words)
    # one bad run does not stop the others
    assert build_summary(results[-1])["valid"] is True


def truncated_run(d):
    lines = lines_of(small_history())
    return write_lines(d, lines + ['{"index": 6, "time": 9000000, "proc'], end="")


def test_truncated_last_line_is_dropped_with_a_warning(tmp_path):
    d = truncated_run(tmp_path / "cut")
    with pytest.warns(HistoryWarning, match=r"history.jsonl:7: truncated last line"):
        s = build_summary(reference.check(d))
    assert s["valid"] is True and s["events"] == 6
    assert any("truncated last line" in w for w in s["warnings"])


def test_truncated_last_line_spark(spark, tmp_path):
    from reports import api

    d = truncated_run(tmp_path / "cut")
    with pytest.warns(HistoryWarning):
        [res] = api.findings([d], spark=spark)
    s = build_summary(res)
    assert s["valid"] is True and s["events"] == 6
    assert any("truncated last line" in w for w in s["warnings"])


def test_last_line_without_newline_that_parses_is_kept(tmp_path):
    d = write_lines(tmp_path / "nonl", lines_of(small_history()), end="")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = build_summary(reference.check(d))
    assert s["events"] == 6 and s["valid"] is True


def test_a_bad_line_before_the_end_is_an_error_even_without_newline(tmp_path):
    lines = lines_of(small_history())
    lines[1] = "garbage"
    d = write_lines(tmp_path / "x", lines, end="")
    with pytest.raises(HistoryError) as e:
        reference.check(d)
    assert e.value.line == 2


def test_run_dir_shape_errors(tmp_path):
    with pytest.raises(HistoryError, match="not a run directory"):
        open_run(tmp_path / "nope")
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises(HistoryError, match="run.json"):
        open_run(d)
    (d / "run.json").write_text('{"format": 1,\n "run": }')
    with pytest.raises(HistoryError) as e:
        open_run(d)
    assert e.value.line == 2
    (d / "run.json").write_text(json.dumps(run_json()))
    with pytest.raises(HistoryError, match="no history.jsonl"):
        open_run(d)


def test_part_files_are_merged_by_index(tmp_path):
    ev = small_history()
    d = tmp_path / "parts"
    d.mkdir()
    (d / "run.json").write_text(json.dumps(run_json(run="parts")))
    (d / "history").mkdir()
    # interleaved parts, each in index order, one JSONL and one Parquet
    (d / "history" / "a.jsonl").write_text("\n".join(json.dumps(e) for e in ev[0::2]) + "\n")
    write_parquet(d / "history" / "b.parquet", ev[1::2])
    s = build_summary(reference.check(d))
    assert s["valid"] is True and s["events"] == 6 and s["counts"]["read"] == 2


def test_out_of_order_history_is_an_error(tmp_path):
    lines = lines_of(small_history())
    lines[2], lines[3] = lines[3], lines[2]
    d = write_lines(tmp_path / "disorder", lines)
    with pytest.raises(HistoryError, match="index order") as e:
        reference.check(d)
    assert e.value.line == 4


def test_parquet_column_of_the_wrong_type_names_file_and_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = write_run(tmp_path / "pq", small_history(), run_json(run="pq"), fmt="parquet", parts=1)
    part = d / "history" / "part-00000.parquet"
    table = pq.read_table(part)
    i = table.schema.get_field_index("partition")
    table = table.set_column(i, "partition", table.column("partition").cast(pa.int64()))
    pq.write_table(table, part)
    with pytest.raises(HistoryError, match=r"part-00000.parquet: column 'partition' is int64"):
        open_run(d)
