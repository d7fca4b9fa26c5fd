"""The update-to-data rate limiter (Reverb's SampleToInsertRatio, counted in gradient updates).

With ``E`` env steps inserted (over all actors), ``U`` gradient updates done and the deficit
``d = utd * (E - learning_starts) - U``:

- the learner may take update ``U + 1`` only when ``U + 1 <= utd * (E - learning_starts) + slack``,
  i.e. ``d >= 1 - slack``, and never beyond ``max_updates`` (the run's owed total,
  ``floor(utd * (total_env_steps - learning_starts))``);
- in ``strict`` mode an actor may claim its next ``n`` env steps only when ``d <= slack``, with ``E``
  counting the steps already claimed by other actors, or once the learner has done ``max_updates``
  (nothing is left to wait for). In ``free`` mode actors never wait and only the learner is bounded.

Both cannot block at once when ``slack >= 0.5`` (learner blocked: ``d < 1 - slack`` or
``U = max_updates``; actors blocked: ``d > slack`` and ``U < max_updates``). Hence, in strict mode,
``-slack <= d <= max(slack + utd * n, 1)`` at every moment (the 1: once ``U = max_updates`` the last
claims add less than one owed update), and a strict run ends with exactly
``U = floor(utd * (E - learning_starts))`` updates, whatever the slack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RateLimiter:
    utd: float
    learning_starts: int
    slack: float
    strict: bool
    max_updates: float = math.inf
    """Updates the run owes in total (``final_updates(total_env_steps)``); the learner stops there."""

    def deficit(self, env_steps: int, updates: int) -> float:
        """Updates owed to the data: ``utd * (env_steps - learning_starts) - updates``."""
        return self.utd * (env_steps - self.learning_starts) - updates

    def learner_may_update(self, env_steps: int, updates: int) -> bool:
        return (
            env_steps >= self.learning_starts
            and updates < self.max_updates
            and self.deficit(env_steps, updates) >= 1.0 - self.slack
        )

    def actor_may_claim(self, claimed_steps: int, updates: int) -> bool:
        return not self.strict or updates >= self.max_updates or self.deficit(claimed_steps, updates) <= self.slack

    def final_updates(self, env_steps: int) -> int:
        """Updates a strict run owes once all ``env_steps`` are in: ``floor(utd * (E - L))``."""
        return max(0, math.floor(self.utd * (env_steps - self.learning_starts) + 1e-9))

    def for_budget(self, total_env_steps: int) -> RateLimiter:
        """This limiter with ``max_updates`` set to what a run of ``total_env_steps`` owes."""
        return RateLimiter(self.utd, self.learning_starts, self.slack, self.strict, self.final_updates(total_env_steps))

    def max_deficit(self, steps_per_claim: int) -> float:
        """Bound on ``|d|`` in strict mode, in updates (reported with every run)."""
        return max(self.slack + self.utd * steps_per_claim, 1.0)


def realised_utd(updates: int, env_steps: int, learning_starts: int) -> float:
    """``updates / (env_steps - learning_starts)``; NaN before learning starts."""
    denom = env_steps - learning_starts
    return updates / denom if denom > 0 else float("nan")
