"""The exit codes of every chaoslog command: one table (README.md, "The CLI").

`run`, `demo`, `analyze`, `campaign`, `shrink`, `warehouse`, `trends`,
`fuzz`, `cluster`, `fault`, `heal`, `images` all answer with these, so a
script tells a finding from a mistake from a broken tool the same way
whatever it ran. It lives in `reports`, the one layer both the checker and
the harness may import.
"""
from __future__ import annotations

from typing import Iterable

EXIT_OK = 0            # valid: no anomaly; or the command did what it was asked
EXIT_INVALID = 1       # anomalies found: an invalid verdict, fuzz findings
EXIT_REFUSED = 2       # a mistake in the command, its files or settings, or a cluster it
                       # cannot start or reach, said in one line; nothing judged
                       # (argparse's usage errors are 2 too)
EXIT_UNKNOWN = 3       # no verdict: final reads incomplete, nothing judged, the anomaly
                       # did not come back, out of time
EXIT_ERROR = 4         # the harness or the checker failed (an unreadable history, a crash)
EXIT_INTERRUPTED = 130  # Ctrl-C

TABLE = {EXIT_OK: "valid, or done", EXIT_INVALID: "anomalies found",
         EXIT_REFUSED: "refused: a mistake in the command, its files or settings, or a "
                       "cluster it cannot start or reach",
         EXIT_UNKNOWN: "no verdict", EXIT_ERROR: "the harness or the checker failed",
         EXIT_INTERRUPTED: "interrupted"}


def of_verdict(verdict: str) -> int:
    """A checker's verdict (valid, invalid, unknown, error) as an exit code."""
    return {"valid": EXIT_OK, "invalid": EXIT_INVALID, "unknown": EXIT_UNKNOWN}.get(
        verdict, EXIT_ERROR)


def worst(codes: Iterable[int]) -> int:
    """Several verdicts as one code: error beats invalid beats unknown beats valid."""
    found = set(codes)
    for code in (EXIT_ERROR, EXIT_INVALID, EXIT_UNKNOWN):
        if code in found:
            return code
    return EXIT_OK
