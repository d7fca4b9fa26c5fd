"""docs/findings.md holds no number typed by hand: every generated table on it is exactly what the study
data committed under docs/data gives (the same check CI runs: python analysis/findings.py --check)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_generated_table_on_the_findings_page_is_what_the_committed_data_gives():
    from analysis import findings

    data = ROOT / "docs" / "data"
    assert findings.main(["--data", str(data), "--page", str(ROOT / "docs" / "findings.md"), "--check"]) == 0
