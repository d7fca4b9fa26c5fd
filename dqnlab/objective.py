"""The value a run is scored by: its final greedy return (``eval``) or its throughput.

One definition, used by the sweep (Optuna's objective, the parent run's cells) and by analysis.
"""

from __future__ import annotations

import math

from dqnlab.metrics import ENV_STEPS_PER_S_TOTAL, EVAL_RETURN_MEAN

OBJECTIVES = ("eval", "throughput")


def objective_value(result, objective: str) -> float:
    """The trial's value for Optuna: -inf where the run has no final return (a hard-diverged run, a
    run without evaluations), so that Optuna records it as the worst COMPLETE trial, never as NaN
    (which Optuna would FAIL and the next invocation would rerun)."""
    if objective == "throughput":
        return float(result.final.get(ENV_STEPS_PER_S_TOTAL, 0.0))
    value = final_eval_return(result.history, result.status)
    return value if math.isfinite(value) else float("-inf")


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
