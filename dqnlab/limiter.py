"""The update-to-data rate limiter (Reverb's SampleToInsertRatio, counted in gradient updates).

With ``E`` env steps inserted (over all actors), ``U`` gradient updates done and the deficit
``d = utd * (E - learning_starts) - U``:

- the learner may take update ``U + 1`` only when ``U + 1 <= utd * (E - learning_starts) + slack``,
  i.e. ``d >= 1 - slack``;
- in ``strict`` mode an actor may claim its next ``n`` env steps only when ``d <= slack``, with ``E``
  counting the steps already claimed by other actors; so ``d <= slack + utd * n`` at all times.
  In ``free`` mode actors never wait and only the learner is bounded.

Both cannot block at once when ``slack >= 0.5`` (learner blocked: ``d < 1 - slack``; actors blocked:
``d > slack``). At the end of a strict run the learner drains to ``floor(utd * (E - learning_starts))``
updates, so the realised UTD equals ``utd`` up to one update.
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

    def deficit(self, env_steps: int, updates: int) -> float:
        """Updates owed to the data: ``utd * (env_steps - learning_starts) - updates``."""
        return self.utd * (env_steps - self.learning_starts) - updates

    def learner_may_update(self, env_steps: int, updates: int) -> bool:
        return env_steps >= self.learning_starts and self.deficit(env_steps, updates) >= 1.0 - self.slack

    def actor_may_claim(self, claimed_steps: int, updates: int) -> bool:
        return not self.strict or self.deficit(claimed_steps, updates) <= self.slack

    def final_updates(self, env_steps: int) -> int:
        """Updates a strict run owes once all ``env_steps`` are in: ``floor(utd * (E - L))``."""
        return max(0, math.floor(self.utd * (env_steps - self.learning_starts) + 1e-9))

    def max_deficit(self, steps_per_claim: int) -> float:
        """Bound on ``|d|`` in strict mode, in updates (reported with every run)."""
        return self.slack + self.utd * steps_per_claim


def realised_utd(updates: int, env_steps: int, learning_starts: int) -> float:
    """``updates / (env_steps - learning_starts)``; NaN before learning starts."""
    denom = env_steps - learning_starts
    return updates / denom if denom > 0 else float("nan")
