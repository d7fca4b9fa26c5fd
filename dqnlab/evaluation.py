"""Greedy evaluation episodes and the overestimation they measure (learner process)."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from dqnlab.diagnostics import overestimation
from dqnlab.networks import NumpyQ


@dataclass(frozen=True)
class EvalResult:
    returns: list[float]
    lengths: list[int]
    overestimation: float
    """Mean over episodes of mean_t (max_a Q(s_t,.) - G_t)."""

    def metrics(self) -> dict[str, float]:
        r = np.asarray(self.returns)
        return {
            "eval_return_mean": float(r.mean()),
            "eval_return_std": float(r.std()),
            "eval_return_min": float(r.min()),
            "eval_length_mean": float(np.mean(self.lengths)),
            "overestimation": self.overestimation,
        }


def evaluate(policy: NumpyQ, env: gym.Env, episodes: int, gamma: float, seed: int) -> EvalResult:
    """Run ``episodes`` greedy episodes (epsilon 0) with ``policy``; seeds ``seed, seed+1, ...``."""
    returns, lengths, over = [], [], []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        q_greedy, rewards = [], []
        done = False
        while not done:
            q = policy.q_values(np.asarray(obs, dtype=np.float32).reshape(1, -1))[0]
            q_greedy.append(float(q.max()))
            obs, r, term, trunc, _ = env.step(int(q.argmax()))
            rewards.append(float(r))
            done = term or trunc
        returns.append(float(sum(rewards)))
        lengths.append(len(rewards))
        over.append(overestimation(np.asarray(q_greedy), np.asarray(rewards), gamma))
    return EvalResult(returns, lengths, float(np.mean(over)))
