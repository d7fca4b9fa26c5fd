"""The learner loop: it only schedules. Each turn it takes a gradient update when the limiter allows
(serial mode: else steps an actor), does housekeeping (worker health, progress), evaluates when due,
and at each log point records the metrics window and checks the collapse signs; hard divergence
ends the run as ``diverged``. Every exit path stops every actor.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from dqnlab.agent.collapse import collapse_signs
from dqnlab.engine.build import EngineParts
from dqnlab.engine.evaluator import Evaluator
from dqnlab.engine.replay import GO, STOP, wait_backoff
from dqnlab.engine.result import RunFailed, RunResult
from dqnlab.engine.window import MetricsWindow
from dqnlab.metrics import ENV_STEPS
from dqnlab.signals import sigterm_as_interrupt
from dqnlab.threads import set_threads
from dqnlab.tracking.callbacks import CallbackList

HOUSEKEEPING_S = 0.1  # how often the learner checks workers and reports progress


class Engine:
    def __init__(self, parts: EngineParts, callbacks: CallbackList):
        self.parts = parts
        self.cb = callbacks
        self.window = MetricsWindow(parts)
        self.evaluator = Evaluator(parts.config, parts.layout)
        self.rng = np.random.default_rng([parts.config.run.seed, 1_000_003])  # the learner's sampling stream
        self.history: list[dict[str, float]] = []
        self.probe: torch.Tensor | None = None
        self.t0 = time.monotonic()

    # --- lifecycle -----------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run to the budget: ``completed`` or ``diverged``; RunFailed on a crash (with the partial
        result); KeyboardInterrupt (SIGINT/SIGTERM) re-raised after a clean stop."""
        self.t0 = time.monotonic()
        self.cb.on_start(self.parts.config)
        prev_threads = set_threads(self.parts.config.run.learner_threads)
        pool = self.parts.pool
        with sigterm_as_interrupt():
            try:
                pool.start()
                status = self._finish(self._loop())
            except KeyboardInterrupt:
                self._stop()
                self._last_words()
                self.cb.on_end(self._result("interrupted", "interrupted (SIGINT/SIGTERM)"))
                raise
            except BaseException as exc:
                self._stop()
                self._last_words()
                result = self._result("failed", str(exc))
                self.cb.on_end(result)
                raise RunFailed(f"run failed: {exc}", result) from exc
            finally:
                self._stop()
                set_threads(prev_threads)
        result = self._result(status, None)
        self.cb.on_end(result)
        return result

    def _stop(self) -> None:
        self.parts.pool.stop()
        self.evaluator.close()

    # --- scheduling ----------------------------------------------------------------------------
    def _loop(self) -> str:
        p = self.parts
        r = p.config.run
        learner, replay, limiter, pool = p.learner, p.replay, p.limiter, p.pool
        health = pool.health_check if pool.procs else None
        total = r.total_env_steps
        next_housekeeping = 0.0
        attempt = 0
        while True:
            env_steps, updates = replay.env_steps, learner.updates
            if env_steps >= total and (not limiter.strict or updates >= limiter.max_updates):
                return "completed"
            if limiter.learner_may_update(env_steps, updates):
                attempt = 0
                if self.probe is None:
                    self.probe = torch.from_numpy(replay.sample_obs(self.rng, r.probe_size))
                batch = replay.sample(self.rng, p.config.agent.batch_size, health)
                self.window.lag.add(updates - batch.version, batch.insert_updates - batch.version)
                log_now = (updates + 1) % r.log_every == 0
                stats = learner.update(batch, want_stats=log_now)
                replay.set_updates(learner.updates)
                if learner.updates % r.publish_every == 0:
                    p.publish()
                if log_now and self._log(stats):
                    return "diverged"
            elif pool.serial:  # collect with the same actors, under the same limiter
                code = pool.step_one()
                if code not in (GO, STOP) and replay.env_steps < total:
                    raise RuntimeError("limiter deadlock: neither the learner nor any actor may proceed")
            else:
                self.window.learner_wait_s += wait_backoff(attempt)
                attempt += 1
            now = time.monotonic()
            if now >= next_housekeeping:
                next_housekeeping = now + HOUSEKEEPING_S
                if health is not None:
                    health()
                self.cb.on_progress(replay.env_steps, learner.updates, total, now - self.t0)
            if self.evaluator.due(replay.env_steps) and not self._evaluate():
                self._log(None)  # records the hard divergence the evaluation refused to run on
                return "diverged"

    def _finish(self, status: str) -> str:
        """A last evaluation (unless one was just taken at this env step) and a last log point. A
        diverged run has logged its divergence already and is not evaluated again."""
        if status == "diverged":
            return status
        if self.evaluator.final_due(self.parts.replay.env_steps) and not self._evaluate():
            status = "diverged"
        return "diverged" if self._log(None) else status

    # --- records --------------------------------------------------------------------------------
    def _record(self, m: dict[str, float]) -> None:
        self.history.append(m)
        self.cb.on_log(m)

    def _evaluate(self) -> bool:
        """Record one evaluation at its own env step; False (nothing evaluated) on non-finite weights."""
        stamp = self.window.stamp(time.monotonic() - self.t0)
        metrics = self.evaluator.evaluate(self.parts.learner.net, stamp[ENV_STEPS])
        if metrics is None:
            return False
        self._record({**stamp, **metrics})
        return True

    def _log(self, stats: dict[str, float] | None, read_episodes: bool = True) -> bool:
        """Record a log point with the collapse signs; returns whether the network hard-diverged."""
        p = self.parts
        m = self.window.log_point(time.monotonic() - self.t0, stats, read_episodes)
        r_max = p.config.env.reward_bound or p.replay.max_abs_reward() or 1.0
        signs = collapse_signs(p.learner, self.probe, r_max, p.config.agent.gamma)
        m.update(signs.metrics)
        self._record(m)
        return signs.hard_divergence

    def _last_words(self) -> None:
        """One more log point on a failure path, so that a crash keeps what the run had measured."""
        try:
            self._log(None, read_episodes=False)
        except Exception:  # the run is already failing; its original error is what matters
            pass

    def _result(self, status: str, error: str | None) -> RunResult:
        final: dict[str, float] = {}  # the latest value of every metric
        for record in self.history:
            final.update(record)
        return RunResult(status, self.parts.config, list(self.history), final, error, time.monotonic() - self.t0)
