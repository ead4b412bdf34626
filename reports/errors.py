"""Errors and warnings about the input of the checker.

A history that cannot be read is not a verdict: the checker stops and names the
file and the line, so that whoever wrote the history can fix the writer. The
CLI maps `HistoryError` to exit status 3.
"""

from __future__ import annotations


class HistoryError(Exception):
    """A run directory or history file that does not follow history-format.md.

    `path` is the file, `line` the 1-based line (JSONL) or row (Parquet) when
    known, `reason` what is wrong with it.
    """

    def __init__(self, path, line: int | None, reason: str):
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {reason}")


class HistoryWarning(UserWarning):
    """Something was tolerated in a history, e.g. a truncated last line."""
