"""Shared replay: a preallocated ring in anonymous shared memory, uniform sampling.

Owns the transition storage, the env-step budget, the limiter's counters and the per-worker
accounting (produced, resident, sampled). All writes to the ring and counters happen under one
process-shared lock, in :meth:`commit` (actors) and :meth:`sample` (learner reads a consistent
batch). The update counter has a single writer, the learner (:meth:`set_updates`).

Invariants (tested): every committed transition gets a unique global sequence number ``seq`` and
lands in slot ``seq % capacity``; ``produced[w]`` counts worker ``w``'s committed env steps;
``resident[w]`` counts its transitions currently in the ring; ``sum(produced) == env_steps``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from dqnlab.agent.batch import Batch
from dqnlab.engine.limiter import RateLimiter
from dqnlab.engine.shared import SharedArena

GO, WAIT, STOP = 0, 1, 2
EPISODE_LOG_CAPACITY = 8192
LOCK_POLL_S = 0.25


class SharedReplay:
    """Ring of ``capacity`` transitions shared by ``num_workers`` actors and one learner."""

    def __init__(
        self,
        arena: SharedArena,
        lock,
        capacity: int,
        obs_dim: int,
        num_workers: int,
        limiter: RateLimiter,
        total_env_steps: int,
    ):
        self.capacity = capacity
        self.obs_dim = obs_dim
        self.num_workers = num_workers
        self.limiter = limiter
        self.total_env_steps = total_env_steps
        self._lock = lock
        self._arena = arena
        c, w = capacity, num_workers
        for name, shape, dtype in [
            ("obs", (c, obs_dim), np.float32),
            ("next_obs", (c, obs_dim), np.float32),
            ("actions", c, np.int64),
            ("rewards", c, np.float32),
            ("terminated", c, np.bool_),
            ("truncated", c, np.bool_),
            ("worker", c, np.int16),
            ("episode", c, np.int64),
            ("version", c, np.int64),
            ("seq", c, np.int64),
            ("insert_updates", c, np.int64),  # learner updates when the transition was committed
            ("counters", 4, np.int64),  # claimed, inserted, updates, stop
            ("produced", w, np.int64),
            ("resident", w, np.int64),
            ("ep_worker", EPISODE_LOG_CAPACITY, np.int32),
            ("ep_return", EPISODE_LOG_CAPACITY, np.float64),
            ("ep_length", EPISODE_LOG_CAPACITY, np.int64),
            ("ep_env_steps", EPISODE_LOG_CAPACITY, np.int64),
            ("ep_count", 1, np.int64),
        ]:
            arena.add(f"replay.{name}", shape, dtype)
        self.sampled = np.zeros(w, dtype=np.int64)  # learner-local: batch elements drawn per worker
        self._episodes_read = 0

    def bind(self) -> None:
        """Attach views after ``arena.allocate()`` (in the parent, before forking)."""
        a = {k.removeprefix("replay."): v for k, v in self._arena.arrays.items() if k.startswith("replay.")}
        self._a = a
        self._counters = a["counters"]

    # --- counters ------------------------------------------------------------------------------
    @property
    def env_steps(self) -> int:
        return int(self._counters[1])

    @property
    def claimed_steps(self) -> int:
        return int(self._counters[0])

    @property
    def updates(self) -> int:
        return int(self._counters[2])

    def set_updates(self, updates: int) -> None:
        """Learner only: publish the number of gradient updates done."""
        self._counters[2] = updates

    @property
    def size(self) -> int:
        return min(self.env_steps, self.capacity)

    @property
    def stopped(self) -> bool:
        return bool(self._counters[3])

    def request_stop(self) -> None:
        self._counters[3] = 1

    def produced(self) -> np.ndarray:
        return self._a["produced"].copy()

    def resident(self) -> np.ndarray:
        return self._a["resident"].copy()

    def max_abs_reward(self) -> float:
        n = self.size
        return float(np.abs(self._a["rewards"][:n]).max()) if n else 0.0

    # --- locking -------------------------------------------------------------------------------
    def _acquire_slow(self, health_check: Callable[[], None] | None) -> None:
        # A holder killed inside the critical section would leave the lock taken forever; waiting
        # in slices lets the caller notice a dead peer (and fail) instead of hanging.
        while True:
            if health_check is not None:
                health_check()
            if self._lock.acquire(timeout=LOCK_POLL_S):
                return

    def _acquire(self, health_check: Callable[[], None] | None) -> None:
        if not self._lock.acquire(timeout=LOCK_POLL_S):  # fast path first; the slow path polls health
            self._acquire_slow(health_check)

    @contextmanager
    def _locked(self, health_check: Callable[[], None] | None) -> Iterator[None]:
        self._acquire(health_check)
        try:
            yield
        finally:
            self._lock.release()

    # --- actor side ----------------------------------------------------------------------------
    def _claim_locked(self, n: int) -> int:
        claimed = int(self._counters[0])
        if self._counters[3] or claimed >= self.total_env_steps:
            return STOP
        if not self.limiter.actor_may_claim(claimed, int(self._counters[2])):
            return WAIT
        self._counters[0] = claimed + n
        return GO

    def claim(self, n: int, health_check: Callable[[], None] | None = None) -> int:
        """Reserve ``n`` env steps of the budget: GO, WAIT (limiter) or STOP (budget spent / stop)."""
        with self._locked(health_check):
            return self._claim_locked(n)

    def commit(
        self,
        worker: int,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        episode: np.ndarray,
        version: int,
        finished: list[tuple[float, int]],
        claim_next: int,
        health_check: Callable[[], None] | None = None,
    ) -> int:
        """Insert the ``n`` transitions of one claimed actor step, log finished episodes
        ``(return, length)``, and try to claim the next ``claim_next`` steps (returns its code)."""
        n = len(actions)
        a = self._a
        self._acquire(health_check)  # not ``with self._locked``: the generator costs ~1.5 us per commit
        try:
            start = int(self._counters[1])
            slot = start % self.capacity
            if slot + n <= self.capacity:
                slots = slice(slot, slot + n)  # contiguous: plain slice writes, the common case
            else:
                slots = np.arange(start, start + n) % self.capacity
            first_old = max(0, self.capacity - start)  # batch positions j >= this overwrite a slot
            if first_old < n:  # the overwritten transitions' workers lose residents
                old = np.arange(slot, slot + n)[first_old:] % self.capacity
                np.subtract.at(a["resident"], a["worker"][old].astype(np.int64), 1)
            a["obs"][slots] = obs
            a["next_obs"][slots] = next_obs
            a["actions"][slots] = actions
            a["rewards"][slots] = rewards
            a["terminated"][slots] = terminated
            a["truncated"][slots] = truncated
            a["worker"][slots] = worker
            a["episode"][slots] = episode
            a["version"][slots] = version
            a["seq"][slots] = np.arange(start, start + n)
            a["insert_updates"][slots] = self._counters[2]
            a["resident"][worker] += n
            a["produced"][worker] += n
            self._counters[1] = start + n
            for ret, length in finished:
                k = int(a["ep_count"][0]) % EPISODE_LOG_CAPACITY
                a["ep_worker"][k] = worker
                a["ep_return"][k] = ret
                a["ep_length"][k] = length
                a["ep_env_steps"][k] = start + n
                a["ep_count"][0] += 1
            return self._claim_locked(claim_next) if claim_next else GO
        finally:
            self._lock.release()

    # --- learner side --------------------------------------------------------------------------
    def sample(self, rng: np.random.Generator, batch_size: int, health_check: Callable[[], None] | None = None) -> Batch:
        """Uniform sample (with replacement) over the resident transitions; counts per-worker draws."""
        a = self._a
        with self._locked(health_check):
            size = min(int(self._counters[1]), self.capacity)
            idx = rng.integers(0, size, size=batch_size)
            batch = Batch(
                obs=a["obs"][idx],
                actions=a["actions"][idx],
                rewards=a["rewards"][idx],
                next_obs=a["next_obs"][idx],
                terminated=a["terminated"][idx],
                truncated=a["truncated"][idx],
                worker=a["worker"][idx],
                version=a["version"][idx],
                seq=a["seq"][idx],
                insert_updates=a["insert_updates"][idx],
            )
        self.sampled += np.bincount(batch.worker, minlength=self.num_workers)
        return batch

    def sample_obs(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` distinct resident observations (the diagnostics probe batch)."""
        with self._locked(None):
            size = min(int(self._counters[1]), self.capacity)
            idx = rng.choice(size, size=min(n, size), replace=False)
            return self._a["obs"][idx].copy()

    def new_episodes(self) -> list[tuple[int, float, int, int]]:
        """Episodes finished since the last call: ``(worker, return, length, env_steps_at_end)``."""
        a = self._a
        with self._locked(None):
            count = int(a["ep_count"][0])
            first = max(self._episodes_read, count - EPISODE_LOG_CAPACITY)
            out = []
            for i in range(first, count):
                k = i % EPISODE_LOG_CAPACITY
                out.append(
                    (
                        int(a["ep_worker"][k]),
                        float(a["ep_return"][k]),
                        int(a["ep_length"][k]),
                        int(a["ep_env_steps"][k]),
                    )
                )
        self._episodes_read = count
        return out

    def resident_seq(self) -> np.ndarray:
        """Sequence numbers of the resident transitions (for the no-loss/no-duplicate checks)."""
        with self._locked(None):
            return self._a["seq"][: self.size].copy()

    def resident_column(self, name: str) -> np.ndarray:
        with self._locked(None):
            return self._a[name][: self.size].copy()


def wait_backoff(attempt: int) -> float:
    """Sleep used by polling waits: 20 us growing to 1 ms; returns the seconds slept."""
    s = min(2e-5 * (1.5 ** min(attempt, 12)), 1e-3)  # capped exponent: waits may last for hours
    time.sleep(s)
    return s
