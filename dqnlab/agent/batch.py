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
    weights: np.ndarray | None = None
    """Prioritized replay: each row's importance-sampling weight (the loss is weighted by it); None: uniform."""
    slots: np.ndarray | None = None
    """The ring slots drawn (prioritized replay updates their priorities after the update)."""
    seq: np.ndarray | None = None
    """The drawn transitions' sequence numbers (a slot overwritten since is not re-prioritized)."""

    def learner_arrays(self) -> tuple[np.ndarray, ...]:
        """What the learner's gradient step reads, in its argument order: obs, actions, rewards,
        next_obs, terminated."""
        return self.obs, self.actions, self.rewards, self.next_obs, self.terminated
