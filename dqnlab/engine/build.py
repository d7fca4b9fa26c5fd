"""One builder for both modes: the limiter, learner, shared memory, replay, weight broadcast, actor
board and actor pool of a run, wired the same way whether the actors are forked or stepped in the
learner's process (Acme's idea: serial and distributed runs share one code path)."""

from __future__ import annotations

import functools
import multiprocessing as mp
from typing import TYPE_CHECKING

from dqnlab.agent.learner import Learner
from dqnlab.agent.networks import flatten_into
from dqnlab.config import Config
from dqnlab.engine.actor import ActorBoard, actor_main
from dqnlab.engine.limiter import RateLimiter
from dqnlab.engine.naive import NaiveShared, naive_worker_main
from dqnlab.engine.parts import EngineParts
from dqnlab.engine.replay import SharedReplay
from dqnlab.engine.shared import SharedArena
from dqnlab.engine.weights import WeightBroadcast
from dqnlab.engine.workers import ActorPool
from dqnlab.tracking.callbacks import CallbackList

if TYPE_CHECKING:
    from dqnlab.engine.loop import LearnerLoop


def build(config: Config, obs_dim: int, num_actions: int) -> EngineParts:
    """Every part of a run of ``config``, shared memory allocated and the initial weights published;
    no actor started yet (:meth:`ActorPool.start`)."""
    c, r, a = config, config.run, config.agent
    limiter = RateLimiter(a.utd, r.learning_starts, r.limiter_slack, r.limiter == "strict").for_budget(r.total_env_steps)
    learner = Learner(config, obs_dim, num_actions, r.device)
    spec = learner.net.spec
    layout = spec.layout
    arena = SharedArena()
    priorities = (a.priority_alpha, a.priority_eps) if a.replay == "prioritized" else None
    replay = SharedReplay(arena, mp.get_context("fork").Lock(), a.buffer_capacity, obs_dim, c.env.num_workers, limiter,
                          r.total_env_steps, r.replicas, priorities)  # fmt: skip
    weights = WeightBroadcast(arena, r.replicas * layout.size)
    board = ActorBoard(arena, c.env.num_workers)
    naive = None
    worker_main = actor_main
    if r.writers != "single":  # the naive setups: their workers learn too (dqnlab.engine.naive)
        naive = NaiveShared(arena, layout.size, limiter.max_updates, mp.get_context("fork").Lock())
        worker_main = functools.partial(naive_worker_main, shared=naive)
    arena.allocate()
    replay.bind()
    board.bind()
    pool = ActorPool(config, replay, weights, spec, board, worker_main)
    parts = EngineParts(config, limiter, learner, spec, replay, weights, board, pool, arena, naive)
    parts.publish()
    if naive is not None:
        naive.bind()
        flatten_into(learner.net, naive.params)
    return parts


def make_loop(parts: EngineParts, callbacks: CallbackList) -> LearnerLoop:
    """The loop that drives ``parts``: the learner's own (:class:`LearnerLoop`), or, for a naive setup
    whose workers learn, one that only watches the shared vector (:class:`NaiveLoop`)."""
    if parts.naive is not None:
        from dqnlab.engine.naive_loop import NaiveLoop

        return NaiveLoop(parts, callbacks)
    from dqnlab.engine.loop import LearnerLoop

    return LearnerLoop(parts, callbacks)
