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
    """Per replica, policy lag (learner version at sampling minus acting version) and actor staleness
    (learner updates between acting version and insertion) of every sampled batch element, in updates."""

    def __init__(self, replicas: int = 1) -> None:
        self._win = np.zeros((replicas, 3))  # lag sum, staleness sum, count
        self._win_max = np.zeros(replicas, dtype=np.int64)
        self._run = np.zeros((replicas, 3))
        self._run_max = np.zeros(replicas, dtype=np.int64)

    def add(self, lag: np.ndarray, staleness: np.ndarray) -> None:
        """``lag``, ``staleness``: ``(K, B)``, one row per replica's batch."""
        sums = np.stack([lag.sum(axis=1), staleness.sum(axis=1), np.full(len(lag), lag.shape[1])], axis=1)
        self._win += sums
        self._run += sums
        m = lag.max(axis=1)
        np.maximum(self._win_max, m, out=self._win_max)
        np.maximum(self._run_max, m, out=self._run_max)

    def pop(self) -> list[dict[str, float]]:
        """Per replica, window and run metrics; starts a new window. Empty before the first sample."""
        out: list[dict[str, float]] = []
        for win, win_max, run, run_max in zip(self._win, self._win_max, self._run, self._run_max):
            m: dict[str, float] = {}
            if win[2]:
                m[POLICY_LAG_MEAN] = win[0] / win[2]
                m[POLICY_LAG_MAX] = float(win_max)
                m[ACTOR_STALENESS_MEAN] = win[1] / win[2]
            if run[2]:
                m[POLICY_LAG_RUN_MEAN] = run[0] / run[2]
                m[POLICY_LAG_RUN_MAX] = float(run_max)
                m[ACTOR_STALENESS_RUN_MEAN] = run[1] / run[2]
            out.append(m)
        self._win[:] = 0.0
        self._win_max[:] = 0
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
