"""When and how the learner evaluates: greedy episodes of each replica's current weights every
``eval_every_steps`` env steps (the next one due at the next multiple, so a burst of env steps never
queues evaluations) and at the end; never on non-finite weights. Replica k uses the episode seeds a
one-replica run with seed ``seed + k`` would use."""

from __future__ import annotations

import math

import gymnasium as gym

from dqnlab.agent.collapse import parameters_finite
from dqnlab.agent.evaluation import evaluate
from dqnlab.agent.networks import StackedQ, flatten_into
from dqnlab.agent.policy import NumpyQ, ParamLayout
from dqnlab.config import Config
from dqnlab.metrics import EVAL_RETURN_BEST, EVAL_RETURN_MEAN


class Evaluator:
    def __init__(self, config: Config, layout: ParamLayout):
        self.config = config
        k = config.run.replicas
        self.policy = NumpyQ(layout, len(config.network.hidden_sizes), config.network.layer_norm, k)
        self._rows = self.policy.params.reshape(k, layout.size)
        self.env = gym.make(config.env.env_id)
        self.every = config.run.eval_every_steps
        self.next_due = self.every if self.every else math.inf
        self.done = [0] * k
        self.best = [-math.inf] * k
        self.last_env_steps: int | None = None

    def due(self, env_steps: int) -> bool:
        return env_steps >= self.next_due

    def final_due(self, env_steps: int) -> bool:
        """An end-of-run evaluation is due unless evaluations are off or one was just taken here."""
        return bool(self.every) and self.last_env_steps != env_steps

    def evaluate(self, net: StackedQ, env_steps: int, replicas: list[int]) -> dict[int, dict[str, float] | None]:
        """Per replica in ``replicas``: the metrics of one greedy evaluation (eval_* and overestimation,
        with its best return so far), or None, evaluating nothing, when one of its weights is not finite."""
        r = self.config.run
        if self.every:
            self.next_due = (env_steps // self.every + 1) * self.every
        self.last_env_steps = env_steps
        flatten_into(net, self.policy.params)
        out: dict[int, dict[str, float] | None] = {}
        for k in replicas:
            if not parameters_finite(self._rows[k]):
                out[k] = None
                continue
            seed = (r.seed + k) * 1_000_000 + 10_000 + self.done[k] * r.eval_episodes
            m = evaluate(self.policy.replica(k), self.env, r.eval_episodes, self.config.agent.gamma, seed).metrics()
            self.done[k] += 1
            self.best[k] = max(self.best[k], m[EVAL_RETURN_MEAN])
            m[EVAL_RETURN_BEST] = self.best[k]
            out[k] = m
        return out

    def close(self) -> None:
        self.env.close()
