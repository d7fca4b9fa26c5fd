"""Shared replay: a preallocated ring in anonymous shared memory, uniform or prioritized sampling.

Owns the transition storage, the env-step budget, the limiter's counters and the per-worker
accounting (produced, resident, sampled). All writes to the ring and counters happen under one
process-shared lock, in :meth:`commit` (actors) and :meth:`sample` (learner reads a consistent
batch). The update counter has a single writer, the learner (:meth:`set_updates`).

Replicas: every slot holds one transition per replica (a ``(capacity, K, ...)`` layout): the K
replicas step their own envs in lockstep, so a slot's worker, acting version and sequence number
are shared, and ``env_steps`` counts env steps per replica. Each replica samples its own batch with
its own generator (:meth:`sample`), and sampled shares are counted per replica.

Invariants (tested): every committed transition gets a unique global sequence number ``seq`` and
lands in slot ``seq % capacity``; ``produced[w]`` counts worker ``w``'s committed env steps;
``resident[w]`` counts its transitions currently in the ring; ``sum(produced) == env_steps``.

Prioritized replay (``priorities`` given; Schaul et al. 2016, Ape-X): per replica a sum tree over the
slots (:mod:`dqnlab.engine.sumtree`, in shared memory) holds ``p^alpha``; a committed transition
takes the priority its actor computed (or the largest so far), :meth:`sample` draws slot ``i`` with
probability ``p_i^alpha / sum p^alpha`` (stratified: one draw in each of B equal slices of the mass)
and returns importance-sampling weights, and :meth:`update_priorities` sets the sampled slots' new
priorities after an update, skipping a slot overwritten meanwhile (its ``seq`` changed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from dqnlab.agent.batch import Batch
from dqnlab.engine import sumtree
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
        replicas: int = 1,
        priorities: tuple[float, float] | None = None,
    ):
        """``priorities``: ``(alpha, eps)`` for prioritized replay; None: uniform."""
        self.capacity = capacity
        self.obs_dim = obs_dim
        self.num_workers = num_workers
        self.limiter = limiter
        self.total_env_steps = total_env_steps
        self.replicas = replicas
        self.priorities = priorities
        self._lock = lock
        self._arena = arena
        c, w, k = capacity, num_workers, replicas
        for name, shape, dtype in [
            ("obs", (c, k, obs_dim), np.float32),
            ("next_obs", (c, k, obs_dim), np.float32),
            ("actions", (c, k), np.int64),
            ("rewards", (c, k), np.float32),
            ("terminated", (c, k), np.bool_),
            ("truncated", (c, k), np.bool_),
            ("worker", c, np.int16),
            ("episode", (c, k), np.int64),
            ("version", c, np.int64),
            ("seq", c, np.int64),
            ("insert_updates", c, np.int64),  # learner updates when the transition was committed
            ("counters", 4, np.int64),  # claimed, inserted, updates, stop
            ("produced", w, np.int64),
            ("resident", w, np.int64),
            ("ep_worker", EPISODE_LOG_CAPACITY, np.int32),
            ("ep_replica", EPISODE_LOG_CAPACITY, np.int32),
            ("ep_return", EPISODE_LOG_CAPACITY, np.float64),
            ("ep_length", EPISODE_LOG_CAPACITY, np.int64),
            ("ep_env_steps", EPISODE_LOG_CAPACITY, np.int64),
            ("ep_count", 1, np.int64),
            ("ep_finished", (k, w), np.int64),  # episodes finished over the run, per replica and worker (exact)
        ]:
            arena.add(f"replay.{name}", shape, dtype)
        if priorities is not None:
            arena.add("replay.prio_tree", (k, 2 * sumtree.leaves_for(c)), np.float64)  # p^alpha per slot
            arena.add("replay.prio_max", k, np.float64)  # the largest priority p so far (not ^alpha)
        self.sampled = np.zeros((k, w), dtype=np.int64)  # learner-local: batch elements drawn, per replica and worker
        self._episodes_read = 0
        self.episodes_unread = 0
        """Episodes whose record the log ring overwrote before :meth:`new_episodes` read it (their count
        is still in :meth:`episodes_finished`; only their return and length are gone)."""

    def bind(self) -> None:
        """Attach views after ``arena.allocate()`` (in the parent, before forking)."""
        a = {k.removeprefix("replay."): v for k, v in self._arena.arrays.items() if k.startswith("replay.")}
        self._a = a
        self._counters = a["counters"]
        # the per-replica columns as (capacity * K, ...) rows: sampling gathers along one axis
        rows = self.capacity * self.replicas
        self._by_cell = {name: a[name].reshape(rows, *a[name].shape[2:])
                         for name in ("obs", "next_obs", "actions", "rewards", "terminated")}  # fmt: skip
        self._replica_rows = np.arange(self.replicas)[:, None]

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

    def resident_of(self, worker: int) -> int:
        """How many of ``worker``'s transitions the ring holds now (one aligned int64 read, no lock)."""
        return int(self._a["resident"][worker])

    def max_abs_reward(self) -> np.ndarray:
        """Per replica, the largest |reward| resident (0 before any)."""
        n = self.size
        return np.abs(self._a["rewards"][:n]).max(axis=0) if n else np.zeros(self.replicas)

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
        finished: list[tuple[int, float, int]],
        claim_next: int,
        health_check: Callable[[], None] | None = None,
        priorities: np.ndarray | None = None,
    ) -> int:
        """Insert the ``n`` transitions per replica of one claimed actor step (arrays ``(K, n, ...)``),
        log finished episodes ``(replica, return, length)``, and try to claim the next ``claim_next``
        steps (returns its code). Prioritized replay: ``priorities`` ``(K, n)`` (the actor's |TD errors|),
        else the largest priority so far."""
        n = actions.shape[1]
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
            a["obs"][slots] = obs.swapaxes(0, 1)
            a["next_obs"][slots] = next_obs.swapaxes(0, 1)
            a["actions"][slots] = actions.T
            a["rewards"][slots] = rewards.T
            a["terminated"][slots] = terminated.T
            a["truncated"][slots] = truncated.T
            a["worker"][slots] = worker
            a["episode"][slots] = episode.T
            a["version"][slots] = version
            a["seq"][slots] = np.arange(start, start + n)
            a["insert_updates"][slots] = self._counters[2]
            a["resident"][worker] += n
            a["produced"][worker] += n
            if self.priorities is not None:
                self._set_priorities(np.arange(start, start + n) % self.capacity, priorities, n)
            self._counters[1] = start + n
            for replica, ret, length in finished:
                k = int(a["ep_count"][0]) % EPISODE_LOG_CAPACITY
                a["ep_worker"][k] = worker
                a["ep_replica"][k] = replica
                a["ep_return"][k] = ret
                a["ep_length"][k] = length
                a["ep_env_steps"][k] = start + n
                a["ep_count"][0] += 1
                a["ep_finished"][replica, worker] += 1
            return self._claim_locked(claim_next) if claim_next else GO
        finally:
            self._lock.release()

    def _set_priorities(self, slots: np.ndarray, priorities: np.ndarray | None, n: int) -> None:
        """Replica k's slots ``slots`` take priorities ``priorities[k]`` (|TD errors|; None: the largest so
        far, 1 at first), stored as ``(p + eps)^alpha``. Caller holds the lock."""
        alpha, _ = self.priorities
        a, k = self._a, self.replicas
        if priorities is None:
            p = np.broadcast_to(self._largest_priority()[:, None], (k, n))
        else:
            p = self._finite_priorities(np.reshape(priorities, (k, n)))
        rows = np.repeat(np.arange(k), n)
        sumtree.set_leaves(a["prio_tree"], rows, np.tile(slots, k), (p**alpha).ravel())

    def _largest_priority(self) -> np.ndarray:
        """Per replica ``(K,)``, the largest priority so far (1 before any)."""
        largest = self._a["prio_max"]
        return np.where(largest > 0, largest, 1.0)

    def _finite_priorities(self, td_errors: np.ndarray, stored: np.ndarray | None = None) -> np.ndarray:
        """``|td_errors| + eps`` ``(K, B)``, raising the largest priority so far with those that are ``stored``
        (default: all; a slot overwritten since it was drawn keeps its new transition's); a non-finite |TD
        error| (a replica diverging) takes its replica's largest finite priority instead, so that one NaN
        never makes a replica's tree total, and every later batch's weights, NaN. Caller holds the lock."""
        p = np.abs(np.asarray(td_errors, dtype=np.float64)) + self.priorities[1]
        finite = np.isfinite(p)
        if not finite.all():
            p = np.where(finite, p, self._largest_priority()[:, None])
        counted = p if stored is None else np.where(stored, p, 0.0)
        np.maximum(self._a["prio_max"], counted.max(axis=1), out=self._a["prio_max"])
        return p

    # --- learner side --------------------------------------------------------------------------
    def sample(self, rngs: list[np.random.Generator], batch_size: int,
               health_check: Callable[[], None] | None = None, beta: float = 1.0) -> Batch:  # fmt: skip
        """One batch per replica (with replacement, over the resident slots), replica k's drawn with
        ``rngs[k]``: arrays ``(K, batch_size, ...)``. Uniform; or, with prioritized replay, slot i with
        probability ``P(i) = p_i^alpha / sum p^alpha`` (one uniform draw in each of ``batch_size`` equal
        slices of the mass), with importance-sampling weights ``(size P(i))^-beta`` divided by the
        batch's largest. Counts draws per replica and worker."""
        a, k = self._a, self.replicas
        weights = None
        self._acquire(health_check)  # not ``with self._locked``: see commit
        try:
            size = min(int(self._counters[1]), self.capacity)
            if self.priorities is not None:
                tree = a["prio_tree"]
                mass = (np.stack([rng.random(batch_size) for rng in rngs]) + np.arange(batch_size)) / batch_size
                mass *= sumtree.total(tree)[:, None]
                slots = np.minimum(sumtree.find(tree, mass), size - 1)  # guards a float edge past the last slot
                probs = tree[self._replica_rows, slots + tree.shape[1] // 2] / sumtree.total(tree)[:, None]
                weights = (size * probs) ** -beta
                weights = (weights / weights.max(axis=1, keepdims=True)).astype(np.float32)
                cells = slots * k + self._replica_rows
            elif k == 1:
                slots = rngs[0].integers(0, size, size=(1, batch_size))
                cells = slots
            else:
                slots = np.stack([rng.integers(0, size, size=batch_size) for rng in rngs])
                cells = slots * k + self._replica_rows  # replica r's transition in slot s: row s*K + r
            c = self._by_cell
            batch = Batch(obs=c["obs"][cells], actions=c["actions"][cells], rewards=c["rewards"][cells],
                          next_obs=c["next_obs"][cells], terminated=c["terminated"][cells],
                          worker=a["worker"][slots], version=a["version"][slots],
                          insert_updates=a["insert_updates"][slots], weights=weights, slots=slots,
                          seq=a["seq"][slots] if weights is not None else None)  # fmt: skip
        finally:
            self._lock.release()
        w = self.num_workers
        if k == 1:
            self.sampled[0] += np.bincount(batch.worker[0], minlength=w)
        else:  # one bincount over (replica, worker) pairs
            self.sampled += np.bincount((batch.worker + self._replica_rows * w).ravel(), minlength=k * w).reshape(k, w)
        return batch

    def update_priorities(self, slots: np.ndarray, seq: np.ndarray, td_errors: np.ndarray,
                          health_check: Callable[[], None] | None = None) -> None:  # fmt: skip
        """After an update: the sampled slots ``(K, B)`` take their new |TD errors| as priorities (a
        non-finite one: its replica's largest finite priority), unless a commit has overwritten the slot
        since it was drawn (its ``seq`` changed)."""
        a = self._a
        with self._locked(health_check):
            fresh = a["seq"][slots] == seq
            p = self._finite_priorities(td_errors, fresh)
            rows = np.broadcast_to(self._replica_rows, slots.shape)[fresh]
            sumtree.set_leaves(a["prio_tree"], rows, slots[fresh], p[fresh] ** self.priorities[0])

    def sample_worker(self, rng: np.random.Generator, batch_size: int, worker: int) -> Batch:
        """One replica's uniform batch over the resident transitions ``worker`` produced (the naive
        ``local_copies`` setup trains each copy on its own data). Not counted in ``sampled``."""
        a = self._a
        with self._locked(None):
            size = min(int(self._counters[1]), self.capacity)
            own = np.flatnonzero(a["worker"][:size] == worker)
            idx = own[rng.integers(0, len(own), size=batch_size)][None, :]
            rows = np.zeros((1, 1), dtype=np.int64)
            return Batch(obs=a["obs"][idx, rows], actions=a["actions"][idx, rows], rewards=a["rewards"][idx, rows],
                         next_obs=a["next_obs"][idx, rows], terminated=a["terminated"][idx, rows],
                         worker=a["worker"][idx], version=a["version"][idx],
                         insert_updates=a["insert_updates"][idx])  # fmt: skip

    def sample_obs(self, rngs: list[np.random.Generator], n: int) -> np.ndarray:
        """Per replica, ``n`` distinct resident observations (the diagnostics probe batch): ``(K, n, obs_dim)``."""
        with self._locked(None):
            size = min(int(self._counters[1]), self.capacity)
            return np.stack([self._a["obs"][rng.choice(size, size=min(n, size), replace=False), k]
                             for k, rng in enumerate(rngs)])  # fmt: skip

    def episodes_finished(self) -> np.ndarray:
        """Episodes finished over the run, ``(K, num_workers)``: exact, whatever the log ring kept."""
        return self._a["ep_finished"].copy()

    def new_episodes(self) -> list[tuple[int, int, float, int, int]]:
        """Episodes finished since the last call: ``(worker, replica, return, length, env_steps_at_end)``.
        The ring keeps the last ``EPISODE_LOG_CAPACITY`` records; older unread ones are counted in
        :attr:`episodes_unread`, never silently dropped."""
        a = self._a
        with self._locked(None):
            count = int(a["ep_count"][0])
            first = max(self._episodes_read, count - EPISODE_LOG_CAPACITY)
            self.episodes_unread += first - self._episodes_read
            out = []
            for i in range(first, count):
                k = i % EPISODE_LOG_CAPACITY
                out.append(
                    (
                        int(a["ep_worker"][k]),
                        int(a["ep_replica"][k]),
                        float(a["ep_return"][k]),
                        int(a["ep_length"][k]),
                        int(a["ep_env_steps"][k]),
                    )
                )
        self._episodes_read = count
        return out


def wait_backoff(attempt: int) -> float:
    """Sleep used by polling waits: 20 us growing to 1 ms; returns the seconds slept."""
    s = min(2e-5 * (1.5 ** min(attempt, 12)), 1e-3)  # capped exponent: waits may last for hours
    time.sleep(s)
    return s
