"""When and how the learner evaluates: greedy episodes of the current weights every
``eval_every_steps`` env steps (the next one due at the next multiple, so a burst of env steps never
queues evaluations) and at the end; never on non-finite weights."""

from __future__ import annotations

import math

import gymnasium as gym

from dqnlab.agent.collapse import parameters_finite
from dqnlab.agent.evaluation import evaluate
from dqnlab.agent.networks import flatten_into
from dqnlab.agent.policy import NumpyQ, ParamLayout
from dqnlab.config import Config
from dqnlab.metrics import EVAL_RETURN_BEST, EVAL_RETURN_MEAN


class Evaluator:
    def __init__(self, config: Config, layout: ParamLayout):
        self.config = config
        self.policy = NumpyQ(layout, len(config.network.hidden_sizes), config.network.layer_norm)
        self.env = gym.make(config.env.env_id)
        self.every = config.run.eval_every_steps
        self.next_due = self.every if self.every else math.inf
        self.done = 0
        self.best = -math.inf
        self.last_env_steps: int | None = None

    def due(self, env_steps: int) -> bool:
        return env_steps >= self.next_due

    def final_due(self, env_steps: int) -> bool:
        """An end-of-run evaluation is due unless evaluations are off or one was just taken here."""
        return bool(self.every) and self.last_env_steps != env_steps

    def evaluate(self, net, env_steps: int) -> dict[str, float] | None:
        """The metrics of one greedy evaluation of ``net`` (eval_* and overestimation, with the best
        return so far), or None, evaluating nothing, when a weight is not finite."""
        r = self.config.run
        if self.every:
            self.next_due = (env_steps // self.every + 1) * self.every
        flatten_into(net, self.policy.params)
        if not parameters_finite(self.policy.params):
            return None
        res = evaluate(self.policy, self.env, r.eval_episodes, self.config.agent.gamma,
                       seed=r.seed * 1_000_000 + 10_000 + self.done * r.eval_episodes)  # fmt: skip
        self.done += 1
        self.last_env_steps = env_steps
        m = res.metrics()
        self.best = max(self.best, m[EVAL_RETURN_MEAN])
        m[EVAL_RETURN_BEST] = self.best
        return m

    def close(self) -> None:
        self.env.close()
