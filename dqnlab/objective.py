"""The value a run is scored by: its final greedy return (``eval``) or its throughput.

One definition, used by the sweep (Optuna's objective, the parent run's cells) and by analysis.
"""

from __future__ import annotations

import math

from dqnlab.metrics import ENV_STEPS_PER_S_TOTAL, EVAL_RETURN_MEAN
from dqnlab.statistics import iqm

OBJECTIVES = ("eval", "throughput")
MISSING_SCORE = float("nan")
"""A run without a score (hard-diverged: no policy; or no evaluation): NaN everywhere, in the
objective of its MLflow run, the trial's ``seed_values``, the sweep summary and analysis. Only
Optuna cannot take it (a NaN value FAILs a trial, which the next invocation would rerun):
:func:`optuna_value` is the one place that maps it (to -inf, the worst COMPLETE trial)."""


def replica_values(result, objective: str) -> list[float]:
    """Each replica's score: its final return (``eval``; :data:`MISSING_SCORE` without one) or the run's
    env steps/s."""
    if objective == "throughput":
        if len(result.replicas) != 1:  # the sweep refuses this before any run (dqnlab.study.spec)
            raise ValueError("throughput: one measurement per run, not per replica; run one replica per seed")
        return [float(result.replicas[0].final.get(ENV_STEPS_PER_S_TOTAL, 0.0))]
    return [final_eval_return(r.history, r.status) for r in result.replicas]


def objective_value(result, objective: str) -> float:
    """A trial's score: the IQM over its replicas' scores that are finite; :data:`MISSING_SCORE` where
    none is (every replica hard-diverged, or no evaluation)."""
    finite = [v for v in replica_values(result, objective) if math.isfinite(v)]
    return iqm(finite) if finite else MISSING_SCORE


def optuna_value(score: float) -> float:
    """What Optuna records for ``score``: the score, or -inf for a missing one, so that Optuna keeps the
    trial as the worst COMPLETE one (it FAILs a trial whose value is NaN)."""
    return score if math.isfinite(score) else float("-inf")


def final_eval_return(history: list[dict[str, float]], status: str | None = None) -> float:
    """A run's final return: the mean greedy eval return over the last quarter of its evaluations (at
    least one). NaN when it has none, and NaN for a hard-diverged run (status ``diverged``): its
    weights are NaN/inf, so it has no policy to score; the evaluations it made before diverging
    describe an earlier network, not the run's outcome. Analysis counts such runs as ``diverged``."""
    if status == "diverged":
        return float("nan")
    evals = [m[EVAL_RETURN_MEAN] for m in history if EVAL_RETURN_MEAN in m]
    if not evals:
        return float("nan")
    tail = evals[-max(1, len(evals) // 4) :]
    return sum(tail) / len(tail)
