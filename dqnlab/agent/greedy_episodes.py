"""Greedy evaluation episodes and the overestimation they measure (learner process).

Never called on non-finite weights: the engine checks them first (an argmax over NaN would pick
action 0 and its return would be recorded as the policy's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import gymnasium as gym
import numpy as np

from dqnlab.agent.diagnostics import overestimation
from dqnlab.metrics import EVAL_LENGTH_MEAN, EVAL_RETURN_MEAN, EVAL_RETURN_MIN, EVAL_RETURN_STD, OVERESTIMATION


class QFunction(Protocol):
    def q_values(self, obs: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class EvalResult:
    returns: list[float]
    lengths: list[int]
    overestimation: float
    """Mean over episodes of mean_t (max_a Q(s_t,.) - G_t), G_t bootstrapped at truncations."""

    def metrics(self) -> dict[str, float]:
        r = np.asarray(self.returns)
        return {
            EVAL_RETURN_MEAN: float(r.mean()),
            EVAL_RETURN_STD: float(r.std()),
            EVAL_RETURN_MIN: float(r.min()),
            EVAL_LENGTH_MEAN: float(np.mean(self.lengths)),
            OVERESTIMATION: self.overestimation,
        }


def evaluate(policy: QFunction, env: gym.Env, episodes: int, gamma: float, seed: int) -> EvalResult:
    """Run ``episodes`` greedy episodes (epsilon 0) with ``policy``; seeds ``seed, seed+1, ...``.

    Overestimation per episode follows :func:`dqnlab.diagnostics.overestimation`: an episode cut by
    the time limit is bootstrapped with ``max_a Q`` of the state at the cut."""
    returns, lengths, over = [], [], []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        q_greedy, rewards = [], []
        term = trunc = False
        while not (term or trunc):
            q = policy.q_values(np.asarray(obs, dtype=np.float32).reshape(1, -1))[0]
            q_greedy.append(float(q.max()))
            obs, r, term, trunc, _ = env.step(int(q.argmax()))
            rewards.append(float(r))
        tail = 0.0
        if trunc and not term:
            tail = float(policy.q_values(np.asarray(obs, dtype=np.float32).reshape(1, -1))[0].max())
        returns.append(float(sum(rewards)))
        lengths.append(len(rewards))
        over.append(overestimation(np.asarray(q_greedy), np.asarray(rewards), gamma, tail))
    return EvalResult(returns, lengths, float(np.mean(over)))
