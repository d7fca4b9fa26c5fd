"""The learner's side of the replay: what it draws and what it writes back. Per replica its own
generator; with prioritized replay (Schaul et al. 2016) the importance-sampling exponent annealed over
the budget, and after each update the drawn slots' new priorities, their |TD errors|."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dqnlab.agent.batch import Batch
from dqnlab.agent.learner import Learner
from dqnlab.config import Config
from dqnlab.engine.replay import SharedReplay


def annealed_beta(beta0: float, env_steps: int, total_env_steps: int) -> float:
    """``beta0`` annealed linearly to 1 over the env-step budget (Schaul et al.), 1 from then on. Counted
    from env step 0, not from ``learning_starts``: the first update already draws with
    ``beta0 + (1 - beta0) L / T`` (0.412 with the defaults); kept so, as findings 2b and 4c ran it."""
    return beta0 + (1.0 - beta0) * min(1.0, env_steps / total_env_steps)


class Sampler:
    """Draws each replica's batch with that replica's generator (``rngs``) and, for prioritized replay,
    writes the new priorities back. ``health_check`` is called while a lock is awaited (a peer killed
    holding it fails the run instead of hanging it)."""

    def __init__(self, replay: SharedReplay, config: Config, rngs: list[np.random.Generator],
                 health_check: Callable[[], None] | None = None):  # fmt: skip
        self.replay, self.rngs, self.health_check = replay, rngs, health_check
        self.batch_size = config.agent.batch_size
        self.beta0, self.total_env_steps = config.agent.priority_beta, config.run.total_env_steps

    def draw(self, env_steps: int) -> Batch:
        """One batch per replica; prioritized: weighted with the exponent annealed to ``env_steps``."""
        beta = annealed_beta(self.beta0, env_steps, self.total_env_steps)
        return self.replay.sample(self.rngs, self.batch_size, self.health_check, beta=beta)

    def learned_from(self, batch: Batch, learner: Learner) -> None:
        """After ``learner``'s update on ``batch``: prioritized replay's drawn slots take their |TD errors|
        (a slot overwritten since the draw keeps its new transition's). Uniform replay: nothing (the TD
        errors are not even computed)."""
        if batch.weights is not None:
            td_errors = learner.last_td_errors.cpu().numpy()
            self.replay.update_priorities(batch.slots, batch.seq, td_errors, self.health_check)
