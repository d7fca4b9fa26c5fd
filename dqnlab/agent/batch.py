"""A minibatch of transitions as the learner consumes it, with the tags the engine measures by."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Batch:
    """Arrays of one batch, ``B`` rows each (a leading replica axis where the replay has one).

    ``terminated`` stops bootstrapping (a truncated transition bootstraps like any other, so the
    learner never needs ``truncated``); ``worker`` produced the row, ``version`` is the parameter
    version that chose its action, ``insert_updates`` the learner's updates when it was inserted."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    worker: np.ndarray
    version: np.ndarray
    insert_updates: np.ndarray

    def learner_arrays(self) -> tuple[np.ndarray, ...]:
        """What the learner's gradient step reads, in its argument order: obs, actions, rewards,
        next_obs, terminated."""
        return self.obs, self.actions, self.rewards, self.next_obs, self.terminated
