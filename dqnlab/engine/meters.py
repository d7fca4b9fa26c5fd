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
    (learner updates between acting version and insertion) of every sampled batch element, in updates.

    Fed once per update, so it keeps only what the means and maxima need (integer sums, exact): the
    window's sums, folded into the run's at each :meth:`pop`."""

    def __init__(self, replicas: int = 1) -> None:
        self._win_lag = np.zeros(replicas, dtype=np.int64)  # sums over the window's batch elements
        self._win_stale = np.zeros(replicas, dtype=np.int64)
        self._win_max = np.zeros(replicas, dtype=np.int64)
        self._win_count = 0  # batch elements per replica (every replica draws the same batch size)
        self._run_lag = np.zeros(replicas, dtype=np.int64)
        self._run_stale = np.zeros(replicas, dtype=np.int64)
        self._run_max = np.zeros(replicas, dtype=np.int64)
        self._run_count = 0

    def add(self, updates: int, version: np.ndarray, insert_updates: np.ndarray) -> None:
        """One batch per replica, sampled when the learner had made ``updates`` updates: ``version``
        (the acting versions) and ``insert_updates`` ``(K, B)``. An element's lag is
        ``updates - version``, its staleness ``insert_updates - version``."""
        batch = version.shape[1]
        version_sum = version.sum(axis=1)
        self._win_lag += updates * batch - version_sum
        self._win_stale += insert_updates.sum(axis=1) - version_sum
        np.maximum(self._win_max, updates - version.min(axis=1), out=self._win_max)
        self._win_count += batch

    def pop(self) -> list[dict[str, float]]:
        """Per replica, window and run metrics; starts a new window. Empty before the first sample."""
        self._run_lag += self._win_lag
        self._run_stale += self._win_stale
        np.maximum(self._run_max, self._win_max, out=self._run_max)
        self._run_count += self._win_count
        out: list[dict[str, float]] = []
        win, run = self._win_count, self._run_count
        for k in range(len(self._win_lag)):
            m: dict[str, float] = {}
            if win:
                m[POLICY_LAG_MEAN] = float(self._win_lag[k]) / win
                m[POLICY_LAG_MAX] = float(self._win_max[k])
                m[ACTOR_STALENESS_MEAN] = float(self._win_stale[k]) / win
            if run:
                m[POLICY_LAG_RUN_MEAN] = float(self._run_lag[k]) / run
                m[POLICY_LAG_RUN_MAX] = float(self._run_max[k])
                m[ACTOR_STALENESS_RUN_MEAN] = float(self._run_stale[k]) / run
            out.append(m)
        self._win_lag[:] = 0
        self._win_stale[:] = 0
        self._win_max[:] = 0
        self._win_count = 0
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
