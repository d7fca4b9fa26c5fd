"""The naive setups, as measured counterexamples to the single learner (``writers`` != ``single``).

- ``hogwild``: every worker also samples from the shared replay and applies gradient steps to one
  parameter vector in shared memory, with no lock (PyTorch's Hogwild example; each worker its own
  Adam state and target copy). A write *races* when another worker's write is in progress at the
  same time (both started before either finished): the two optimizer steps interleave on the same
  floats.
- ``a3c``: A3C-style gradient pushing (Mnih et al. 2016's asynchronous one-step Q-learning): each
  worker computes its gradient on a local copy, synced from the shared vector at each of its actor's
  weight pulls (every ``sync_every`` of its env steps), and applies it to the shared vector with its
  own optimizer, without a lock. Each push carries the gradient of its own batch alone (the local
  copy's gradient is cleared before each backward). The gradient is *stale*: computed at parameters
  that the other workers' pushes have moved since the sync; its age is measured (pushes completed
  between the copy's sync and this push's start: one approximation, a push still in flight at either
  moment is not counted, though part of its write may or may not be in the copy), and a push that
  overlaps another one raced, as in ``hogwild``. Nothing is overwritten.
- ``local_copies``: what users describe: each worker trains its own copy on its own transitions
  between syncs (every ``sync_every`` of its env steps it reads the shared vector), and writes its
  whole vector back after every update; the last writer wins. Which updates each vector contains is
  tracked exactly (:class:`LineageBook`: one bit per update); a *lost update* is one the shared
  vector does not contain: overwritten by a write that did not build on it, and not brought back by
  a later write that did. At the end of a run the count is exact: the updates whose effect the
  final parameters do not contain.

The total number of updates follows ``utd`` exactly, as with the single learner (workers claim
them under a lock; the limiter's update counter is their sum). The learner process only
evaluates, logs and checks divergence, on the shared vector.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time

import numpy as np
import torch

from dqnlab.agent.batch import Batch
from dqnlab.agent.layers import NetworkSpec
from dqnlab.agent.networks import QNetwork, flatten_into
from dqnlab.agent.reference import dqn_gradient, update_target
from dqnlab.agent.schedules import Periodic
from dqnlab.config import Config
from dqnlab.engine.actor import Actor
from dqnlab.engine.replay import GO, STOP, SharedReplay, wait_backoff
from dqnlab.engine.shared import SharedArena
from dqnlab.engine.worker_process import run_worker_process

# counters of the naive shared state
COUNTERS = ("claimed", "done", "writes", "raced", "in_flight", "started", "overwritten", "stale_sum", "stale_n",
            "target_copies")  # fmt: skip
CLAIMED, DONE, WRITES, RACED, IN_FLIGHT, STARTED, OVERWRITTEN, STALE_SUM, STALE_N, TARGET_COPIES = range(len(COUNTERS))


class LineageBook:
    """Which updates one worker's copy contains, against the shared vector's: one bit per update id
    (pure bookkeeping; ``shared`` is a bool array in shared memory, one entry per owed update).

    ``read()``: the copy becomes the shared vector; ``update(uid)``: the copy takes update ``uid``;
    ``write()``: the copy replaces the shared vector, returning how many updates the shared vector
    held that the copy does not (overwritten now). :func:`lost_updates` counts what the shared
    vector lacks of the updates applied."""

    def __init__(self, shared: np.ndarray):
        self.shared = shared
        self.local = np.zeros_like(shared)

    def read(self) -> None:
        self.local[:] = self.shared

    def update(self, uid: int) -> None:
        self.local[uid] = True

    def write(self) -> int:
        overwritten = int((self.shared & ~self.local).sum())
        self.shared[:] = self.local
        return overwritten


def lost_updates(shared: np.ndarray, applied: int) -> int:
    """Updates applied whose effect the shared vector does not contain: ``applied`` minus the updates
    it contains. Exact at any moment the caller holds the lock: the shared vector only ever contains
    applied updates (a copy takes update ``uid`` just before its write, which counts it applied), and
    ids finish out of order (update 7 may land before update 5), so every bit counts, not ids
    below ``applied``."""
    return applied - int(shared.sum())


class NaiveShared:
    """Shared memory of the naive setups: the parameter vector, the counters and the lineage."""

    def __init__(self, arena: SharedArena, num_params: int, max_updates: int, lock):
        self.lock = lock
        self._arena = arena
        arena.add("naive.params", num_params, np.float32)
        arena.add("naive.counters", len(COUNTERS), np.int64)
        arena.add("naive.lineage", max(1, max_updates), np.bool_)  # which updates the shared vector contains

    def bind(self) -> None:
        a = self._arena.arrays
        self.params, self.counters, self.lineage = a["naive.params"], a["naive.counters"], a["naive.lineage"]

    def snapshot(self, out: np.ndarray, locked: bool = True) -> None:
        """A whole copy of the shared vector (under the lock: local_copies writes are whole; hogwild
        writes are not locked and a copy may catch one half done, as its own workers do). ``locked=False``
        once no worker is alive (one killed may have died holding the lock)."""
        with self.lock if locked else contextlib.nullcontext():
            out[:] = self.params


class WorkerUpdates:
    """A naive worker's gradient steps: claims the updates the data owe, samples, steps, writes."""

    def __init__(self, worker: int, config: Config, replay: SharedReplay, shared: NaiveShared, spec: NetworkSpec):
        self.worker, self.config, self.replay, self.shared = worker, config, replay, shared
        self.mode = config.run.writers
        self.net = QNetwork(spec)
        self.layout = layout = spec.layout
        self._flat = np.zeros(layout.size, dtype=np.float32)
        self._synced_at = 0  # a3c: the shared updates done when the local copy last took the shared vector
        if self.mode in ("hogwild", "a3c"):  # the optimizer's parameters: the shared floats themselves
            self.shared_net = QNetwork(spec)
            views = layout.views(shared.params)
            for name, p in self.shared_net.named_parameters():
                p.data = torch.from_numpy(views[name])
            if self.mode == "hogwild":
                self.net = self.shared_net
            else:
                self.sync()
        else:
            self.book = LineageBook(shared.lineage)
            self.sync()
        self.target = copy.deepcopy(self.net)
        for p in self.target.parameters():
            p.requires_grad_(False)
        # a3c pushes its local gradient into the shared floats: its optimizer steps those
        stepped = self.shared_net if self.mode == "a3c" else self.net
        self.opt = torch.optim.Adam(stepped.parameters(), lr=config.agent.lr)
        self.rng = np.random.default_rng([config.run.seed, worker, 7])
        a = config.agent
        # the target copies on the run's schedule, counted on the global update count or env steps
        self._target = Periodic(a.target_period, a.target_unit, config.run.learning_starts)
        self._updates_mark = 0  # target periods of the global update count already copied

    def sync(self) -> None:
        """local_copies, a3c: the copy becomes the shared vector again (local_copies: with its lineage)."""
        with self.shared.lock:
            flat = torch.from_numpy(self.shared.params.copy())
            if self.mode == "a3c":
                self._synced_at = int(self.shared.counters[DONE])
            else:
                self.book.read()
        with torch.no_grad():
            for p, view in zip(self.net.parameters(), self.layout.views(flat).values()):
                p.copy_(view)

    def acting_params(self, out: np.ndarray) -> None:
        """The parameters this worker acts with: the shared vector (hogwild) or its own copy."""
        flatten_into(self.net, out)

    def _claim(self) -> int | None:
        """The id of the next update the data owe, claimed for this worker; None if none is owed, or
        (local_copies) while this worker has no transition of its own to train on: the others take
        the owed updates meanwhile."""
        r = self.config.run
        if self.mode == "local_copies" and self.replay.resident_of(self.worker) == 0:
            return None
        with self.shared.lock:
            owed = math.floor(self.config.agent.utd * (self.replay.env_steps - r.learning_starts) + 1e-9)
            c = self.shared.counters
            if self.replay.env_steps < r.learning_starts or c[CLAIMED] >= owed:
                return None
            c[CLAIMED] += 1
            return int(c[CLAIMED]) - 1

    def run_owed(self) -> int:
        """Claim and take every update the data owe now; returns how many this worker took."""
        done = 0
        while (uid := self._claim()) is not None:
            self._update(uid)
            done += 1
        return done

    def _update(self, uid: int) -> None:
        batch = self._sample()
        arrays = tuple(torch.from_numpy(x[0]) for x in batch.learner_arrays())
        # this batch's gradient alone, on the copy it was computed at (a3c: the local copy, never the
        # shared floats' own gradient, so no push carries an earlier batch's)
        dqn_gradient(self.net, self.target, arrays, self.config.agent)
        c = self.shared.counters
        if self.mode in ("hogwild", "a3c"):
            if self.mode == "a3c":  # the local copy's gradient, pushed into the shared parameters
                for shared_p, local_p in zip(self.shared_net.parameters(), self.net.parameters()):
                    shared_p.grad = local_p.grad
            with self.shared.lock:
                racing = c[IN_FLIGHT] > 0
                c[IN_FLIGHT] += 1
                c[STARTED] += 1
                started = c[STARTED]
                age = int(c[DONE]) - self._synced_at  # shared updates the local copy has not seen
            self.opt.step()  # straight into the shared floats, no lock
            with self.shared.lock:
                c[IN_FLIGHT] -= 1
                c[WRITES] += 1
                c[RACED] += int(racing or c[STARTED] != started)
                if self.mode == "a3c":
                    c[STALE_SUM] += age
                    c[STALE_N] += 1
                c[DONE] += 1
                self.replay.set_updates(int(c[DONE]))
        else:
            self.opt.step()
            self.book.update(uid)
            flatten_into(self.net, self._flat)
            with self.shared.lock:
                c[OVERWRITTEN] += self.book.write()
                self.shared.params[:] = self._flat  # the whole vector: the last writer wins
                c[WRITES] += 1
                c[DONE] += 1
                self.replay.set_updates(int(c[DONE]))
        done = int(c[DONE])
        if self._target_due(done):
            update_target(self.target, self.net, 1.0)
            with self.shared.lock:
                c[TARGET_COPIES] += 1  # every worker's copies, summed (the loop reports the mean over workers)

    def _target_due(self, done: int) -> bool:
        """A hard copy of this worker's target is due: a multiple of the period was passed since its last
        copy (on the global update count, which other workers advance too, or on the env steps)."""
        if self.config.agent.target_unit == "updates":
            mark = done // self.config.agent.target_period
            due, self._updates_mark = mark > self._updates_mark, max(mark, self._updates_mark)
            return due
        return self._target.due(done, self.replay.env_steps)

    def _sample(self) -> Batch:
        if self.mode in ("hogwild", "a3c"):  # the shared replay, as one learner would
            return self.replay.sample([self.rng], self.config.agent.batch_size)
        return self.replay.sample_worker(self.rng, self.config.agent.batch_size, self.worker)


class NaiveWeights:
    """What a naive worker's actor reads at each sync: its own parameters (local_copies: after taking
    the shared vector again), versioned by the updates done."""

    def __init__(self, updates: WorkerUpdates):
        self.updates = updates

    def read_into(self, out: np.ndarray) -> int:
        if self.updates.mode in ("local_copies", "a3c"):
            self.updates.sync()
        self.updates.acting_params(out)
        return int(self.updates.shared.counters[DONE])


def naive_worker_main(worker: int, config: Config, replay: SharedReplay, weights, spec: NetworkSpec, board,
                      shared: NaiveShared) -> None:  # fmt: skip
    """Entry point of a naive setup's worker process (forked): collect with an
    :class:`~dqnlab.engine.actor.Actor` and learn with :class:`WorkerUpdates` until the budget is spent
    and every owed update is taken. ``weights`` (the single learner's broadcast) is not read: a naive
    worker acts on its own parameters."""

    def collect_and_learn(parent_alive) -> Actor:
        updates = WorkerUpdates(worker, config, replay, shared, spec)
        actor = Actor(worker, config, replay, NaiveWeights(updates), spec, board, parent_alive)
        try:
            naive_worker_loop(actor, updates, replay, board, worker, parent_alive)
        except BaseException:
            actor.close()
            raise
        return actor

    run_worker_process(worker, board, collect_and_learn)


def naive_worker_loop(actor: Actor, updates: WorkerUpdates, replay: SharedReplay, board, worker: int,
                      parent_alive) -> None:  # fmt: skip
    """Collect and learn until the budget is spent and every owed update is taken."""
    total = updates.config.run.total_env_steps
    attempt = 0
    while True:
        code = actor.try_step()
        took = updates.run_owed()
        if code == STOP and replay.env_steps >= total and not took:
            with updates.shared.lock:
                owed = math.floor(updates.config.agent.utd * (total - updates.config.run.learning_starts) + 1e-9)
                if updates.shared.counters[CLAIMED] >= owed:
                    return
        if code == GO or took:
            attempt = 0
            continue
        parent_alive()
        board.heartbeat[worker] = time.monotonic()
        board.wait_s[worker] += wait_backoff(attempt)
        attempt += 1
