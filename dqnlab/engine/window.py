"""The metrics window: what a log point reports about the run since the previous one (throughput,
policy lag, waits) and at this moment (realised UTD and the limiter's deficit, epsilon, worker
shares, TD loss and Q statistics, finished episodes). Collapse signs come from
:func:`dqnlab.agent.collapse.collapse_signs`; deciding on divergence is the loop's job."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from dqnlab.engine.actor import epsilon_for
from dqnlab.engine.limiter import realised_utd
from dqnlab.engine.meters import LagMeter, ThroughputMeter
from dqnlab.engine.parts import EngineParts
from dqnlab.metrics import (
    ACTOR_WAIT_S,
    ENV_STEPS,
    EPSILON_MEAN,
    LEARNER_WAIT_S,
    LIMITER_BOUND,
    LOST_UPDATE_FRAC,
    LOST_UPDATES,
    RACED_WRITE_FRAC,
    RESETS,
    STALE_GRADIENT_AGE_MEAN,
    TARGET_UPDATES,
    TD_LOSS,
    TIME_S,
    TRAIN_EPISODES,
    TRAIN_EPISODES_UNREAD,
    TRAIN_LENGTH_MEAN,
    TRAIN_RETURN_LAST,
    TRAIN_RETURN_MEAN,
    UPDATES,
    UTD_DEFICIT,
    UTD_REALISED,
    worker_share,
)


class WriterCounts(NamedTuple):
    """What whoever writes the parameters did so far (the single learner, or the naive workers)."""

    lost_updates: float
    raced_write_frac: float
    stale_gradient_age_mean: float
    target_updates: float
    """The learner's target copies (or Polyak steps); naive workers each copy their own target: the mean
    over workers."""


class MetricsWindow:
    def __init__(self, parts: EngineParts, writer_counts: Callable[[], WriterCounts]):
        """``writer_counts()``: the :class:`WriterCounts` of whoever writes the parameters."""
        self.parts = parts
        self.writer_counts = writer_counts
        self.lag = LagMeter(parts.config.run.replicas)
        self.throughput = ThroughputMeter()
        self.learner_wait_s = 0.0
        """Seconds the learner waited on the limiter, cumulative (the loop adds to it)."""
        self._recent = [deque(maxlen=max(TRAIN_RETURN_LAST)) for _ in range(parts.config.run.replicas)]
        """Per replica, the returns of its latest finished actor episodes."""

    def stamp(self, elapsed_s: float) -> dict[str, float]:
        """``env_steps``, ``updates``, ``time_s``: what every record of a history starts with."""
        return {ENV_STEPS: self.parts.replay.env_steps, UPDATES: self.parts.replay.updates, TIME_S: elapsed_s}

    def log_points(self, elapsed_s: float, stats: list[dict[str, float]] | None, replicas: list[int],
                   read_episodes: bool = True) -> dict[int, dict[str, float]]:  # fmt: skip
        """Per replica in ``replicas``, the window's metrics (what the replicas share, such as throughput
        and the limiter's state, is in each); starts a new window. ``read_episodes=False`` reads no
        locked state (a failure path: a killed actor may have died holding the replay lock)."""
        p = self.parts
        c, r = p.config, p.config.run
        replay, learner = p.replay, p.learner
        shared = self.stamp(elapsed_s)
        env_steps, updates = shared[ENV_STEPS], shared[UPDATES]
        shared.update(self.throughput.pop(elapsed_s, env_steps, updates))
        shared[UTD_REALISED] = realised_utd(updates, env_steps, r.learning_starts)
        shared[UTD_DEFICIT] = p.limiter.deficit(env_steps, updates)
        shared[LIMITER_BOUND] = p.limiter.max_deficit(c.env.envs_per_worker)
        shared[LEARNER_WAIT_S] = self.learner_wait_s
        shared[ACTOR_WAIT_S] = float(p.board.wait_s.sum())
        shared[EPSILON_MEAN] = float(np.mean([epsilon_for(c, w, env_steps) for w in range(c.env.num_workers)]))
        produced, resident = replay.produced(), replay.resident()
        for w in range(c.env.num_workers):
            shared[worker_share(w, "produced")] = produced[w] / max(produced.sum(), 1)
            shared[worker_share(w, "resident")] = resident[w] / max(resident.sum(), 1)
        writers = self.writer_counts()
        shared[TARGET_UPDATES] = writers.target_updates
        shared[RESETS] = learner.resets
        shared[LOST_UPDATES] = float(writers.lost_updates)
        shared[LOST_UPDATE_FRAC] = writers.lost_updates / max(updates, 1)
        shared[RACED_WRITE_FRAC] = writers.raced_write_frac
        shared[STALE_GRADIENT_AGE_MEAN] = writers.stale_gradient_age_mean
        lags = self.lag.pop()
        losses = learner.pop_mean_loss()
        episodes = replay.new_episodes() if read_episodes else []
        finished_all = replay.episodes_finished()
        shared[TRAIN_EPISODES_UNREAD] = float(replay.episodes_unread)
        out = {}
        for k in replicas:
            m = dict(shared)
            m.update(lags[k])
            sampled, finished = replay.sampled[k], finished_all[k]
            for w in range(c.env.num_workers):
                m[worker_share(w, "sampled")] = sampled[w] / max(sampled.sum(), 1)
                m[worker_share(w, "episodes")] = finished[w] / max(finished.sum(), 1)
            if losses is not None:
                m[TD_LOSS] = losses[k]
            if stats:
                m.update(stats[k])
            mine = [e for e in episodes if e[1] == k]
            self._recent[k].extend(e[2] for e in mine)
            for n, name in TRAIN_RETURN_LAST.items():
                if self._recent[k]:
                    m[name] = float(np.mean(list(self._recent[k])[-n:]))
            if mine:
                m[TRAIN_RETURN_MEAN] = float(np.mean([e[2] for e in mine]))
                m[TRAIN_LENGTH_MEAN] = float(np.mean([e[3] for e in mine]))
                m[TRAIN_EPISODES] = float(len(mine))
            out[k] = m
        return out
