"""Run data stays out of the tree (issue 36): the bench scripts write to
bench/paths.py's RAW, which git ignores, and bench/results/ stays a small
index in which every file is named by bench/results/README.md."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.paths import RAW  # noqa: E402

RESULTS = REPO / "bench" / "results"
LIMIT = 1_000_000  # bytes in bench/results, the index included


def test_raw_output_goes_to_a_store_git_ignores():
    ignored = [l.strip() for l in (REPO / ".gitignore").read_text().splitlines()]
    assert "/runs/" in ignored, ".gitignore no longer ignores /runs/"
    assert RAW.is_relative_to(REPO / "runs"), f"{RAW} is outside the ignored runs/"


def test_every_kept_result_is_named_by_the_index():
    index = (RESULTS / "README.md").read_text()
    unnamed = [e.name for e in sorted(RESULTS.iterdir()) if e.name != "README.md"
               and f"`{e.name}{'/' if e.is_dir() else ''}" not in index]
    assert not unnamed, ("bench/results/README.md does not name these (add a row with "
                         f"the command, or write them to runs/bench/): {unnamed}")


def test_the_index_stays_small():
    total = sum(f.stat().st_size for f in RESULTS.rglob("*") if f.is_file())
    assert total <= LIMIT, (f"bench/results holds {total:,} bytes (at most {LIMIT:,}): raw "
                            "output belongs in runs/bench/, only the cited numbers here")
