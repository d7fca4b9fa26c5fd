"""The loop of a naive setup (``writers`` = ``hogwild`` or ``local_copies``): the workers learn and
write the shared parameter vector themselves; this process only watches. It evaluates, probes and
logs the shared vector on the same schedules as :class:`~dqnlab.engine.loop.LearnerLoop`, and
reports what the writers lost (``lost_updates``) or raced (``raced_write_frac``)."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch

from dqnlab.agent.networks import load_flat_
from dqnlab.engine.loop import HOUSEKEEPING_S, LearnerLoop
from dqnlab.engine.naive import DONE, RACED, STALE_N, STALE_SUM, TARGET_COPIES, WRITES, lost_updates
from dqnlab.engine.window import WriterCounts


class NaiveLoop(LearnerLoop):
    def _loop(self) -> str:
        p = self.parts
        r, replay, counters = p.config.run, p.replay, p.naive.counters
        total, next_log, next_housekeeping = r.total_env_steps, r.log_every, 0.0
        while True:
            done, env_steps = int(counters[DONE]), replay.env_steps
            if self.probe is None and env_steps >= r.learning_starts:
                self.probe = torch.from_numpy(replay.sample_obs(self.rngs, r.probe_size))
            if env_steps >= total and done >= p.limiter.max_updates:
                return "completed"
            if done >= next_log:
                next_log = (done // r.log_every + 1) * r.log_every
                if not self._log(None):
                    return "diverged"
            now = time.monotonic()
            if now >= next_housekeeping:
                next_housekeeping = now + HOUSEKEEPING_S
                p.pool.health_check()
                self.cb.on_progress(env_steps, done, total, now - self.t0)
            if self.evaluator.due(env_steps) and not self._evaluate():
                return "diverged"
            time.sleep(1e-3)

    def read_shared_parameters(self) -> None:
        """The learner's network (evaluated, probed) becomes the shared vector (the updates the workers
        have applied are the replay's counter, which they publish)."""
        naive = self.parts.naive
        flat = np.empty_like(naive.params)
        naive.snapshot(flat, locked=self._writers_may_run())
        load_flat_(self.parts.learner.net, flat)

    def _writers_may_run(self) -> bool:
        """Whether a worker may still write: once the pool is stopped (a failure path's last log point) none
        is alive, and one killed may have died holding the naive lock, so the shared state is read without it."""
        return not self.parts.pool.stopped

    def writer_counts(self) -> WriterCounts:
        naive = self.parts.naive
        with naive.lock if self._writers_may_run() else contextlib.nullcontext():
            counts = naive.counters
            lost = lost_updates(naive.lineage, int(counts[DONE])) if self.parts.config.run.writers == "local_copies" else 0
            raced = float(counts[RACED]) / max(int(counts[WRITES]), 1)
            stale = float(counts[STALE_SUM]) / max(int(counts[STALE_N]), 1)
            copies = float(counts[TARGET_COPIES]) / self.parts.config.env.num_workers
        return WriterCounts(float(lost), raced, stale, copies)
