"""Aggregate statistics over seeds (rliable's method on numpy) and the DESIGN.md collapse label."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dqnlab.sweep import final_eval_return

COLLAPSE_LABELS = ("diverged", "performance_collapse", "rank_collapse", "healthy")


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean: the mean of the middle 50% after cutting ``floor(n/4)`` values at each end
    (as ``scipy.stats.trim_mean(x, 0.25)``, rliable's IQM)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    if x.size == 0:
        return float("nan")
    cut = int(0.25 * x.size)
    return float(x[cut : x.size - cut].mean())


def stratified_bootstrap_ci(
    values_by_task: Sequence[Sequence[float]],
    statistic=iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(point, low, high)``: the statistic over all runs pooled, and a percentile CI from resampling
    runs with replacement *within each task* (stratified bootstrap, Agarwal et al. 2021)."""
    tasks = [np.asarray(v, dtype=np.float64) for v in values_by_task if len(v)]
    if not tasks:
        return (float("nan"),) * 3
    point = statistic(np.concatenate(tasks))
    rng = np.random.default_rng(seed)
    stats = np.empty(reps)
    for r in range(reps):
        stats[r] = statistic(np.concatenate([t[rng.integers(0, t.size, t.size)] for t in tasks]))
    alpha = (1.0 - confidence) / 2.0
    return point, float(np.quantile(stats, alpha)), float(np.quantile(stats, 1.0 - alpha))


def collapse_label(history: Sequence[dict[str, float]], status: str | None = None) -> str:
    """DESIGN.md outcome of one run, in this order: ``diverged`` (soft or hard divergence at any log
    point, or status diverged), ``performance_collapse`` (final eval return below half of its best,
    the best reached before the end), ``rank_collapse`` (final srank below half of the first one
    logged), else ``healthy``."""
    if status == "diverged" or any(
        m.get("soft_divergence", 0.0) >= 1.0 or m.get("hard_divergence", 0.0) >= 1.0 for m in history
    ):
        return "diverged"
    evals = [m["eval_return_mean"] for m in history if "eval_return_mean" in m]
    if len(evals) >= 2:
        best = max(evals[:-1])
        if best > 0 and evals[-1] < 0.5 * best:
            return "performance_collapse"
    sranks = [m["srank"] for m in history if "srank" in m and not math.isnan(m["srank"])]
    if len(sranks) >= 2 and sranks[-1] < 0.5 * sranks[0]:
        return "rank_collapse"
    return "healthy"


def final_return(history: Sequence[dict[str, float]]) -> float:
    """The sweep objective: mean greedy eval return over the last quarter of the evaluations."""
    return final_eval_return(list(history))
