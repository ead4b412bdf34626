"""The mutation batches still apply to the code they mutate: each mutant's
`find` occurs exactly once in its file (bench/mutation/README.md), so a
change of the broker that moves a mutated line is noticed here, not when a
mutation run reports the mutant as failing to apply."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "mutation"))

import mutants  # noqa: E402
import mutants_blind  # noqa: E402
import mutants_blind2  # noqa: E402
import mutants_txn  # noqa: E402

ALL = (mutants.MUTANTS + mutants_blind.MUTANTS_BLIND + mutants_blind2.MUTANTS_BLIND_2
       + mutants_blind2.MUTANTS_BLIND_2_V2 + mutants_txn.MUTANTS_TXN)


@pytest.mark.parametrize("mutant", ALL, ids=[m.id for m in ALL])
def test_mutant_applies_exactly_once(mutant):
    text = (REPO / mutant.file).read_text()
    assert text.count(mutant.find) == 1, (
        f"mutant {mutant.id}: its text occurs {text.count(mutant.find)} times in {mutant.file}")


def test_mutant_ids_are_unique():
    ids = [m.id for m in ALL]
    assert len(ids) == len(set(ids))
