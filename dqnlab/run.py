"""Run orchestration: build replay, weights, actors and learner; drive the learner loop; stop
everything on every exit path.

The learner runs in the calling process. In ``parallel`` mode each actor is a forked process
(fork: ~4 ms a worker, and the anonymous shared memory of :mod:`dqnlab.shared` is inherited); in
``serial`` mode the same :class:`~dqnlab.actor.Actor` objects are stepped here whenever the limiter
does not let the learner update. Both modes share the limiter, replay and learner code.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from dqnlab import metrics as M
from dqnlab.actor import Actor, ActorBoard, actor_main, epsilon_for
from dqnlab.callbacks import CallbackList
from dqnlab.collapse import collapse_signs, parameters_finite
from dqnlab.config import Config, ConfigError
from dqnlab.evaluation import evaluate
from dqnlab.learner import Learner
from dqnlab.limiter import RateLimiter, realised_utd
from dqnlab.meters import LagMeter, ThroughputMeter
from dqnlab.metrics import (
    ACTOR_WAIT_S,
    ENV_STEPS,
    EPSILON_MEAN,
    EVAL_RETURN_BEST,
    EVAL_RETURN_MEAN,
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
from dqnlab.networks import NumpyQ, ParamLayout, flatten_into
from dqnlab.replay import GO, STOP, SharedReplay, wait_backoff
from dqnlab.shared import SharedArena
from dqnlab.signals import sigterm_as_interrupt
from dqnlab.threads import set_threads
from dqnlab.weights import WeightBroadcast

HOUSEKEEPING_S = 0.1  # how often the learner checks workers, evaluation and progress
JOIN_TIMEOUT_S = 3.0


class WorkerFailed(RuntimeError):
    """An actor died, raised or hung. ``worker`` is its id; ``traceback`` its own, when it had one."""

    def __init__(self, worker: int, reason: str, traceback: str = ""):
        self.worker, self.reason, self.traceback = worker, reason, traceback
        msg = f"worker {worker} {reason}"
        super().__init__(msg + (f"\n--- worker {worker} traceback ---\n{traceback}" if traceback else ""))


class RunFailed(RuntimeError):
    """The run crashed; ``result`` holds the status ``failed`` and every metric logged before."""

    def __init__(self, message: str, result: RunResult):
        super().__init__(message)
        self.result = result


@dataclass
class RunResult:
    """Outcome of one run. ``status``: completed | diverged | failed | interrupted.

    ``history`` holds two kinds of records, in the order they were taken, each stamped with its own
    ``env_steps``/``updates``/``time_s``: log points (every ``log_every`` updates and at the end) and
    evaluation records (every ``eval_every_steps`` env steps and at the end; they carry the
    ``eval_*`` metrics and ``overestimation``). A diverged run is never evaluated on non-finite
    weights, so its evaluations are those taken before divergence."""

    status: str
    config: Config
    history: list[dict[str, float]] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    wall_s: float = 0.0

    def summary(self) -> str:
        f = self.final
        keys = [
            (M.ENV_STEPS, "{:.0f}"), (M.UPDATES, "{:.0f}"), (M.UTD_REALISED, "{:.4f}"),
            (M.ENV_STEPS_PER_S_TOTAL, "{:.0f}"), (M.UPDATES_PER_S_TOTAL, "{:.0f}"),
            (M.POLICY_LAG_RUN_MEAN, "{:.1f}"), (M.POLICY_LAG_RUN_MAX, "{:.0f}"), (M.EVAL_RETURN_MEAN, "{:.1f}"),
            (M.EVAL_RETURN_BEST, "{:.1f}"), (M.TD_LOSS, "{:.4g}"), (M.Q_MAX, "{:.2f}"), (M.SRANK, "{:.0f}"),
            (M.DORMANT_FRAC, "{:.3f}"),
        ]  # fmt: skip
        parts = [f"{k}={fmt.format(f[k])}" for k, fmt in keys if k in f]
        line = f"run {self.status} in {self.wall_s:.1f}s: " + " ".join(parts)
        if self.error:
            line += f"\nerror: {self.error}"
        return line


def inspect_env(env_id: str) -> tuple[int, int]:
    """``(obs_dim, num_actions)`` of a gymnasium id; ConfigError if unknown or not DQN-shaped."""
    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise ConfigError(f"env_id: got {env_id!r}; allowed: a registered gymnasium id ({exc})") from None
    env = gym.make(env_id)
    try:
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ConfigError(f"env_id: {env_id!r} has action space {env.action_space}; allowed: Discrete")
        if not isinstance(env.observation_space, gym.spaces.Box):
            raise ConfigError(f"env_id: {env_id!r} has observation space {env.observation_space}; allowed: Box")
        return int(np.prod(env.observation_space.shape)), int(env.action_space.n)
    finally:
        env.close()


def train(config: Config, callbacks: Iterable[Any] = (), *, step_delay_s: dict[int, float] | None = None) -> RunResult:
    """Run ``config`` to its env-step budget. Returns status ``completed`` or ``diverged``; raises
    :class:`RunFailed` (with the partial result) on a crash and re-raises KeyboardInterrupt after
    stopping everything. ``step_delay_s`` injects a per-step sleep into given workers (tests).

    Actors are never forked from a process that runs other threads (a fork copies the locks they may
    hold): called from such a process (a notebook kernel, a sweep, a program that used MLflow's
    thread pools), a parallel run is carried out in a fresh thread-free process
    (:mod:`dqnlab.trial_process`, ~1.6 s to start) and ``callbacks`` still receive every event here."""
    obs_dim, num_actions = inspect_env(config.env.env_id)
    if config.run.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: got 'cuda' but torch.cuda.is_available() is False; allowed: 'cpu'")
    if config.run.mode == "parallel" and other_threads():
        return _train_in_fresh_process(config, list(callbacks), step_delay_s)
    engine = _Engine(config, obs_dim, num_actions, CallbackList(callbacks), step_delay_s or {})
    return engine.run()


def other_threads() -> list[str]:
    """Names of the live Python threads of this process other than the calling one."""
    return [t.name for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive()]


def _train_in_fresh_process(config: Config, callbacks: list[Any], step_delay_s: dict[int, float] | None) -> RunResult:
    from dqnlab.trial_process import TrialRequest, run_trial

    outcome = run_trial(TrialRequest(config, quiet=True, env_spec=gym.spec(config.env.env_id),
                                     step_delay_s=step_delay_s), callbacks)  # fmt: skip
    if outcome.kind == "result":
        return outcome.result
    if outcome.kind == "config":
        raise ConfigError(outcome.message)
    if outcome.kind == "interrupted":
        raise KeyboardInterrupt(outcome.message)
    result = outcome.result or RunResult("failed", config, error=outcome.message)
    raise RunFailed(f"run failed: {outcome.message}", result) from outcome.exception


class _Engine:
    def __init__(self, config: Config, obs_dim: int, num_actions: int, callbacks: CallbackList, delays):
        self.config = config
        self.cb = callbacks
        self.delays = delays
        c, r, a = config, config.run, config.agent
        self.limiter = RateLimiter(a.utd, r.learning_starts, r.limiter_slack, r.limiter == "strict").for_budget(
            r.total_env_steps
        )
        self.learner = Learner(config, obs_dim, num_actions, r.device)
        self.layout = ParamLayout.of(self.learner.net)
        self.arena = SharedArena()
        self.replay = SharedReplay(
            self.arena, mp.get_context("fork").Lock(), a.buffer_capacity, obs_dim,
            c.env.num_workers, self.limiter, r.total_env_steps,
        )  # fmt: skip
        self.weights = WeightBroadcast(self.arena, self.layout.size)
        self.board = ActorBoard(self.arena, c.env.num_workers)
        self.arena.allocate()
        self.replay.bind()
        self.board.bind()
        self._flat = np.zeros(self.layout.size, dtype=np.float32)
        self._publish()
        self.eval_policy = NumpyQ(self.layout, len(c.network.hidden_sizes), c.network.layer_norm)
        self.eval_env = gym.make(c.env.env_id)
        self.rng = np.random.default_rng([r.seed, 1_000_003])
        self.procs: list[mp.Process] = []
        self.actors: list[Actor] = []
        self.history: list[dict[str, float]] = []
        self.probe: torch.Tensor | None = None
        self._stopping = False
        self.lag = LagMeter()
        self.throughput = ThroughputMeter()
        self._learner_wait_s = 0.0
        self._eval_best = -math.inf
        self._evals_done = 0
        self._last_eval_steps: int | None = None
        self._next_eval = r.eval_every_steps if r.eval_every_steps else math.inf

    # --- set-up and tear-down ----------------------------------------------------------------
    def _publish(self) -> None:
        flatten_into(self.learner.net, self._flat)
        self.weights.publish(self._flat, self.learner.updates)

    def _start_actors(self) -> None:
        c = self.config
        self.board.heartbeat[:] = time.monotonic()
        if c.run.mode == "serial":
            self.actors = [
                Actor(w, c, self.replay, self.weights, self.layout, self.board, None, self.delays.get(w, 0.0))
                for w in range(c.env.num_workers)
            ]
            return
        ctx = mp.get_context("fork")
        for w in range(c.env.num_workers):
            p = ctx.Process(
                target=actor_main,
                args=(w, c, self.replay, self.weights, self.layout, self.board, self.delays.get(w, 0.0)),
                name=f"dqnlab-actor-{w}",
                daemon=True,
            )
            p.start()
            self.procs.append(p)

    def _stop_actors(self) -> None:
        self._stopping = True
        self.replay.request_stop()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(1.0)
        for p in self.procs:
            if p.exitcode is not None:
                p.close()
        for actor in self.actors:
            actor.close()
        self.eval_env.close()

    def health_check(self) -> None:
        """Raise WorkerFailed if an actor exited with an error, was killed, or stopped beating."""
        now = time.monotonic()
        timeout = self.config.run.worker_timeout_s
        for w, p in enumerate(self.procs):
            code = p.exitcode
            if code is not None and code != 0:
                if code < 0:
                    reason = f"(pid {p.pid}) was killed by {signal.Signals(-code).name}"
                else:
                    reason = f"(pid {p.pid}) exited with code {code}"
                raise WorkerFailed(w, reason, self.board.read_error(w))
            if code is None and now - self.board.heartbeat[w] > timeout:
                p.kill()
                raise WorkerFailed(w, f"(pid {p.pid}) hung: no heartbeat for {now - self.board.heartbeat[w]:.1f}s")

    # --- the loop --------------------------------------------------------------------------
    def run(self) -> RunResult:
        self.t0 = time.monotonic()
        self.cb.on_start(self.config)
        status, error = "completed", None
        prev_threads = set_threads(self.config.run.learner_threads)
        with sigterm_as_interrupt():
            try:
                self._start_actors()
                status = self._finish(self._loop())
            except KeyboardInterrupt:
                status, error = "interrupted", "interrupted (SIGINT/SIGTERM)"
                self._stop_actors()
                self._last_words()
                result = self._result(status, error)
                self.cb.on_end(result)
                raise
            except BaseException as exc:
                self._stop_actors()
                self._last_words()
                result = self._result("failed", str(exc))
                self.cb.on_end(result)
                raise RunFailed(f"run failed: {exc}", result) from exc
            finally:
                if not self._stopping:
                    self._stop_actors()
                set_threads(prev_threads)
        result = self._result(status, error)
        self.cb.on_end(result)
        return result

    def _loop(self) -> str:
        """Schedule updates, collection (serial mode), housekeeping and evaluations until the budget
        is spent (``completed``) or the network hard-diverges (``diverged``)."""
        r = self.config.run
        learner, replay, limiter = self.learner, self.replay, self.limiter
        health = self.health_check if self.procs else None
        total = r.total_env_steps
        next_housekeeping = 0.0
        attempt = 0
        rr = 0
        while True:
            env_steps = replay.env_steps
            updates = learner.updates
            if env_steps >= total and (not limiter.strict or updates >= limiter.max_updates):
                return "completed"
            if limiter.learner_may_update(env_steps, updates):
                attempt = 0
                if self.probe is None:
                    self.probe = torch.from_numpy(replay.sample_obs(self.rng, r.probe_size))
                batch = replay.sample(self.rng, self.config.agent.batch_size, health)
                self.lag.add(updates - batch.version, batch.insert_updates - batch.version)
                log_now = (updates + 1) % r.log_every == 0
                stats = learner.update(batch, want_stats=log_now)
                replay.set_updates(learner.updates)
                if learner.updates % r.publish_every == 0:
                    self._publish()
                if log_now and self._log(stats):
                    return "diverged"
            elif self.actors:  # serial: collect with the same actors, same limiter
                stepped = False
                for _ in range(len(self.actors)):
                    code = self.actors[rr].try_step()
                    rr = (rr + 1) % len(self.actors)
                    if code == GO:
                        stepped = True
                        break
                if not stepped and replay.env_steps < total and code != STOP:
                    raise RuntimeError("limiter deadlock: neither the learner nor any actor may proceed")
            else:
                self._learner_wait_s += wait_backoff(attempt)
                attempt += 1
            now = time.monotonic()
            if now >= next_housekeeping:
                next_housekeeping = now + HOUSEKEEPING_S
                if health is not None:
                    health()
                self.cb.on_progress(replay.env_steps, learner.updates, total, now - self.t0)
            if replay.env_steps >= self._next_eval and not self._evaluate():
                self._log(None)  # records the hard divergence the evaluation refused to run on
                return "diverged"

    def _finish(self, status: str) -> str:
        """The end of a run: a last evaluation (unless one was just taken at this env step) and a last
        log point. A diverged run has logged its divergence already and is not evaluated again."""
        if status == "diverged":
            return status
        if self.config.run.eval_every_steps and self._last_eval_steps != self.replay.env_steps:
            if not self._evaluate():
                status = "diverged"
        return "diverged" if self._log(None) else status

    # --- evaluation and logging --------------------------------------------------------------
    def _record(self, m: dict[str, float]) -> None:
        self.history.append(m)
        self.cb.on_log(m)

    def _evaluate(self) -> bool:
        """Greedy evaluation of the current weights, recorded at once at the env step it was taken.
        Returns False, evaluating nothing, when a weight is not finite (the run has hard-diverged)."""
        r = self.config.run
        env_steps, updates = self.replay.env_steps, self.learner.updates
        # the next evaluation is due at the next multiple: a burst of env steps never queues evals
        self._next_eval = (env_steps // r.eval_every_steps + 1) * r.eval_every_steps
        flatten_into(self.learner.net, self.eval_policy.params)
        if not parameters_finite(self.eval_policy.params):
            return False
        res = evaluate(self.eval_policy, self.eval_env, r.eval_episodes, self.config.agent.gamma,
                       seed=r.seed * 1_000_000 + 10_000 + self._evals_done * r.eval_episodes)  # fmt: skip
        self._evals_done += 1
        self._last_eval_steps = env_steps
        m = res.metrics()
        self._eval_best = max(self._eval_best, m[EVAL_RETURN_MEAN])
        record = {ENV_STEPS: env_steps, UPDATES: updates, TIME_S: time.monotonic() - self.t0, **m}
        record[EVAL_RETURN_BEST] = self._eval_best
        self._record(record)
        return True

    def _log(self, stats: dict[str, float] | None, read_episodes: bool = True) -> bool:
        """Record one log point; returns whether the network has hard-diverged."""
        c, r, a = self.config, self.config.run, self.config.agent
        elapsed = time.monotonic() - self.t0
        replay, learner = self.replay, self.learner
        env_steps, updates = replay.env_steps, learner.updates
        m: dict[str, float] = {ENV_STEPS: env_steps, UPDATES: updates, TIME_S: elapsed}
        m.update(self.throughput.pop(elapsed, env_steps, updates))
        m[UTD_REALISED] = realised_utd(updates, env_steps, r.learning_starts)
        m[UTD_DEFICIT] = self.limiter.deficit(env_steps, updates)
        m[LIMITER_BOUND] = self.limiter.max_deficit(c.env.envs_per_worker)
        m[LEARNER_WAIT_S] = self._learner_wait_s
        m[ACTOR_WAIT_S] = float(self.board.wait_s.sum())
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
        r_max = c.env.reward_bound or replay.max_abs_reward() or 1.0
        signs = collapse_signs(learner, self.probe, r_max, a.gamma)
        m.update(signs.metrics)
        episodes = replay.new_episodes() if read_episodes else []
        if episodes:
            m[TRAIN_RETURN_MEAN] = float(np.mean([e[1] for e in episodes]))
            m[TRAIN_LENGTH_MEAN] = float(np.mean([e[2] for e in episodes]))
            m[TRAIN_EPISODES] = float(len(episodes))
        self._record(m)
        return signs.hard_divergence

    def _last_words(self) -> None:
        """One more log point on a failure path, so that a crash keeps what the run had measured.
        It reads no locked state: a killed actor may have died holding the replay lock."""
        try:
            self._log(None, read_episodes=False)
        except Exception:  # the run is already failing; its original error is what matters
            pass

    def _result(self, status: str, error: str | None) -> RunResult:
        final: dict[str, float] = {}  # the latest value of every metric
        for record in self.history:
            final.update(record)
        return RunResult(status, self.config, list(self.history), final, error, time.monotonic() - self.t0)
