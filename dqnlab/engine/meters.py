"""Meters the learner loop feeds and the log points read: policy lag and throughput.

Each meter reports both the window since the previous log point and the whole run, so that a
summary never describes only the last window.
"""

from __future__ import annotations

import numpy as np

from dqnlab.metrics import (
    ACTOR_STALENESS_MEAN,
    ACTOR_STALENESS_RUN_MEAN,
    ENV_STEPS_PER_S,
    ENV_STEPS_PER_S_TOTAL,
    POLICY_LAG_MAX,
    POLICY_LAG_MEAN,
    POLICY_LAG_RUN_MAX,
    POLICY_LAG_RUN_MEAN,
    UPDATES_PER_S,
    UPDATES_PER_S_TOTAL,
)


class LagMeter:
    """Policy lag (learner version at sampling minus acting version) and actor staleness (learner
    updates between acting version and insertion) of every sampled batch element, in updates."""

    def __init__(self) -> None:
        self._win = np.zeros(3)  # lag sum, staleness sum, count
        self._win_max = 0
        self._run = np.zeros(3)
        self._run_max = 0

    def add(self, lag: np.ndarray, staleness: np.ndarray) -> None:
        sums = (float(lag.sum()), float(staleness.sum()), len(lag))
        self._win += sums
        self._run += sums
        m = int(lag.max())
        self._win_max = max(self._win_max, m)
        self._run_max = max(self._run_max, m)

    def pop(self) -> dict[str, float]:
        """Window and run metrics; starts a new window. Empty before the first sample."""
        out: dict[str, float] = {}
        if self._win[2]:
            out[POLICY_LAG_MEAN] = self._win[0] / self._win[2]
            out[POLICY_LAG_MAX] = float(self._win_max)
            out[ACTOR_STALENESS_MEAN] = self._win[1] / self._win[2]
        if self._run[2]:
            out[POLICY_LAG_RUN_MEAN] = self._run[0] / self._run[2]
            out[POLICY_LAG_RUN_MAX] = float(self._run_max)
            out[ACTOR_STALENESS_RUN_MEAN] = self._run[1] / self._run[2]
        self._win[:] = 0.0
        self._win_max = 0
        return out


class ThroughputMeter:
    """Env steps/s and updates/s since the previous log point and since the start (seconds)."""

    def __init__(self) -> None:
        self._last = (0.0, 0, 0)

    def pop(self, elapsed_s: float, env_steps: int, updates: int) -> dict[str, float]:
        t0, e0, u0 = self._last
        dt = max(elapsed_s - t0, 1e-9)
        self._last = (elapsed_s, env_steps, updates)
        total_s = max(elapsed_s, 1e-9)
        return {
            ENV_STEPS_PER_S: (env_steps - e0) / dt,
            UPDATES_PER_S: (updates - u0) / dt,
            ENV_STEPS_PER_S_TOTAL: env_steps / total_s,
            UPDATES_PER_S_TOTAL: updates / total_s,
        }
