"""Statistics over seeds (re-exported from :mod:`dqnlab.statistics`) and the collapse label of docs/design.md."""

from __future__ import annotations

import math
from collections.abc import Sequence

from dqnlab.metrics import EVAL_RETURN_MEAN, HARD_DIVERGENCE, Q_LIMIT, SOFT_DIVERGENCE, SRANK, SRANK_CURRENT
from dqnlab.objective import final_eval_return
from dqnlab.statistics import (
    bootstrap_ci,
    difference_ci,
    iqm,
    probability_of_improvement,
    stratified_bootstrap_ci,
)

COLLAPSE_LABELS = ("diverged", "performance_collapse", "rank_collapse", "healthy")

__all__ = [
    "COLLAPSE_LABELS",
    "bootstrap_ci",
    "collapse_label",
    "soft_divergence_checks",
    "difference_ci",
    "final_return",
    "iqm",
    "probability_of_improvement",
    "stratified_bootstrap_ci",
]


def soft_divergence_checks(history: Sequence[dict[str, float]]) -> tuple[bool, bool]:
    """``(at any check, at the last check)``: whether max |Q| was beyond what the env can pay at any of
    the run's soft-divergence checks (van Hasselt et al. count a run that ever got there), and at its
    last one (the run ended there: an overshoot that came back is transient)."""
    checks = [m[SOFT_DIVERGENCE] >= 1.0 for m in history if SOFT_DIVERGENCE in m]
    return any(checks), bool(checks and checks[-1])


def collapse_label(history: Sequence[dict[str, float]], status: str | None = None) -> str:
    """The outcome of one run (docs/design.md: collapse label), in this order:

    - ``diverged``: hard divergence (NaN/inf; status ``diverged``), or soft divergence at the run's
      last check: it ended with max |Q| beyond what the env can pay (a transient overshoot that came
      back is reported apart, :func:`soft_divergence_checks`, and is not the run's outcome);
    - ``performance_collapse``: the final eval return fell from the run's best (reached before the
      end) by more than half of the run's own return range (best minus worst eval return). Defined on
      the run's own scale, so it works for negative rewards (Acrobot, MountainCar) as for positive;
    - ``rank_collapse``: final srank below half of the first one logged (on current replay data where the
      run measured it, else on the fixed probe);
    - else ``healthy``.

    Soft divergence is read as the run recorded it: runs since the current-data diagnostics check it at
    every evaluation and at the end against ``q_limit`` (a schedule in env steps); older runs (no
    ``q_limit``) checked max |Q| on the probe against ``R_max / (1 - gamma)`` at every log point, and
    any such check labels them, as they were reported."""
    hard = status == "diverged" or any(m.get(HARD_DIVERGENCE, 0.0) >= 1.0 for m in history)
    at_any, at_end = soft_divergence_checks(history)
    old_style = not any(Q_LIMIT in m for m in history)
    if hard or at_end or (old_style and at_any):
        return "diverged"
    evals = [m[EVAL_RETURN_MEAN] for m in history if EVAL_RETURN_MEAN in m]
    if len(evals) >= 2:
        best, worst = max(evals[:-1]), min(evals)
        spread = best - worst
        if spread > 0 and best - evals[-1] > 0.5 * spread:
            return "performance_collapse"
    name = SRANK_CURRENT if any(SRANK_CURRENT in m for m in history) else SRANK
    sranks = [m[name] for m in history if name in m and not math.isnan(m[name])]
    if len(sranks) >= 2 and sranks[-1] < 0.5 * sranks[0]:
        return "rank_collapse"
    return "healthy"


def final_return(history: Sequence[dict[str, float]], status: str | None = None) -> float:
    """The sweep objective: mean greedy eval return over the last quarter of the evaluations; NaN for
    a run without evaluations or a hard-diverged one (:func:`dqnlab.objective.final_eval_return`)."""
    return final_eval_return(list(history), status)
