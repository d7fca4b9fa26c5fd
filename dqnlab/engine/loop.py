"""The learner loop: it only schedules. Each turn it takes a gradient update of every replica when
the limiter allows (serial mode: else steps an actor), does housekeeping (worker health, progress),
evaluates when due, and at each log point records the metrics window and checks each replica's
collapse signs. A replica that hard-diverges is frozen and its history ends there; the run goes on
while one replica is left, and ends ``diverged`` when none is. Every exit path stops every actor.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from dqnlab.agent.collapse import collapse_signs, divergence_check
from dqnlab.engine.eval_schedule import EvalSchedule
from dqnlab.engine.parts import EngineParts
from dqnlab.engine.replay import GO, STOP, wait_backoff
from dqnlab.engine.result import ReplicaResult, RunFailed, RunResult
from dqnlab.engine.sampler import Sampler
from dqnlab.engine.window import MetricsWindow, WriterCounts
from dqnlab.metrics import ENV_STEPS, UPDATES
from dqnlab.signals import CaughtSignal, interrupts_recorded
from dqnlab.threads import learner_cpu
from dqnlab.tracking.callbacks import CallbackList

HOUSEKEEPING_S = 0.1  # how often the learner checks workers and reports progress
PROBE_STREAM = 1_000_003  # the learner's sampling generator of replica k: default_rng([seed + k, PROBE_STREAM])
CURRENT_STREAM = 1_000_033  # replica k's draws of the current-data batch: default_rng([seed + k, CURRENT_STREAM])


class LearnerLoop:
    """Drives one run of the single learner (``writers='single'``) to its budget; the naive setups'
    loop (:class:`~dqnlab.engine.naive_loop.NaiveLoop`) replaces :meth:`_loop` and the hooks."""

    def __init__(self, parts: EngineParts, callbacks: CallbackList):
        self.parts = parts
        self.cb = callbacks
        self.caught = CaughtSignal()  # the run's SIGINT/SIGTERM, once caught (set by run)
        self.window = MetricsWindow(parts, self.writer_counts)
        self.evaluator = EvalSchedule(parts.config, parts.spec)
        r = parts.config.run
        self.rngs = [np.random.default_rng([r.seed + k, PROBE_STREAM]) for k in range(r.replicas)]
        # a stream of its own, so that measuring current data never changes what the learner samples
        self.current_rngs = [np.random.default_rng([r.seed + k, CURRENT_STREAM]) for k in range(r.replicas)]
        self.histories: list[list[dict[str, float]]] = [[] for _ in range(r.replicas)]
        self.diverged: set[int] = set()
        self.probe: torch.Tensor | None = None
        self.t0 = time.monotonic()

    @property
    def active(self) -> list[int]:
        return [k for k in range(len(self.histories)) if k not in self.diverged]

    # --- lifecycle -----------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run to the budget: ``completed`` or ``diverged``; RunFailed on a crash (with the partial
        result); KeyboardInterrupt (SIGINT/SIGTERM) re-raised after a clean stop."""
        self.t0 = time.monotonic()
        self.cb.on_start(self.parts.config)
        with interrupts_recorded() as self.caught, learner_cpu(self.parts.config.run.learner_threads):
            try:
                self.parts.pool.start()
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
        sampler = Sampler(replay, p.config, self.rngs, health)
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
                    self.probe = torch.from_numpy(replay.sample_obs(self.rngs, r.probe_size))
                batch = sampler.draw(env_steps)
                self.window.lag.add(updates, batch.version, batch.insert_updates)
                log_now = (updates + 1) % r.log_every == 0
                stats = learner.update(batch, want_stats=log_now, env_steps=env_steps)
                sampler.learned_from(batch, learner)
                replay.set_updates(learner.updates)
                if learner.updates % r.publish_every == 0:
                    p.publish()
                if log_now and not self._log(stats):
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
                self.caught.reraise()  # a signal whose raise was swallowed still stops the run
                if health is not None:
                    health()
                self.cb.on_progress(replay.env_steps, learner.updates, total, now - self.t0)
            if self.evaluator.due(replay.env_steps) and not self._evaluate():
                return "diverged"

    # --- hooks a loop whose workers write the parameters replaces -------------------------------
    def read_shared_parameters(self) -> None:
        """Make the learner's network the parameters to evaluate and probe: it already is."""

    def writer_counts(self) -> WriterCounts:
        """The single learner loses and races nothing, and its gradients are computed at the parameters
        they update; its target copies are its own count."""
        return WriterCounts(0.0, 0.0, 0.0, float(self.parts.learner.target_updates))

    def _finish(self, status: str) -> str:
        """A last evaluation (unless one was just taken at this env step) and a last log point of every
        replica still active. Every replica diverged: nothing is left to evaluate or log."""
        if status == "diverged":
            return status
        if self.evaluator.final_due(self.parts.replay.env_steps, self.parts.replay.updates) and not self._evaluate(True):
            return "diverged"
        return "completed" if self._log(None, final=True) else "diverged"

    # --- records --------------------------------------------------------------------------------
    def _record(self, replica: int, m: dict[str, float]) -> None:
        self.histories[replica].append(m)
        self.cb.on_log(replica, m)

    def _evaluate(self, final: bool = False) -> bool:
        """Record one evaluation of every active replica at its own env step. A replica whose weights
        are not finite is not evaluated: it is frozen, its divergence logged. False if none is left. A
        periodic evaluation that would be stamped at the last env step is left to the final one (taken
        after the last owed update)."""
        self.read_shared_parameters()
        stamp = self.window.stamp(time.monotonic() - self.t0)
        if not final and stamp[ENV_STEPS] >= self.parts.config.run.total_env_steps:
            return True
        results = self.evaluator.evaluate(self.parts.learner.net, stamp[ENV_STEPS], stamp[UPDATES], self.active)
        checks = self._divergence_check()  # a replica refused as non-finite is not recorded, its check unused
        for k, metrics in results.items():
            if metrics is not None:
                self._record(k, {**stamp, **metrics, **checks[k]})
        if any(m is None for m in results.values()):
            return self._log(None)  # records the hard divergence the evaluation refused to run on
        return True

    def _current_batch(self) -> torch.Tensor | None:
        """Per replica, ``probe_size`` states drawn afresh from the current replay (None before learning
        starts)."""
        r = self.parts.config.run
        if self.parts.replay.env_steps < r.learning_starts:
            return None
        return torch.from_numpy(self.parts.replay.sample_obs(self.current_rngs, r.probe_size))

    def _divergence_check(self, current: torch.Tensor | None = None) -> list[dict[str, float]]:
        """The soft-divergence check of every replica (at every evaluation and at the end: a schedule in
        env steps, the same number of checks at every UTD)."""
        c = self.parts.config
        current = current if current is not None else self._current_batch()
        return divergence_check(self.parts.learner, self.probe, current, self._reward_bounds(), c.agent.gamma,
                                c.env.divergence_margin)  # fmt: skip

    def _log(self, stats: list[dict[str, float]] | None, read_episodes: bool = True, final: bool = False) -> bool:
        """Record a log point of every active replica with its collapse signs (on the probe and on a
        batch of current data) and, at the end (``final``), the soft-divergence check; a replica that
        has hard-diverged is frozen (this is its last record). Returns whether any replica is left.
        ``read_episodes=False`` takes no lock (a failure path: a killed actor may hold the replay's)."""
        p, c = self.parts, self.parts.config
        self.read_shared_parameters()
        active = self.active
        points = self.window.log_points(time.monotonic() - self.t0, stats, active, read_episodes)
        current = self._current_batch() if read_episodes else None
        bounds = self._reward_bounds()
        signs = collapse_signs(p.learner, self.probe, current, bounds, c.agent.gamma, c.env.divergence_margin)
        checks = self._divergence_check(current) if final else None
        for k in active:
            points[k].update(signs[k].metrics)
            if checks and not signs[k].hard_divergence:
                points[k].update(checks[k])
            self._record(k, points[k])
            if signs[k].hard_divergence:
                self.diverged.add(k)
                p.learner.freeze(k)
        return bool(self.active)

    def _reward_bounds(self) -> list[float]:
        """Per replica, R_max for soft divergence: the configured bound, else the largest |r| in its replay."""
        bound = self.parts.config.env.reward_bound
        if bound:
            return [bound] * len(self.histories)
        return [float(x) or 1.0 for x in self.parts.replay.max_abs_reward()]

    def _last_words(self) -> None:
        """One more log point on a failure path, so that a crash keeps what the run had measured."""
        try:
            self._log(None, read_episodes=False)
        except Exception:  # the run is already failing; its original error is what matters
            pass

    def _result(self, status: str, error: str | None) -> RunResult:
        config = self.parts.config
        replicas = []
        for k, history in enumerate(self.histories):
            final: dict[str, float] = {}  # the latest value of every metric
            for record in history:
                final.update(record)
            own = "diverged" if k in self.diverged else status
            seed_config = config.replace(seed=config.run.seed + k, replicas=1)
            replicas.append(ReplicaResult(k, own, seed_config, list(history), final))
        return RunResult(status, config, replicas, error, time.monotonic() - self.t0)
