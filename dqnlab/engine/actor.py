"""Actors: collect experience with a local numpy copy of the Q-network; never compute gradients.

An :class:`Actor` owns its environments (one bank of ``envs_per_worker`` per replica,
:mod:`dqnlab.engine.envs`), its RNG streams and its epsilon. :meth:`Actor.try_step`
is the one code path of both modes: claim ``envs_per_worker`` env steps from the replay (the rate
limiter may say WAIT), pick epsilon-greedy actions, step the envs, commit the tagged transitions.
In parallel mode :func:`actor_main` loops over it in its own process; in serial mode the learner's
process calls it directly.
"""

from __future__ import annotations

import time

import numpy as np

from dqnlab.agent.layers import NetworkSpec
from dqnlab.agent.policy import NumpyQ
from dqnlab.config import Config
from dqnlab.engine.envs import make_bank
from dqnlab.engine.replay import GO, STOP, WAIT, SharedReplay, wait_backoff
from dqnlab.engine.shared import SharedArena
from dqnlab.engine.weights import WeightBroadcast

ERROR_BYTES = 16_384


class ActorBoard:
    """Per-worker shared status the learner watches: heartbeat, limiter waits, epsilon, errors."""

    def __init__(self, arena: SharedArena, num_workers: int):
        self._arena = arena
        arena.add("actor.heartbeat", num_workers, np.float64)  # time.monotonic() of last sign of life
        arena.add("actor.wait_s", num_workers, np.float64)  # seconds spent waiting on the limiter
        arena.add("actor.epsilon", num_workers, np.float64)
        arena.add("actor.syncs", num_workers, np.int64)  # weight pulls done
        arena.add("actor.error", (num_workers, ERROR_BYTES), np.uint8)

    def bind(self) -> None:
        a = self._arena.arrays
        self.heartbeat = a["actor.heartbeat"]
        self.wait_s = a["actor.wait_s"]
        self.epsilon = a["actor.epsilon"]
        self.syncs = a["actor.syncs"]
        self._error = a["actor.error"]

    def write_error(self, worker: int, text: str) -> None:
        data = text.encode("utf-8", "replace")[-(ERROR_BYTES - 1) :]
        self._error[worker, : len(data)] = np.frombuffer(data, dtype=np.uint8)
        self._error[worker, len(data)] = 0

    def read_error(self, worker: int) -> str:
        raw = bytes(self._error[worker])
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def epsilon_for(config: Config, worker: int, env_steps: int) -> float:
    """Exploration rate of ``worker`` when the run has made ``env_steps`` env steps in total."""
    a = config.agent
    if a.epsilon_schedule == "ladder":
        n = config.env.num_workers
        exponent = 1.0 + (worker / (n - 1) * a.epsilon_alpha if n > 1 else 0.0)
        return a.epsilon_base**exponent
    frac = min(1.0, env_steps / a.epsilon_decay_steps)
    return a.epsilon_start + frac * (a.epsilon_end - a.epsilon_start)


class Actor:
    """One worker: ``envs_per_worker`` envs per replica, epsilon-greedy on a local parameter copy.

    Replica k's envs, exploration draws and random actions come from its own generator
    ``default_rng([seed + k, worker])``, used in the same order as by a one-replica run with seed
    ``seed + k``: so replica k makes exactly that run's transitions (tested in serial mode)."""

    def __init__(
        self,
        worker: int,
        config: Config,
        replay: SharedReplay,
        weights: WeightBroadcast,
        spec: NetworkSpec,
        board: ActorBoard,
        health_check=None,
    ):
        self.worker = worker
        self.config = config
        self.replay = replay
        self.weights = weights
        self.board = board
        self.health_check = health_check
        delays = config.env.worker_step_delay_s
        self.step_delay_s = delays[worker] if worker < len(delays) else 0.0  # a slower worker (studies, tests)
        self.n = config.env.envs_per_worker
        self.k = config.run.replicas
        self.rngs = [np.random.default_rng([config.run.seed + r, worker]) for r in range(self.k)]
        limits = config.env.worker_max_episode_steps
        limit = limits[worker] if worker < len(limits) and limits[worker] else None
        self.banks = [make_bank(config.env.env_id, self.n, rng, limit) for rng in self.rngs]
        # what a step writes (the replay copies it at commit) is preallocated, with each bank's rows as
        # views made once; the observations are double-buffered, since a step writes the next
        # observations while acting on these
        shape = (self.k, self.n)
        first = np.stack([bank.reset() for bank in self.banks])  # (K, n, obs_dim)
        self._obs_buffers = [first, np.empty_like(first)]
        self._current = 0  # which buffer holds the observations to act on
        self._next_obs = np.empty_like(first)
        self._rewards = np.empty(shape, dtype=np.float32)
        self._terminated = np.empty(shape, dtype=np.bool_)
        self._truncated = np.empty(shape, dtype=np.bool_)
        self._outs = [[(self._next_obs[r], self._rewards[r], self._terminated[r], self._truncated[r], buf[r])
                       for r in range(self.k)] for buf in self._obs_buffers]  # fmt: skip
        self.policy = NumpyQ(spec, self.k)
        self.version = -1
        self._since_sync = config.run.sync_every  # pull before the first step
        self._episode = np.tile(np.arange(self.n, dtype=np.int64), (self.k, 1))
        self._next_episode = np.full(self.k, self.n, dtype=np.int64)
        self._ep_return = np.zeros((self.k, self.n))
        self._steps = 0  # steps every env has taken (all step once per call)
        self._ep_start = np.zeros((self.k, self.n), dtype=np.int64)  # ``_steps`` when its episode began
        self._claimed = False
        self._u = np.empty((self.k, 0))
        self._u_pos = 0
        self._num_actions = self.banks[0].num_actions

    def sync(self) -> None:
        if self.health_check is not None:  # an orphaned actor notices here even when never blocked
            self.health_check()
        self.version = self.weights.read_into(self.policy.params)
        self.board.syncs[self.worker] += 1
        self._since_sync = 0

    def _uniforms(self) -> np.ndarray:
        """``(K, n)`` U[0,1) draws from pre-drawn blocks (one call per replica's generator every 4096 steps)."""
        if self._u_pos + self.n > self._u.shape[1]:
            self._u = np.stack([rng.random(max(4096, self.n)) for rng in self.rngs])
            self._u_pos = 0
        u = self._u[:, self._u_pos : self._u_pos + self.n]
        self._u_pos += self.n
        return u

    def act(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        """Epsilon-greedy actions ``(K, n)`` for observations ``(K, n, obs_dim)`` (their Q-values are kept
        in ``self._q``: prioritized replay's initial priorities read them)."""
        self._q = self.policy.q_values(obs)
        actions = self._q.argmax(axis=-1)
        explore = self._uniforms() < epsilon
        if explore.any():
            for r in np.flatnonzero(explore.any(axis=1)):
                actions[r, explore[r]] = self.rngs[r].integers(0, self._num_actions, size=int(explore[r].sum()))
        return actions

    def try_step(self) -> int:
        """One vector step of every replica if the limiter allows: GO when stepped, else WAIT or STOP."""
        self.board.heartbeat[self.worker] = time.monotonic()
        if not self._claimed:
            code = self.replay.claim(self.n, self.health_check)
            if code != GO:
                return code
            self._claimed = True
        if self._since_sync >= self.config.run.sync_every:
            self.sync()
        epsilon = epsilon_for(self.config, self.worker, self.replay.env_steps)
        self.board.epsilon[self.worker] = epsilon
        obs = self._obs_buffers[self._current]
        actions = self.act(obs, epsilon)
        outs = self._outs[1 - self._current]
        ended = False
        for r, bank in enumerate(self.banks):
            ended |= bank.step(actions[r], outs[r])
        next_obs, rewards, terminated, truncated = self._next_obs, self._rewards, self._terminated, self._truncated
        episode = self._episode.copy()
        self._ep_return += rewards
        self._steps += 1
        finished = []
        if ended:
            for r, i in zip(*np.nonzero(terminated | truncated)):
                finished.append((int(r), float(self._ep_return[r, i]), self._steps - int(self._ep_start[r, i])))
                self._ep_return[r, i] = 0.0
                self._ep_start[r, i] = self._steps
                self._episode[r, i] = self._next_episode[r]
                self._next_episode[r] += 1
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        code = self.replay.commit(
            self.worker, obs, actions, rewards, next_obs, terminated, truncated, episode,
            self.version, finished, claim_next=self.n, health_check=self.health_check,
            priorities=self._initial_priorities(actions, rewards, next_obs, terminated),
        )  # fmt: skip
        self._current = 1 - self._current
        self._since_sync += self.n
        self._claimed = code == GO
        return GO

    def _initial_priorities(self, actions, rewards, next_obs, terminated) -> np.ndarray | None:
        """Ape-X: a transition's first priority is its |TD error| by this actor's copy of the network,
        ``|r + gamma (1 - terminated) max_a Q(s', a) - Q(s, a)|`` (no target network on the actor);
        None (the replay then uses the largest priority so far) unless replay is prioritized with
        ``initial_priority='actor'``."""
        a = self.config.agent
        if a.replay != "prioritized" or a.initial_priority != "actor":
            return None
        q_taken = np.take_along_axis(self._q, actions[..., None], axis=-1)[..., 0]
        q_next = self.policy.q_values(next_obs).max(axis=-1)
        return np.abs(rewards + a.gamma * np.where(terminated, 0.0, q_next) - q_taken)

    def close(self) -> None:
        for bank in self.banks:
            bank.close()


def actor_main(worker: int, config: Config, replay, weights, spec: NetworkSpec, board: ActorBoard) -> None:
    """Entry point of an actor process (forked): collect until STOP (:mod:`dqnlab.engine.worker_process`
    handles signals, errors and the exit)."""
    from dqnlab.engine.worker_process import run_worker_process

    def collect(parent_alive) -> Actor:
        actor = Actor(worker, config, replay, weights, spec, board, parent_alive)
        try:
            attempt = 0
            while True:
                code = actor.try_step()
                if code == GO:
                    attempt = 0
                    continue
                if code == STOP:
                    return actor
                parent_alive()
                board.heartbeat[worker] = time.monotonic()
                board.wait_s[worker] += wait_backoff(attempt)
                attempt += 1
        except BaseException:
            actor.close()
            raise

    run_worker_process(worker, board, collect)


__all__ = ["Actor", "ActorBoard", "actor_main", "epsilon_for", "GO", "WAIT", "STOP"]
