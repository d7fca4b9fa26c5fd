"""Statistics over seeds, as rliable defines them (Agarwal et al. 2021), on numpy.

Used per cell (one configuration, its seeds), never over runs of different configurations:
:func:`iqm` and :func:`bootstrap_ci` take the runs of one cell; :func:`stratified_bootstrap_ci`
takes one array per task (environment) of one configuration and resamples within each;
:func:`difference_ci` and :func:`probability_of_improvement` compare two configurations that differ
in one axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

Statistic = Callable[[np.ndarray], float]


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean: the mean of the middle 50% after cutting ``floor(n/4)`` values at each end
    (as ``scipy.stats.trim_mean(x, 0.25)``, rliable's IQM). NaN for no values."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    if x.size == 0:
        return float("nan")
    cut = int(0.25 * x.size)
    return float(x[cut : x.size - cut].mean())


def _iqm_rows(matrix: np.ndarray) -> np.ndarray:
    x = np.sort(matrix, axis=1)
    cut = int(0.25 * x.shape[1])
    return x[:, cut : x.shape[1] - cut].mean(axis=1)


def _rowwise(statistic: Statistic) -> Callable[[np.ndarray], np.ndarray]:
    """``statistic`` applied to every row of a 2-D array at once where a vectorised form is known (the
    same numbers as row by row: the same elements reduced in the same order), else row by row."""
    known = {iqm: _iqm_rows, np.mean: lambda m: m.mean(axis=1), np.median: lambda m: np.median(m, axis=1)}
    if statistic in known:
        return known[statistic]
    return lambda m: np.array([statistic(row) for row in m], dtype=np.float64)


def _resample(rng: np.random.Generator, groups: Sequence[np.ndarray], reps: int) -> np.ndarray:
    """``reps`` bootstrap draws of the concatenated ``groups`` (each resampled within itself), one per
    row, from the random stream a loop over draws and groups consumes (so every CI is the same as
    drawn one at a time; one group draws all its indices in one call, which numpy makes identical)."""
    groups = [g for g in groups if g.size]
    if len(groups) == 1 or len({g.size for g in groups}) == 1:
        n = groups[0].size
        idx = rng.integers(0, n, (reps, n * len(groups)))
        idx += np.repeat(np.arange(len(groups)) * n, n)  # group i's indices into the concatenation: one gather
        return np.concatenate(groups)[idx]
    rows = [np.concatenate([g[rng.integers(0, g.size, g.size)] for g in groups]) for _ in range(reps)]
    return np.stack(rows)


def _percentiles(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1.0 - confidence) / 2.0
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1.0 - alpha))


def stratified_bootstrap_ci(
    values_by_task: Sequence[Sequence[float]],
    statistic: Statistic = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(point, low, high)`` for one configuration over several tasks: the statistic of all its runs,
    and a percentile CI from resampling runs with replacement *within each task* (rliable's
    stratified bootstrap). With one task this is the plain percentile bootstrap over seeds."""
    tasks = [np.asarray(v, dtype=np.float64) for v in values_by_task if len(v)]
    if not tasks:
        return (float("nan"),) * 3
    point = statistic(np.concatenate(tasks))
    stats = _rowwise(statistic)(_resample(np.random.default_rng(seed), tasks, reps))
    return (point, *_percentiles(stats, confidence))


def bootstrap_ci(values: Sequence[float], statistic: Statistic = iqm, reps: int = 2000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:  # fmt: skip
    """``(point, low, high)`` over the seeds of one cell (a single stratum)."""
    return stratified_bootstrap_ci([values], statistic, reps, confidence, seed)


def difference_ci(
    x_by_task: Sequence[Sequence[float]],
    y_by_task: Sequence[Sequence[float]],
    statistic: Statistic = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``statistic(X) - statistic(Y)`` with a percentile CI; X and Y resampled independently, each
    within its tasks (task ``m`` of X is compared with task ``m`` of Y)."""
    xs = [np.asarray(v, dtype=np.float64) for v in x_by_task]
    ys = [np.asarray(v, dtype=np.float64) for v in y_by_task]
    if not any(len(v) for v in xs) or not any(len(v) for v in ys):
        return (float("nan"),) * 3
    point = statistic(np.concatenate(xs)) - statistic(np.concatenate(ys))
    xs, ys = [g for g in xs if g.size], [g for g in ys if g.size]
    both = _resample(np.random.default_rng(seed), xs + ys, reps)  # per draw: X's groups, then Y's
    split = sum(g.size for g in xs)
    stat = _rowwise(statistic)
    stats = stat(both[:, :split]) - stat(both[:, split:])
    return (point, *_percentiles(stats, confidence))


MIN_PILOT_SEEDS = 5
"""The fewest finite seeds a pilot cell must have for :func:`seeds_for_half_width` to plan from it."""


def seeds_for_half_width(pilot_cells: Sequence[Sequence[float]], half_width: float, confidence: float = 0.95,
                         statistic: Statistic = iqm, reps: int = 20_000, seed: int = 0) -> int:  # fmt: skip
    """Seeds each cell needs for the ``confidence`` CI of ``statistic`` (one pilot cell) or of the
    difference of two cells' statistics (two pilot cells) to be no wider than ``+-half_width``: each
    pilot cell's bootstrap half-width at its pilot seed count ``n_i`` falls as ``1/sqrt(n)``, and the
    half-widths of independent cells add in quadrature, so ``n = ceil(sum(hw_i^2 n_i) / half_width^2)``.
    A planning figure: the pilot's spread is itself estimated from few seeds, so a cell needs at least
    :data:`MIN_PILOT_SEEDS` (simulated, one normal cell: 3-seed pilots planned a median of 27 seeds where
    ~75 were needed, 5-seed pilots 70: the bootstrap of 3 values is narrow and their spread usually falls
    short of the true one)."""
    if half_width <= 0:
        raise ValueError(f"half_width: got {half_width}; allowed: > 0")
    cells = [np.asarray(c, dtype=np.float64) for c in pilot_cells]
    cells = [c[np.isfinite(c)] for c in cells]
    if not cells or any(c.size < MIN_PILOT_SEEDS for c in cells):
        raise ValueError(f"pilot_cells: got {[c.size for c in cells]} finite seeds; allowed: 1 or more cells, "
                         f">= {MIN_PILOT_SEEDS} each (a smaller pilot underestimates the seeds needed)")
    total = 0.0
    for c in cells:
        _, low, high = stratified_bootstrap_ci([c], statistic, reps, confidence, seed)
        total += ((high - low) / 2.0) ** 2 * c.size
    return max(3, math.ceil(total / half_width**2))


def _p_improvement(x_by_task: list[np.ndarray], y_by_task: list[np.ndarray]) -> float:
    per_task = []
    for x, y in zip(x_by_task, y_by_task):
        if x.size and y.size:
            greater = (x[:, None] > y[None, :]).mean()
            ties = (x[:, None] == y[None, :]).mean()
            per_task.append(greater + 0.5 * ties)
    return float(np.mean(per_task)) if per_task else float("nan")


def probability_of_improvement(
    x_by_task: Sequence[Sequence[float]],
    y_by_task: Sequence[Sequence[float]],
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``P(X > Y)`` as rliable defines it: per task the Mann-Whitney U statistic over all pairs of runs
    (``1`` if ``x > y``, ``0.5`` on a tie), averaged over tasks; with a stratified-bootstrap CI."""
    xs = [np.asarray(v, dtype=np.float64) for v in x_by_task]
    ys = [np.asarray(v, dtype=np.float64) for v in y_by_task]
    point = _p_improvement(xs, ys)
    if np.isnan(point):
        return (point, point, point)
    rng = np.random.default_rng(seed)

    def draw(groups: list[np.ndarray]) -> list[np.ndarray]:
        return [g[rng.integers(0, g.size, g.size)] if g.size else g for g in groups]

    stats = np.array([_p_improvement(draw(xs), draw(ys)) for _ in range(reps)])
    return (point, *_percentiles(stats, confidence))


# --- families of comparisons, equivalence, trends -------------------------------------------------------------
Draws = Callable[[np.random.Generator, int], np.ndarray]
"""A contrast's bootstrap: ``reps`` draws of its statistic from a generator. Called again on the same
generator it gives further draws of the same distribution (how a family adds draws near a threshold)."""


def difference_draws(x: Sequence[float], y: Sequence[float], statistic: Statistic = iqm) -> Draws:
    """Draws of ``statistic(x) - statistic(y)``, x and y resampled independently."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    stat = _rowwise(statistic)

    def draw(rng: np.random.Generator, reps: int) -> np.ndarray:
        if x.size == y.size:  # x's and y's indices alternate in the stream: one call draws both
            both = _resample(rng, [x, y], reps)
            return stat(both[:, : x.size]) - stat(both[:, x.size :])
        return stat(x[rng.integers(0, x.size, (reps, x.size))]) - stat(y[rng.integers(0, y.size, (reps, y.size))])

    return draw


def bootstrap_difference(x: Sequence[float], y: Sequence[float], statistic: Statistic = iqm, reps: int = 2000,
                         seed: int = 0) -> tuple[float, np.ndarray]:  # fmt: skip
    """``statistic(x) - statistic(y)`` and ``reps`` bootstrap draws of it (x and y resampled independently)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return statistic(x) - statistic(y), difference_draws(x, y, statistic)(np.random.default_rng(seed), reps)


def bootstrap_p_value(draws: np.ndarray, null: float = 0.0) -> float:
    """Two-sided percentile-bootstrap p-value of ``statistic == null``: twice the smaller tail of the
    bootstrap distribution beyond ``null`` (at least ``1 / reps``: a bootstrap cannot say less). A draw
    that is not finite is refused: it would count in neither tail, and the p-value would shrink with it."""
    draws = np.asarray(draws, dtype=np.float64)
    bad = int(np.count_nonzero(~np.isfinite(draws)))
    if bad or not draws.size:
        raise ValueError(f"draws: got {bad} non-finite of {draws.size}; allowed: one or more, all finite "
                         "(a statistic of an empty or NaN cell has no p-value)")
    tail = min(float((draws <= null).mean()), float((draws >= null).mean()))
    return float(min(1.0, max(2.0 * tail, 1.0 / draws.size)))


def p_value_mc_se(p: float, reps: int) -> float:
    """The Monte Carlo standard error of a two-sided bootstrap p-value from ``reps`` draws: ``p`` is twice
    a tail share ``t``, a binomial proportion, so its SE is ``2 sqrt(t (1 - t) / reps)`` (at least that of
    one draw in the tail: a p at its floor is not known to be 0)."""
    t = min(max(p / 2.0, 1.0 / reps), 0.5)
    return float(2.0 * math.sqrt(t * (1.0 - t) / reps))


def holm_with_sources(p_values: Sequence[float], declared: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(adjusted, scaled, source)`` of one family: Holm's adjusted p-values (Holm 1979), each contrast's
    own ``(m - rank) p`` (capped at 1) and, for each contrast, the index of the contrast whose scaled p
    its adjusted p is (the running maximum's argument: the one whose Monte Carlo error it carries).
    ``m`` is ``declared`` where the family declared more contrasts than ``p_values`` holds: those not run
    count as p = 1 (they rank last), so an adjusted p can only fall when they land."""
    p = np.asarray(p_values, dtype=np.float64)
    m = max(p.size, declared)
    order = np.argsort(p, kind="stable")
    scaled, adjusted, source = np.empty(p.size), np.empty(p.size), np.empty(p.size, dtype=int)
    best, best_at = -1.0, -1
    for i, k in enumerate(order):
        scaled[k] = min(1.0, (m - i) * p[k])
        if scaled[k] > best:
            best, best_at = scaled[k], k
        adjusted[k], source[k] = best, best_at
    return adjusted, scaled, source


def holm(p_values: Sequence[float], declared: int = 0) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (Holm 1979) of one family: the i-th smallest p times ``m - i``
    (``i`` from 0), made monotone and capped at 1. Reject where the adjusted p is below alpha: the
    family-wise error rate is then at most alpha, whatever the dependence between the tests. ``declared``:
    see :func:`holm_with_sources`."""
    return holm_with_sources(p_values, declared)[0]


def fisher_exact(hits_x: int, n_x: int, hits_y: int, n_y: int) -> float:
    """Two-sided Fisher exact p-value that two groups share one rate (``hits_x`` of ``n_x`` vs ``hits_y``
    of ``n_y``): with the margins fixed, the total probability of the tables no more likely than the
    observed one (hypergeometric). For counts of seeds, where a bootstrap of 0/10 has no spread."""
    if not (0 <= hits_x <= n_x and 0 <= hits_y <= n_y):
        raise ValueError(f"hits must lie in 0..n, got {hits_x}/{n_x} and {hits_y}/{n_y}")
    hits, n = hits_x + hits_y, n_x + n_y
    total = math.comb(n, hits)

    def probability(k: int) -> float:
        return math.comb(n_x, k) * math.comb(n_y, hits - k) / total

    observed = probability(hits_x)
    ks = range(max(0, hits - n_y), min(n_x, hits) + 1)
    return float(min(1.0, sum(q for q in map(probability, ks) if q <= observed * (1 + 1e-9))))


def equivalent(draws: np.ndarray, margin: float, alpha: float = 0.05) -> bool:
    """Two one-sided tests (TOST, Schuirmann 1987) on a bootstrap distribution of a difference: the
    difference is within ``+-margin`` when its ``1 - 2 alpha`` percentile interval lies inside it (pass
    ``alpha / m`` for a family of m)."""
    low, high = np.quantile(np.asarray(draws, dtype=np.float64), [alpha, 1.0 - alpha])
    return bool(-margin < low and high < margin)


def area_under_curve(steps: Sequence[float], values: Sequence[float]) -> float:
    """The trapezoidal area under a learning curve divided by its span: the mean return over the run
    (one evaluation: its value)."""
    s, v = np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if s.size == 0:
        return float("nan")
    if s.size == 1 or s[-1] == s[0]:
        return float(v.mean())
    return float(np.sum((v[1:] + v[:-1]) / 2.0 * np.diff(s)) / (s[-1] - s[0]))


def trend_draws(xs: Sequence[float], cells: Sequence[Sequence[float]], statistic: Statistic = iqm) -> Draws:
    """Draws of the least-squares slope of ``statistic(cell)`` against ``xs`` (each cell's seeds resampled
    on their own: cells are never pooled). Every cell needs a seed: an empty one has no statistic (and
    would shift the others' columns), so it is refused."""
    x = np.asarray(xs, dtype=np.float64)
    groups = [np.asarray(c, dtype=np.float64) for c in cells]
    if len(groups) != x.size or any(not g.size for g in groups):
        raise ValueError(f"cells: got {[g.size for g in groups]} seeds for {x.size} x values; allowed: one cell "
                         "per x, each with at least one seed")
    xc = x - x.mean()
    ends = np.cumsum([g.size for g in groups])
    stat = _rowwise(statistic)

    def draw(rng: np.random.Generator, reps: int) -> np.ndarray:
        drawn = _resample(rng, groups, reps)  # per draw: every cell, in order
        per_cell = np.stack([stat(drawn[:, end - g.size : end]) for g, end in zip(groups, ends)], axis=1)
        centred = per_cell - per_cell.mean(axis=1, keepdims=True)
        return np.sum(xc * centred, axis=1) / np.sum(xc * xc)

    return draw


def trend_slope(xs: Sequence[float], cells: Sequence[Sequence[float]], statistic: Statistic = iqm) -> float:
    """The least-squares slope of ``statistic(cell)`` against ``xs`` (one x per cell, e.g. log2 UTD)."""
    xc = np.asarray(xs, dtype=np.float64) - np.mean(xs)
    points = np.array([statistic(np.asarray(c, dtype=np.float64)) for c in cells])
    return float(np.sum(xc * (points - points.mean())) / np.sum(xc * xc))


def trend(xs: Sequence[float], cells: Sequence[Sequence[float]], statistic: Statistic = iqm, reps: int = 2000,
          seed: int = 0) -> tuple[float, np.ndarray]:  # fmt: skip
    """:func:`trend_slope` and ``reps`` bootstrap draws of it (:func:`trend_draws`)."""
    return trend_slope(xs, cells, statistic), trend_draws(xs, cells, statistic)(np.random.default_rng(seed), reps)
