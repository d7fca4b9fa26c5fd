"""A finding's family of comparisons: each contrast a difference of IQMs over seeds (or a trend) with its
bootstrap distribution; the family corrected together (Holm-Bonferroni on two-sided bootstrap
p-values); "the same" only by an equivalence test (TOST on the bootstrap distribution) within a
margin declared with the family, at the family-corrected level.

Verdict words, used as written on the findings page: ``better`` / ``worse`` (Holm-adjusted p < 0.05,
by the sign of the estimate; a family of gaps rather than scores names its own words, e.g. ``higher`` /
``lower``), ``equivalent`` (TOST within the margin), both at once as ``lower, within ±m`` (a difference
resolved but smaller than the margin: not one that matters), ``inconclusive`` (neither: the data
cannot say).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dqnlab.statistics import bootstrap_difference, bootstrap_p_value, equivalent, holm, iqm

ALPHA = 0.05
MIN_SEEDS = 3
"""Fewer seeds a side than this and a contrast is not tested: a bootstrap over one or two values is no
distribution (one seed against one gave 'better, Holm p 0.001')."""


@dataclass
class Family:
    """The contrasts of one finding, declared before reading the data (``margin``: the equivalence
    margin, in the contrasts' units)."""

    name: str
    margin: float
    reps: int = 2000
    words: tuple[str, str] = ("better", "worse")
    """What a resolved positive / negative estimate is called."""
    rows: list[dict] = field(default_factory=list)

    def difference(self, label: str, x, y) -> None:
        """``IQM(x) - IQM(y)`` over seeds (skipped, and said so, when either side has no run)."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        x, y = x[np.isfinite(x)], y[np.isfinite(y)]
        if not len(x) or not len(y):
            self.rows.append({"contrast": label, "missing": True})
            return
        if min(len(x), len(y)) < MIN_SEEDS:
            self.rows.append({"contrast": label, "missing": True,
                              "reason": f"too few seeds ({len(x)} vs {len(y)}; a verdict needs {MIN_SEEDS} a side)"})
            return
        d, draws = bootstrap_difference(x, y, statistic=iqm, reps=self.reps)
        self.add(label, d, draws)

    def add(self, label: str, estimate: float, draws: np.ndarray, testable_equivalence: bool = True) -> None:
        self.rows.append({"contrast": label, "estimate": estimate, "draws": np.asarray(draws),
                          "equivalence": testable_equivalence, "missing": False})  # fmt: skip

    def results(self) -> list[dict]:
        """Every contrast with ``low``/``high`` (95%, unadjusted), ``p``, ``p_holm`` and ``verdict``."""
        tested = [r for r in self.rows if not r["missing"]]
        adjusted = holm([bootstrap_p_value(r["draws"]) for r in tested]) if tested else []
        m = max(len(tested), 1)
        out = []
        for r, p_holm in zip(tested, adjusted):
            low, high = np.quantile(r["draws"], [0.025, 0.975])
            within = r["equivalence"] and equivalent(r["draws"], self.margin, alpha=ALPHA / m)
            word = self.words[0] if r["estimate"] > 0 else self.words[1]
            if p_holm < ALPHA:
                verdict = f"{word}, within ±{self.margin:g}" if within else word
            elif within:
                verdict = "equivalent"
            else:
                verdict = "inconclusive"
            out.append({**r, "low": low, "high": high, "p": bootstrap_p_value(r["draws"]), "p_holm": p_holm,
                        "verdict": verdict})  # fmt: skip
        return out + [r for r in self.rows if r["missing"]]

    def markdown(self, digits: int = 0) -> str:
        res = self.results()
        tested = sum(not r["missing"] for r in res)
        lines = [f"Family *{self.name}*: {tested} contrasts, Holm-corrected (alpha {ALPHA}); equivalence margin "
                 f"±{self.margin:g} (TOST at the corrected level).", "",
                 "| contrast | estimate [95% CI] | p | Holm p | verdict |", "|---|---|---|---|---|"]  # fmt: skip
        for r in res:
            if r["missing"]:
                lines.append(f"| {r['contrast']} | — | — | — | {r.get('reason', 'not run')} |")
                continue
            lines.append(f"| {r['contrast']} | {r['estimate']:+.{digits}f} [{r['low']:.{digits}f}, {r['high']:.{digits}f}] "
                         f"| {r['p']:.3f} | {r['p_holm']:.3f} | {r['verdict']} |")  # fmt: skip
        return "\n".join(lines)
