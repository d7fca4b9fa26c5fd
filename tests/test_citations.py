"""A sentence on the findings page cites only what a generated table shows (analysis/citations.py)."""

from pathlib import Path

from analysis import citations, findings

ROOT = Path(__file__).resolve().parent.parent
BLOCK = (findings.BEGIN.format("demo") + "\n| contrast | estimate [95% CI] | p | Holm p (MC SE) | verdict |\n"
         "|---|---|---|---|---|\n| UTD 4 minus 1 | +32.5 [15.5, 48.9] | 0.000 | 0.000 (0.0004) | better |\n"
         "| UTD 1 minus 0.25 | -49.0 [-121.1, -16.5] | 0.002 | 0.056 (0.0014) | inconclusive |\n"
         "| cell | 221 [194, 246] |\n" + findings.END.format("demo") + "\n")  # fmt: skip


def stale(prose: str, name: str = "page.md") -> list[str]:
    return citations.stale_citations({Path(name): BLOCK + prose})


def test_a_cited_estimate_must_be_a_table_row_rounded_as_written():
    assert stale("UTD 4 is `better` (+33 [16, 49]); UTD 4 ended at 221 [194, 246].") == []
    assert stale("(+32.5 [15.5, 48.9])") == []  # as printed
    assert stale("(-49 [-121, -17], target in updates)") == []
    assert len(stale("UTD 4 is `better` (+33 [16, 50]).")) == 1  # a bound the table no longer has
    assert len(stale("(+41 [4, 76])")) == 1  # no such row
    assert len(stale("(+32.50 [15.50, 48.90])")) == 1  # more digits than the table has: not from it
    assert len(stale("221 [194, 246] and 221 [190, 246]")) == 1  # each citation on its own
    assert len(stale("UTD 4 is `better` (+33\n  [16, 50], Holm p\n  0.5)")) == 1  # broken across lines


def test_a_holm_p_written_after_a_citation_must_be_its_rows():
    assert stale("+33 [16, 49], Holm p < 0.001") == []
    assert stale("-49 [-121, -17] (Holm 0.056)") == []
    assert stale("-49 [-121, -17], Holm p 0.06") == []  # rounded
    assert len(stale("-49 [-121, -17], Holm 0.015")) == 1  # the p of an earlier bootstrap
    assert len(stale("+33 [16, 49], Holm p < 0.0001")) == 1  # 0.000 printed: not shown below 0.0001
    assert len(stale("221 [194, 246], Holm 0.5")) == 1  # a row without a Holm p
    assert stale("(+33\n  [16, 49], Holm p\n  < 0.001)") == []  # broken across lines
    assert len(stale("(+33\n  [16, 49], Holm p\n  0.02)")) == 1


def test_the_tables_themselves_and_the_revisions_record_are_not_prose():
    assert stale("") == []  # the block's own rows cite nothing
    assert stale("was +58 [35, 81] before the rerun", name="revisions.md") == []
    assert len(stale("was +58 [35, 81] before the rerun", name="writers.md")) == 1


def test_every_estimate_the_findings_pages_cite_is_a_row_of_their_generated_tables():
    """The committed page and appendices (their tables are the data's: tests/test_findings_page.py)."""
    pages = findings.read_pages(ROOT / "docs" / "findings.md")
    assert len(citations.table_rows(pages)) > 500
    assert citations.stale_citations(pages) == []
