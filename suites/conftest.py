"""Chaos suites: the long variants (marked `slow`) are skipped unless asked for.

The suites run in CI by default (the whole folder within ~15 minutes on a
2-core machine). Longer variants of the same scenarios (the 60-second runs
of issue 5, Kafka's five bounce rounds) carry `@pytest.mark.slow` and run
with `--run-slow`, with `-m slow`, or with CHAOSLOG_RUN_SLOW=1.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="chaoslog suites: also run the long variants (marked slow)")


# The strongest fast tests first: `pytest suites -x` then stops at the first
# failure within minutes of the start (the mutation score measures this):
# the smoke tier (the single guarantees, under 3 minutes), then the lead run
# (pressure on every control-plane transition, every oracle on: about 2
# minutes), the other pressure runs, then the short scripted scenarios of
# the famous anomalies. On the second blind batch (bench/mutation/README.md,
# "The second blind batch") the lead run put first killed 2 mutants the
# smoke tier does not, while its ~2 minutes would push 4 of the smoke
# tier's kills (measured at 174-230 s with the smoke tier first) past the
# fifth minute.
ORDER = ("smoke", "lead", "pressure", "scenario")
# Within a tier, the replication guarantees come before the consumer groups'.
LEAD = ("test_suite_guarantees.py", "test_suite_pressure.py")


def _rank(item) -> tuple[int, int]:
    lead = 0 if Path(str(item.fspath)).name in LEAD else 1
    for i, marker in enumerate(ORDER):
        if item.get_closest_marker(marker) is not None:
            return i, lead
    return len(ORDER), lead


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mine = [i for i in items if HERE in Path(str(i.fspath)).resolve().parents]
    if mine:
        others = [i for i in items if i not in mine]
        items[:] = others + sorted(mine, key=_rank)  # a stable sort keeps file order within a rank
    markexpr = config.getoption("-m") or ""
    if (config.getoption("--run-slow") or os.environ.get("CHAOSLOG_RUN_SLOW")
            or ("slow" in markexpr and "not slow" not in markexpr)):
        return
    skip = pytest.mark.skip(reason="long variant of a chaos suite (marked slow): "
                                   "run it with --run-slow, -m slow or CHAOSLOG_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords and HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)
