"""When the target network is updated and when a reset happens: periodic schedules counted in
gradient updates or in env steps (DESIGN: schedule unit). Pure bookkeeping, no tensors.

A period fixed in updates fires ``utd`` times more often per env step at a higher UTD; a period
fixed in env steps fires as often per env step at every UTD (CleanRL, SB3, SR-SPR and BBF count env
steps). The learner asks :meth:`Periodic.due` once after each update, with the updates done and the
env steps inserted at that moment.
"""

from __future__ import annotations

import math

from dqnlab.config import ScheduleUnit


class Periodic:
    """Fires after update ``u`` when ``u`` is a multiple of ``period`` (unit ``updates``), or once at the
    first update after each multiple of ``period`` env steps (unit ``env_steps``; multiples passed
    between two updates fire once, multiples up to ``learning_starts`` never: no update had been made).
    With ``stop_after_steps`` > 0 it no longer fires once the run has made more env steps than that."""

    def __init__(self, period: int, unit: ScheduleUnit, learning_starts: int, stop_after_steps: int = 0):
        if unit not in ("updates", "env_steps"):
            raise ValueError(f"unit: got {unit!r}; allowed: 'updates', 'env_steps'")
        self.period, self.unit, self.stop_after_steps = period, unit, stop_after_steps
        self._mark = learning_starts // period  # env-step multiples already passed when learning starts
        self.fired = 0

    def due(self, updates: int, env_steps: int) -> bool:
        if self.unit == "updates":
            hit = updates % self.period == 0
        else:
            mark = env_steps // self.period
            hit, self._mark = mark > self._mark, max(mark, self._mark)
        if hit and self.stop_after_steps and env_steps > self.stop_after_steps:
            return False
        self.fired += hit
        return hit


class PolyakClock:
    """The Polyak coefficient for the target update after an update: ``tau`` per update (unit
    ``updates``), or ``1 - (1 - tau)^n`` with ``n`` the env steps since the previous target update
    (unit ``env_steps``: ``tau`` applied once per env step, the online parameters held fixed between
    updates); 0 when no env step was made since."""

    def __init__(self, tau: float, unit: ScheduleUnit, learning_starts: int):
        self.tau, self.unit, self._last = tau, unit, learning_starts

    def weight(self, env_steps: int) -> float:
        if self.unit == "updates":
            return self.tau
        n, self._last = max(env_steps - self._last, 0), max(env_steps, self._last)
        return 1.0 - math.pow(1.0 - self.tau, n)
