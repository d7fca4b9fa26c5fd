"""The metrics window: what a log point reports about the run since the previous one (throughput,
policy lag, waits) and at this moment (realised UTD and the limiter's deficit, epsilon, worker
shares, TD loss and Q statistics, finished episodes). Collapse signs come from
:func:`dqnlab.agent.collapse.collapse_signs`; deciding on divergence is the loop's job."""

from __future__ import annotations

import numpy as np

from dqnlab.engine.actor import epsilon_for
from dqnlab.engine.build import EngineParts
from dqnlab.engine.limiter import realised_utd
from dqnlab.engine.meters import LagMeter, ThroughputMeter
from dqnlab.metrics import (
    ACTOR_WAIT_S,
    ENV_STEPS,
    EPSILON_MEAN,
    LEARNER_WAIT_S,
    LIMITER_BOUND,
    RESETS,
    TARGET_UPDATES,
    TD_LOSS,
    TIME_S,
    TRAIN_EPISODES,
    TRAIN_LENGTH_MEAN,
    TRAIN_RETURN_MEAN,
    UPDATES,
    UTD_DEFICIT,
    UTD_REALISED,
    worker_share,
)


class MetricsWindow:
    def __init__(self, parts: EngineParts):
        self.parts = parts
        self.lag = LagMeter()
        self.throughput = ThroughputMeter()
        self.learner_wait_s = 0.0
        """Seconds the learner waited on the limiter, cumulative (the loop adds to it)."""

    def stamp(self, elapsed_s: float) -> dict[str, float]:
        """``env_steps``, ``updates``, ``time_s``: what every record of the history starts with."""
        return {ENV_STEPS: self.parts.replay.env_steps, UPDATES: self.parts.learner.updates, TIME_S: elapsed_s}

    def log_point(self, elapsed_s: float, stats: dict[str, float] | None, read_episodes: bool = True) -> dict[str, float]:
        """The window's metrics; starts a new window. ``read_episodes=False`` reads no locked state
        (a failure path: a killed actor may have died holding the replay lock)."""
        p = self.parts
        c, r = p.config, p.config.run
        replay, learner = p.replay, p.learner
        m = self.stamp(elapsed_s)
        env_steps, updates = m[ENV_STEPS], m[UPDATES]
        m.update(self.throughput.pop(elapsed_s, env_steps, updates))
        m[UTD_REALISED] = realised_utd(updates, env_steps, r.learning_starts)
        m[UTD_DEFICIT] = p.limiter.deficit(env_steps, updates)
        m[LIMITER_BOUND] = p.limiter.max_deficit(c.env.envs_per_worker)
        m[LEARNER_WAIT_S] = self.learner_wait_s
        m[ACTOR_WAIT_S] = float(p.board.wait_s.sum())
        m[EPSILON_MEAN] = float(np.mean([epsilon_for(c, w, env_steps) for w in range(c.env.num_workers)]))
        m.update(self.lag.pop())
        produced, resident, sampled = replay.produced(), replay.resident(), replay.sampled
        for w in range(c.env.num_workers):
            m[worker_share(w, "produced")] = produced[w] / max(produced.sum(), 1)
            m[worker_share(w, "resident")] = resident[w] / max(resident.sum(), 1)
            m[worker_share(w, "sampled")] = sampled[w] / max(sampled.sum(), 1)
        loss = learner.pop_mean_loss()
        if loss is not None:
            m[TD_LOSS] = loss
        if stats:
            m.update(stats)
        m[TARGET_UPDATES] = learner.target_updates
        m[RESETS] = learner.resets
        episodes = replay.new_episodes() if read_episodes else []
        if episodes:
            m[TRAIN_RETURN_MEAN] = float(np.mean([e[1] for e in episodes]))
            m[TRAIN_LENGTH_MEAN] = float(np.mean([e[2] for e in episodes]))
            m[TRAIN_EPISODES] = float(len(episodes))
        return m
