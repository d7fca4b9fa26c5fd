"""A finding's family of comparisons (analysis/family.py): the verdict words the findings page prints
follow the Holm-corrected test and the equivalence test, never the raw estimate alone."""

import numpy as np

from analysis.family import Family


def _verdicts(family: Family) -> dict[str, str]:
    return {r["contrast"]: r["verdict"] for r in family.results()}


def test_verdicts_follow_holm_and_tost_with_the_familys_own_words():
    rng = np.random.default_rng(0)
    base = rng.normal(100, 10, 10)
    family = Family("returns", margin=50, reps=2000)
    family.difference("far above", base + 200, base)  # resolved, beyond the margin
    family.difference("far below", base - 200, base)
    family.difference("same seeds", base + rng.normal(0, 1, 10), base)  # tight around 0: equivalent
    family.difference("too noisy", rng.normal(100, 400, 10), base)  # neither resolved nor within ±50
    v = _verdicts(family)
    assert v == {"far above": "better", "far below": "worse", "same seeds": "equivalent", "too noisy": "inconclusive"}

    gaps = Family("share gaps", margin=0.05, words=("higher", "lower"))
    gaps.add("small but resolved", -0.02, rng.normal(-0.02, 0.002, 2000))
    gaps.add("large", -0.2, rng.normal(-0.2, 0.002, 2000))
    assert _verdicts(gaps) == {"small but resolved": "lower, within ±0.05", "large": "lower"}


def test_holm_takes_back_a_contrast_that_one_test_alone_would_call_resolved():
    rng = np.random.default_rng(1)
    draws = rng.normal(2.2, 1.0, 4000)  # a two-sided bootstrap p of ~0.03 on its own
    alone = Family("one", margin=0.1)
    alone.add("x", 2.2, draws)
    assert _verdicts(alone)["x"] == "better"
    many = Family("ten", margin=0.1)
    for i in range(10):
        many.add(f"x{i}", 2.2, draws)
    assert set(_verdicts(many).values()) == {"inconclusive"}  # 10 x 0.03 > 0.05 after Holm
