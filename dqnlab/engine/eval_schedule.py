"""When and how the learner evaluates: greedy episodes of each replica's current weights every
``eval_every_steps`` env steps (the next one due at the next multiple, so a burst of env steps never
queues evaluations) and once at the end of the run, after the learner's last owed update; never on
non-finite weights. Replica k uses the episode seeds a one-replica run with seed ``seed + k`` would use.

The end-of-run evaluation is the one every finding reads (the final return), so it is never taken
early: an evaluation falling due at the last env step is left to :meth:`EvalSchedule.final_due`, which
the loop calls once the learner has taken every update the run owes (up to ``limiter_slack + utd *
envs_per_worker`` updates after the last env step)."""

from __future__ import annotations

import math

import gymnasium as gym

from dqnlab.agent.collapse import parameters_finite
from dqnlab.agent.greedy_episodes import evaluate
from dqnlab.agent.layers import NetworkSpec
from dqnlab.agent.networks import StackedQ, flatten_into
from dqnlab.agent.policy import NumpyQ
from dqnlab.config import Config
from dqnlab.metrics import EVAL_RETURN_BEST, EVAL_RETURN_MEAN


class EvalSchedule:
    def __init__(self, config: Config, spec: NetworkSpec):
        self.config = config
        k = config.run.replicas
        self.policy = NumpyQ(spec, k)
        self._rows = self.policy.params.reshape(k, spec.layout.size)
        self.env = gym.make(config.env.env_id)
        self.every = config.run.eval_every_steps
        self.total_env_steps = config.run.total_env_steps
        self.next_due = self.every if self.every else math.inf
        self.done = [0] * k
        self.best = [-math.inf] * k
        self.last_stamp: tuple[int, int] | None = None
        """``(env_steps, updates)`` of the latest evaluation."""

    def due(self, env_steps: int) -> bool:
        """A periodic evaluation is due; never at the last env step, which the final one covers."""
        return self.next_due <= env_steps < self.total_env_steps

    def final_due(self, env_steps: int, updates: int) -> bool:
        """The end-of-run evaluation is due unless evaluations are off or one was taken at exactly this
        ``(env_steps, updates)``."""
        return bool(self.every) and self.last_stamp != (env_steps, updates)

    def evaluate(self, net: StackedQ, env_steps: int, updates: int,
                 replicas: list[int]) -> dict[int, dict[str, float] | None]:  # fmt: skip
        """Per replica in ``replicas``: the metrics of one greedy evaluation (eval_* and overestimation,
        with its best return so far), or None, evaluating nothing, when one of its weights is not finite."""
        r = self.config.run
        if self.every:
            self.next_due = (env_steps // self.every + 1) * self.every
        self.last_stamp = (env_steps, updates)
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
