"""A verdict word on the findings page is a claim: it must not move with the bootstrap's generator seed. One
test per data finding (each builds its own finding from the committed data), so pytest-xdist's two workers
share the work instead of one worker taking the whole page."""

from pathlib import Path

import pytest

from analysis import findings

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"


@pytest.mark.parametrize("name", list(findings.DATA_FINDINGS))
def test_no_verdict_word_of_a_finding_moves_with_the_bootstrap_generator_seed(name):
    """Every family's words are the same from 10 generator seeds (each seed draws every contrast afresh,
    refined near its thresholds as the page's are). Every family the finding's text shows is one checked."""
    import matplotlib.pyplot as plt

    made = findings.data_findings(DATA, [name])
    assert name in made, f"{name}: no committed data under {DATA}"
    finding = made[name]
    plt.close(finding.figure)
    assert len(finding.families) == finding.text.count("| Holm p (MC SE) |")
    moved = []
    for family in finding.families:
        words = {r["contrast"]: r["verdict"] for r in family.results() if not r["missing"]}  # "not run": no word
        for seed in range(1, 10):
            again = {r["contrast"]: r["verdict"] for r in family.results(seed) if not r["missing"]}
            moved += [(family.name, c, w, again[c], seed) for c, w in words.items() if again[c] != w]
    assert moved == []
