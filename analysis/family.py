"""A finding's family of comparisons: each contrast a difference of IQMs over seeds (or a trend) with its
bootstrap distribution; the family corrected together (Holm-Bonferroni on two-sided bootstrap
p-values); "the same" only by an equivalence test (TOST on the bootstrap distribution) within a
margin declared with the family, at the family-corrected level.

Verdict words, used as written on the findings page: ``better`` / ``worse`` (Holm-adjusted p < 0.05,
by the sign of the estimate; a family of gaps rather than scores names its own words, e.g. ``higher`` /
``lower``), ``equivalent`` (TOST within the margin), both at once as ``lower, within ±m`` (a difference
resolved but smaller than the margin: not one that matters), ``inconclusive`` (neither: the data
cannot say).

The bootstrap is not allowed to be part of the noise: every contrast starts with :data:`DRAWS` draws
and, while its Holm-scaled p-value or a TOST bound is near its threshold, draws as many again (up to
:data:`MAX_DRAWS`): until the Monte Carlo standard error of a Holm p within :data:`NEAR` of alpha is
below :data:`MC_SE_TARGET`, and every decision is :data:`Z` Monte Carlo SEs from its threshold (one
still that close at :data:`MAX_DRAWS` takes the weaker word, and its row says so). The
table prints each Holm p with its Monte Carlo SE, so a reader sees how firm the last digit is. Each
contrast draws from its own stream, ``(seed, its index among the declared contrasts)``: another generator
seed gives independent draws, and the verdict words must not move with it (a test reruns every committed
family with 10 seeds); a contrast's draws do not change when another declared contrast's data land.

Holm and the TOST level count every declared contrast: one not run (no data yet, or too few seeds a
side) counts as p = 1, so a word read while some cells still run can only strengthen when they land, and
a contrast that loses its data never makes the correction of the others milder than declared.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

from dqnlab.statistics import (
    Draws,
    bootstrap_p_value,
    difference_draws,
    equivalent,
    holm_with_sources,
    iqm,
    p_value_mc_se,
)

ALPHA = 0.05
MIN_SEEDS = 3
"""Fewer seeds a side than this and a contrast is not tested: a bootstrap over one or two values is no
distribution (one seed against one gave 'better, Holm p 0.001')."""
DRAWS = 50_000
"""Bootstrap draws every contrast starts with."""
MAX_DRAWS = 6_400_000
"""The most draws a contrast takes (a contrast still undecided there says so in its row)."""
NEAR, MC_SE_TARGET, Z = 0.02, 0.002, 3.0
"""A Holm p within ``NEAR`` of alpha is drawn until its Monte Carlo SE is below ``MC_SE_TARGET``; any
decision (Holm p against alpha, a TOST bound against the margin) until it is ``Z`` MC SEs clear."""
_CHUNK = 200_000  # draws per call of a contrast's bootstrap (bounds the memory of one call)
_RECORDED: ContextVar[list | None] = ContextVar("recorded_families", default=None)


@contextmanager
def recorded_families() -> Iterator[list[Family]]:
    """Every :class:`Family` made inside the block, in order (how a test reaches all of a page's families)."""
    families: list[Family] = []
    token = _RECORDED.set(families)
    try:
        yield families
    finally:
        _RECORDED.reset(token)


def _draw(sample: Draws, rng: np.random.Generator, reps: int) -> np.ndarray:
    return np.concatenate([sample(rng, min(_CHUNK, reps - done)) for done in range(0, reps, _CHUNK)])


def _tost_undecided(draws: np.ndarray, margin: float, level: float) -> bool:
    """Whether the TOST decision could flip with more draws: no bound (the ``level`` and ``1 - level``
    quantiles) is clearly outside its margin, and one is within ``Z`` Monte Carlo SEs of it (the margin
    lies between the order statistics ``Z`` binomial SEs either side of the bound)."""
    s = np.sort(draws)
    n = s.size
    near = False
    for q, sign in ((level, -1.0), (1.0 - level, 1.0)):
        k, half = q * (n - 1), Z * math.sqrt(n * q * (1.0 - q))
        lo, hi = s[max(0, math.floor(k - half))], s[min(n - 1, math.ceil(k + half))]
        toward, away = (lo, hi) if sign < 0 else (hi, lo)  # the band's end on the margin's side, the other
        if sign * away >= margin:  # the band lies wholly outside: not equivalent, whatever the draws
            return False
        near = near or sign * toward >= margin
    return near


@dataclass
class Family:
    """The contrasts of one finding, declared before reading the data (``margin``: the equivalence
    margin, in the contrasts' units)."""

    name: str
    margin: float
    words: tuple[str, str] = ("better", "worse")
    """What a resolved positive / negative estimate is called."""
    seed: int = 0
    """The bootstrap generator's seed (each contrast draws from ``(seed, its declared index)``)."""
    draws: int = DRAWS
    max_draws: int = MAX_DRAWS
    rows: list[dict] = field(default_factory=list)
    _results: dict[int, list[dict]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if (recording := _RECORDED.get()) is not None:
            recording.append(self)

    def difference(self, label: str, x, y) -> None:
        """``IQM(x) - IQM(y)`` over the seeds with a score (skipped, and said so, when either side has no
        run). A seed without one (NaN: a hard-diverged run has no policy to score) is left out, and its row
        says how many were: an IQM of the survivors could otherwise flatter the side that diverged."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        unscored = (int(np.count_nonzero(~np.isfinite(x))), int(np.count_nonzero(~np.isfinite(y))))
        x, y = x[np.isfinite(x)], y[np.isfinite(y)]
        if not len(x) or not len(y):
            self.rows.append({"contrast": label, "missing": True})
            self._results.clear()
            return
        if min(len(x), len(y)) < MIN_SEEDS:
            self.rows.append({"contrast": label, "missing": True,
                              "reason": f"too few seeds ({len(x)} vs {len(y)}; a verdict needs {MIN_SEEDS} a side)"})
            self._results.clear()
            return
        self.add(label, iqm(x) - iqm(y), difference_draws(x, y, iqm))
        if any(unscored):
            self.rows[-1]["unscored"] = unscored

    def add(self, label: str, estimate: float, sample: Draws | np.ndarray, testable_equivalence: bool = True) -> None:
        """A contrast with its bootstrap (:data:`dqnlab.statistics.Draws`; a fixed array of draws, as a
        constructed test passes, is used as it is and never refined). A non-finite estimate is refused (its
        sign would be a word)."""
        if not math.isfinite(estimate):
            raise ValueError(f"{self.name}: contrast {label!r}: estimate {estimate}; allowed: a finite number")
        self.rows.append({"contrast": label, "estimate": estimate, "sample": sample,
                          "equivalence": testable_equivalence, "missing": False})  # fmt: skip
        self._results.clear()

    def results(self, seed: int | None = None) -> list[dict]:
        """Every contrast with ``low``/``high`` (95%, unadjusted), ``p``, ``p_holm`` and its Monte Carlo
        SE ``mc_se`` (0 where Holm caps it at 1), the ``draws`` it took, ``settled`` (False: a decision still
        within Z MC SEs of its threshold at :data:`MAX_DRAWS`, which then takes the weaker word: not
        resolved, not equivalent) and ``verdict``; from the generator ``seed`` (default: the family's)."""
        seed = self.seed if seed is None else seed
        if seed not in self._results:
            self._results[seed] = self._compute(seed)
        return self._results[seed]

    def _compute(self, seed: int) -> list[dict]:
        tested = [r for r in self.rows if not r["missing"]]
        m = max(len(self.rows), 1)  # every declared contrast; one not run counts as p = 1
        rngs = [np.random.default_rng([seed, i]) for i, r in enumerate(self.rows) if not r["missing"]]
        draws = [np.asarray(r["sample"], dtype=float) if isinstance(r["sample"], np.ndarray)
                 else _draw(r["sample"], rng, self.draws) for r, rng in zip(tested, rngs)]  # fmt: skip
        for r, d in zip(tested, draws):
            if not np.isfinite(d).all():
                raise ValueError(f"{self.name}: contrast {r['contrast']!r}: {np.count_nonzero(~np.isfinite(d))} of "
                                 f"{d.size} bootstrap draws not finite; allowed: finite draws (a cell without a "
                                 "finite seed is a contrast not run)")
        while True:
            p = np.array([bootstrap_p_value(d) for d in draws])
            adjusted, scaled, source = holm_with_sources(p, declared=m)
            se = np.array([min(m - int(np.sum(p < p[i])), m) * p_value_mc_se(p[i], d.size)
                           for i, d in enumerate(draws)])  # fmt: skip
            near_alpha = [abs(scaled[i] - ALPHA) < Z * se[i] or (abs(scaled[i] - ALPHA) < NEAR and se[i] > MC_SE_TARGET)
                          for i in range(len(tested))]  # fmt: skip
            near_margin = [r["equivalence"] and _tost_undecided(draws[i], self.margin, ALPHA / m)
                           for i, r in enumerate(tested)]  # fmt: skip
            grow = [i for i, r in enumerate(tested) if (near_alpha[i] or near_margin[i])
                    and not isinstance(r["sample"], np.ndarray) and draws[i].size < self.max_draws]  # fmt: skip
            if not grow:
                break
            for i in grow:
                draws[i] = np.concatenate([draws[i], _draw(tested[i]["sample"], rngs[i], draws[i].size)])
        out = []
        for i, r in enumerate(tested):
            j = source[i]  # the contrast whose scaled p this adjusted p is
            low, high = np.quantile(draws[i], [0.025, 0.975])
            # a decision still within Z MC SEs of its threshold at the most draws takes the weaker word
            resolved = adjusted[i] < ALPHA and not near_alpha[j]
            within = r["equivalence"] and equivalent(draws[i], self.margin, alpha=ALPHA / m) and not near_margin[i]
            word = self.words[0] if r["estimate"] > 0 else self.words[1]
            if resolved:
                verdict = f"{word}, within ±{self.margin:g}" if within else word
            elif within:
                verdict = "equivalent"
            else:
                verdict = "inconclusive"
            out.append({**r, "low": low, "high": high, "p": p[i], "p_holm": adjusted[i],
                        "mc_se": 0.0 if adjusted[i] >= 1.0 else se[j], "draws": draws[i].size,
                        "settled": not (near_alpha[j] or near_margin[i]), "verdict": verdict})  # fmt: skip
        return out + [r for r in self.rows if r["missing"]]

    def markdown(self, digits: int = 0) -> str:
        res = self.results()
        tested = sum(not r["missing"] for r in res)
        most = max((r["draws"] for r in res if not r["missing"]), default=0)
        short = tested < len(res)
        counted = (f"{tested} of {len(res)} contrasts run, Holm-corrected over all {len(res)}, a contrast not run "
                   "counting as p = 1" if short else f"{tested} contrasts, Holm-corrected")  # fmt: skip
        lines = [f"Family *{self.name}*: {counted} (alpha {ALPHA}); equivalence margin "
                 f"±{self.margin:g} (TOST at the corrected level); {self.draws:,} bootstrap draws a contrast, "
                 f"up to {most:,} near a threshold; Holm p with its Monte Carlo SE.", "",
                 "| contrast | estimate [95% CI] | p | Holm p (MC SE) | verdict |", "|---|---|---|---|---|"]  # fmt: skip
        for r in res:
            if r["missing"]:
                lines.append(f"| {r['contrast']} | — | — | — | {r.get('reason', 'not run')} |")
                continue
            flag = "" if r["settled"] else f" (at a threshold within {Z:g} MC SE after {r['draws']:,} draws)"
            if "unscored" in r:
                flag += " ({} vs {} seeds without a score left out)".format(*r["unscored"])
            lines.append(f"| {r['contrast']} | {r['estimate']:+.{digits}f} [{r['low']:.{digits}f}, {r['high']:.{digits}f}] "
                         f"| {r['p']:.3f} | {r['p_holm']:.3f} ({r['mc_se']:.4f}) | {r['verdict']}{flag} |")  # fmt: skip
        return "\n".join(lines)
