"""Finding and reading the history of a run directory (history-format.md).

Both checkers start here: `open_run` reads `run.json`, lists the history files
and notices a truncated last line (a writer that crashed mid-line) before any
event is looked at. `iter_events` is the plain-Python reader, used by the
reference checker, the validator, and by the Spark checker to name the line of
an event Spark found malformed.

The module is called `readers`, not `io`, so that running a file of this
package as a script (spark-submit) cannot shadow the standard library.
"""

from __future__ import annotations

import heapq
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from reports.errors import HistoryError, HistoryWarning
from reports.incarnations import Incarnations, attribution, renamed
from reports.observations import read_incarnations
from reports.schema import (FIELDS, FORMAT_VERSION, MSG_NOT_JSON, SOURCE_FIELDS, event_problem,
                            normalize_event)

HISTORY_FILE = "history.jsonl"
HISTORY_DIR = "history"
RUN_FILE = "run.json"


@dataclass
class HistoryFile:
    path: Path
    kind: str  # "jsonl" or "parquet"
    # For a JSONL file whose last line was cut mid-write: that line's bytes.
    truncated_tail: bytes | None = None


@dataclass
class RunInput:
    """A run directory, checked enough to be read."""

    run_dir: Path
    run_json: dict
    run_id: str
    files: list[HistoryFile]
    warnings: list[str] = field(default_factory=list)

    @property
    def idempotent(self) -> bool:
        return producer_idempotent(self.run_json)

    def clients(self) -> dict[str, dict]:
        """run.json's workload.clients: client instance -> its settings."""
        clients = (self.run_json.get("workload") or {}).get("clients") or {}
        return clients if isinstance(clients, dict) else {}

    def weak_nodes(self) -> set[str]:
        """Producer instances whose acknowledgements do not promise durability
        (acks 0 or 1): their sends are outside `lost` and `inconsistent-offset`."""
        return {n for n, c in self.clients().items()
                if isinstance(c, dict) and str(c.get("acks", "all")) in ("0", "1")}

    def idempotent_nodes(self) -> set[str]:
        return {n for n, c in self.clients().items()
                if isinstance(c, dict) and c.get("role") == "producer" and _truthy(c.get("idempotent"))}

    def min_isr(self) -> int:
        config = (self.run_json.get("cluster") or {}).get("broker_config") or {}
        try:
            return int(config.get("min.insync.replicas", 1))
        except (TypeError, ValueError):
            return 1

    def check_bound(self, name: str, default: float) -> float:
        """A bound of run.json's `checks` (seconds), or the default."""
        try:
            return float((self.run_json.get("checks") or {}).get(name, default))
        except (TypeError, ValueError):
            return default


def _truthy(v) -> bool:
    return v.strip().lower() in ("true", "1", "yes", "on") if isinstance(v, str) else bool(v)


def producer_idempotent(run_json: dict) -> bool:
    """Whether the workload's producer was idempotent (duplicates are then fatal).

    run.json's `workload` names it `idempotence`; a few spellings other tools
    use are accepted. Absent means not idempotent: duplicates are reported but
    not fatal, the cautious reading for an at-least-once producer.
    """
    workload = run_json.get("workload") or {}
    if not isinstance(workload, dict):
        return False
    for key in ("idempotence", "idempotent", "enable_idempotence", "enable.idempotence"):
        if key in workload:
            return _truthy(workload[key])
    return False


def _line_of(text: str, needle: str) -> int | None:
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    return None


def read_run_json(run_dir: Path) -> dict:
    path = run_dir / RUN_FILE
    if not path.is_file():
        raise HistoryError(path, None, "missing: every run directory has a run.json")
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise HistoryError(path, e.lineno, f"not JSON: {e.msg}") from None
    if not isinstance(meta, dict):
        raise HistoryError(path, 1, "not a JSON object")
    fmt = meta.get("format")
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise HistoryError(
            path,
            _line_of(text, '"format"'),
            f"unknown format {fmt!r}: this checker reads history format {FORMAT_VERSION}",
        )
    return meta


def _truncated_tail(path: Path) -> bytes | None:
    """The last line of a JSONL file if it was cut mid-write, else None.

    A crash while writing leaves a last line without its newline that does not
    parse. A last line that lacks only the newline but parses is kept.
    """
    size = path.stat().st_size
    if size == 0:
        return None
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        # Read backwards to the previous newline.
        chunk, pos, tail = 65536, size, b""
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            fh.seek(pos)
            tail = fh.read(step) + tail
            nl = tail.rfind(b"\n")
            if nl >= 0:
                tail = tail[nl + 1 :]
                break
    if not tail.strip():
        return None
    try:
        json.loads(tail)
        return None
    except ValueError:
        return tail


def open_run(run_dir) -> RunInput:
    """Check a run directory's shape (run.json, history files); raise HistoryError if wrong."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise HistoryError(run_dir, None, "not a run directory")
    meta = read_run_json(run_dir)
    single = run_dir / HISTORY_FILE
    parts_dir = run_dir / HISTORY_DIR
    files: list[HistoryFile] = []
    if single.is_file():
        files.append(HistoryFile(single, "jsonl"))
    elif parts_dir.is_dir():
        for name in sorted(os.listdir(parts_dir)):
            p = parts_dir / name
            if name.startswith((".", "_")) or not p.is_file():
                continue
            if name.endswith(".jsonl"):
                files.append(HistoryFile(p, "jsonl"))
            elif name.endswith(".parquet"):
                files.append(HistoryFile(p, "parquet"))
        if not files:
            raise HistoryError(parts_dir, None, "no *.jsonl or *.parquet part files")
    else:
        raise HistoryError(run_dir, None, f"no {HISTORY_FILE} and no {HISTORY_DIR}/ part files")
    run = RunInput(run_dir, meta, str(meta.get("run") or run_dir.name), files)
    for hf in files:
        if hf.kind == "parquet":
            _check_parquet_schema(hf.path)
        if hf.kind == "jsonl":
            hf.truncated_tail = _truncated_tail(hf.path)
            if hf.truncated_tail is not None:
                n = sum(1 for _ in open(hf.path, "rb"))
                msg = (
                    f"{hf.path}:{n}: truncated last line dropped "
                    f"(no newline, not JSON: {hf.truncated_tail[:60]!r})"
                )
                run.warnings.append(msg)
                warnings.warn(msg, HistoryWarning, stacklevel=2)
    return run



def open_runs(run_dirs) -> list[RunInput | HistoryError]:
    """open_run for each directory; a run that cannot be opened gets its
    HistoryError in its place, so the others can still be checked."""
    out: list[RunInput | HistoryError] = []
    for d in run_dirs:
        try:
            out.append(open_run(d))
        except HistoryError as e:
            out.append(e)
    return out

def _check_parquet_schema(path: Path) -> None:
    """Read a part file's footer and check its column types against the format.

    Spark refuses to narrow or convert types when reading with the explicit
    schema, and says so cryptically; better to name the file and column here.
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
    except Exception as e:
        raise HistoryError(path, None, f"not a readable Parquet file: {e}") from None

    def integer(t, bits):
        return pa.types.is_signed_integer(t) and t.bit_width <= bits

    def string(t):
        return pa.types.is_string(t) or pa.types.is_large_string(t)

    def listof(t, ok):
        return (pa.types.is_list(t) or pa.types.is_large_list(t)) and ok(t.value_type)

    allowed = {
        "long": lambda t: integer(t, 64),
        "int": lambda t: integer(t, 32),
        "string": string,
        "bool": pa.types.is_boolean,
        "records": lambda t: listof(t, lambda u: listof(u, lambda v: integer(v, 64))),
        "strings": lambda t: listof(t, string),
        "source": lambda t: pa.types.is_struct(t) and all(
            allowed[k](t.field(n).type) or pa.types.is_null(t.field(n).type)
            for n, k in SOURCE_FIELDS if t.get_field_index(n) >= 0),
    }
    for name, kind in FIELDS:
        if name in schema.names:
            t = schema.field(name).type
            if not pa.types.is_null(t) and not allowed[kind](t):
                raise HistoryError(path, None, f"column '{name}' is {t}; history-format.md makes it {kind}")


# --------------------------------------------------------------------------
# Plain-Python event reading


def iter_raw(hf: HistoryFile) -> Iterator[tuple[int, dict | None, str | None]]:
    """(line or row number, event or None, problem or None) for each event of a file.

    Blank lines are skipped; the truncated last line, if any, is dropped.
    """
    if hf.kind == "parquet":
        yield from _iter_parquet(hf.path)
        return
    with open(hf.path, "rb") as fh:
        lineno = 0
        for line in fh:
            lineno += 1
            if not line.strip():
                continue
            if hf.truncated_tail is not None and not line.endswith(b"\n"):
                continue  # the crash-cut last line, already warned about
            try:
                raw = json.loads(line)
            except ValueError as e:
                yield lineno, None, f"{MSG_NOT_JSON} ({e})"
                continue
            ev = normalize_event(raw)
            if ev is None:
                yield lineno, None, MSG_NOT_JSON
                continue
            yield lineno, ev, event_problem(ev)


def _iter_parquet(path: Path):
    try:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several kinds for a broken file
        raise HistoryError(path, None, f"not a readable Parquet file: {e}") from None
    row = 0
    for batch in pf.iter_batches(batch_size=65536):
        for raw in batch.to_pylist():
            row += 1
            ev = normalize_event(raw)
            if ev is None:
                yield row, None, MSG_NOT_JSON
                continue
            yield row, ev, event_problem(ev)


def iter_file_events(hf: HistoryFile) -> Iterator[tuple[int, dict]]:
    """(line, event) of one file; raises HistoryError at the first malformed event."""
    for lineno, ev, problem in iter_raw(hf):
        if problem is not None:
            raise HistoryError(hf.path, lineno, problem)
        yield lineno, ev


def first_problem(hf: HistoryFile) -> HistoryError | None:
    for lineno, _ev, problem in iter_raw(hf):
        if problem is not None:
            return HistoryError(hf.path, lineno, problem)
    return None


def iter_events(run: RunInput) -> Iterator[dict]:
    """The run's events in `index` order; raises HistoryError on a malformed event.

    history.jsonl is in index order by the format; part files are merged by
    index, each expected in index order as writers produce them. An event out
    of order within a file is reported as an error here (the validator lists
    it too); the Spark checker does not depend on file order at all.
    """
    streams = [_events_in_order(hf) for hf in run.files]
    if len(streams) == 1:
        yield from streams[0]
    else:
        yield from heapq.merge(*streams, key=lambda ev: ev["index"])


def iter_judged_events(run: RunInput, inc: Incarnations | None = None) -> Iterator[dict]:
    """iter_events as the checkers judge them: the sends and polls of a topic
    deleted and created again renamed by incarnation (reports/incarnations.py),
    which takes one more pass to attribute their ops. `inc`: the run's
    re-creations, when the caller has read them already."""
    inc = read_incarnations(run.run_dir) if inc is None else inc
    if not inc:
        yield from iter_events(run)
        return
    yield from renamed(iter_events(run), inc, attribution(iter_events(run), inc))


def _events_in_order(hf: HistoryFile):
    last = None
    for lineno, ev in iter_file_events(hf):
        if last is not None and ev["index"] < last:
            raise HistoryError(
                hf.path, lineno, f"index {ev['index']} after {last}: events must be in index order"
            )
        last = ev["index"]
        yield ev
