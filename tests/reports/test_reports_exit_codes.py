"""reports/exit_codes.py: the one exit-code table of every chaoslog command."""
import re
from pathlib import Path

from reports.exit_codes import (EXIT_ERROR, EXIT_INVALID, EXIT_OK, EXIT_UNKNOWN, TABLE,
                                of_verdict, worst)

REPO = Path(__file__).resolve().parents[2]


def test_verdicts_and_their_worst():
    assert [of_verdict(v) for v in ("valid", "invalid", "unknown", "error", "?")] == [
        EXIT_OK, EXIT_INVALID, EXIT_UNKNOWN, EXIT_ERROR, EXIT_ERROR]
    assert worst([EXIT_OK, EXIT_UNKNOWN, EXIT_INVALID]) == EXIT_INVALID
    assert worst([EXIT_INVALID, EXIT_ERROR]) == EXIT_ERROR and worst([]) == EXIT_OK


def test_the_readme_lists_the_table():
    readme = (REPO / "README.md").read_text()
    listed = {int(m[1]) for m in re.finditer(r"^\| (\d+) \| ", readme, re.M)}
    assert listed == set(TABLE)


def test_no_command_defines_exit_codes_of_its_own():
    """Every EXIT_ constant of the harness and the checker is this table's
    (but a workload worker's status to its parent, EXIT_FATAL)."""
    own = []
    for layer in ("harness", "reports"):
        for path in sorted((REPO / layer).rglob("*.py")):
            for m in re.finditer(r"^(EXIT_\w+)(?:, *EXIT_\w+)* *=", path.read_text(), re.M):
                if path.name != "exit_codes.py" and m[1] != "EXIT_FATAL":
                    own.append(f"{path.relative_to(REPO)}: {m[0]}")
    assert own == []
