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
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from dqnlab.actor import Actor, ActorBoard, actor_main, epsilon_for
from dqnlab.callbacks import CallbackList
from dqnlab.config import Config, ConfigError
from dqnlab.diagnostics import divergence_flags, dormant_fractions, q_bound, srank
from dqnlab.evaluation import evaluate
from dqnlab.learner import Learner
from dqnlab.limiter import RateLimiter, realised_utd
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
    """Outcome of one run. ``status``: completed | diverged | failed | interrupted."""

    status: str
    config: Config
    history: list[dict[str, float]] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    wall_s: float = 0.0

    def summary(self) -> str:
        f = self.final
        keys = [
            ("env_steps", "{:.0f}"), ("updates", "{:.0f}"), ("utd_realised", "{:.4f}"),
            ("env_steps_per_s_total", "{:.0f}"), ("updates_per_s_total", "{:.0f}"),
            ("policy_lag_mean", "{:.1f}"), ("policy_lag_max", "{:.0f}"), ("eval_return_mean", "{:.1f}"),
            ("eval_return_best", "{:.1f}"), ("td_loss", "{:.4g}"), ("q_max", "{:.2f}"), ("srank", "{:.0f}"),
            ("dormant_frac", "{:.3f}"),
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
    stopping everything. ``step_delay_s`` injects a per-step sleep into given workers (tests)."""
    obs_dim, num_actions = inspect_env(config.env.env_id)
    if config.run.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: got 'cuda' but torch.cuda.is_available() is False; allowed: 'cpu'")
    engine = _Engine(config, obs_dim, num_actions, CallbackList(callbacks), step_delay_s or {})
    return engine.run()


class _Engine:
    def __init__(self, config: Config, obs_dim: int, num_actions: int, callbacks: CallbackList, delays):
        self.config = config
        self.cb = callbacks
        self.delays = delays
        c, r, a = config, config.run, config.agent
        self.limiter = RateLimiter(a.utd, r.learning_starts, r.limiter_slack, strict=r.limiter == "strict")
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
        # window accumulators (reset at each log point)
        self._lag_sum = 0.0
        self._lag_n = 0
        self._lag_max = 0
        self._stale_sum = 0.0
        self._learner_wait_s = 0.0
        self._eval_pending: dict[str, float] = {}
        self._eval_best = -math.inf
        self._evals_done = 0
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
                status = self._loop()
                self._final_log()
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
        r = self.config.run
        learner, replay, limiter = self.learner, self.replay, self.limiter
        health = self.health_check if self.procs else None
        total = r.total_env_steps
        final_updates = limiter.final_updates(total)
        next_housekeeping = 0.0
        attempt = 0
        rr = 0
        while True:
            env_steps = replay.env_steps
            updates = learner.updates
            collected = env_steps >= total
            if collected and (not limiter.strict or updates >= final_updates):
                return "completed"
            if limiter.learner_may_update(env_steps, updates) and not (collected and updates >= final_updates):
                attempt = 0
                if self.probe is None:
                    self.probe = torch.from_numpy(replay.sample_obs(self.rng, r.probe_size))
                batch = replay.sample(self.rng, self.config.agent.batch_size, health)
                lag = updates - batch.version
                self._lag_sum += float(lag.sum())
                self._lag_n += len(lag)
                self._lag_max = max(self._lag_max, int(lag.max()))
                self._stale_sum += float((batch.insert_updates - batch.version).sum())
                log_now = (updates + 1) % r.log_every == 0
                stats = learner.update(batch, want_stats=log_now)
                replay.set_updates(learner.updates)
                if learner.updates % r.publish_every == 0:
                    self._publish()
                if log_now and self._log(stats) == "diverged":
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
            if replay.env_steps >= self._next_eval:
                self._evaluate()

    # --- evaluation and logging --------------------------------------------------------------
    def _evaluate(self) -> None:
        r = self.config.run
        self._next_eval += r.eval_every_steps
        flatten_into(self.learner.net, self.eval_policy.params)
        res = evaluate(self.eval_policy, self.eval_env, r.eval_episodes, self.config.agent.gamma,
                       seed=r.seed * 1_000_000 + 10_000 + self._evals_done * r.eval_episodes)  # fmt: skip
        self._evals_done += 1
        self._eval_pending = res.metrics()
        self._eval_pending["eval_env_steps"] = float(self.replay.env_steps)
        self._eval_best = max(self._eval_best, res.metrics()["eval_return_mean"])

    def _log(self, stats: dict[str, float] | None, read_episodes: bool = True) -> str | None:
        c, r, a = self.config, self.config.run, self.config.agent
        now = time.monotonic()
        replay, learner = self.replay, self.learner
        env_steps, updates = replay.env_steps, learner.updates
        m: dict[str, float] = {"env_steps": env_steps, "updates": updates, "time_s": now - self.t0}
        last = self.history[-1] if self.history else {"env_steps": 0, "updates": 0, "time_s": 0.0}
        dt = max(now - self.t0 - last["time_s"], 1e-9)
        m["env_steps_per_s"] = (env_steps - last["env_steps"]) / dt
        m["updates_per_s"] = (updates - last["updates"]) / dt
        m["env_steps_per_s_total"] = env_steps / max(now - self.t0, 1e-9)
        m["updates_per_s_total"] = updates / max(now - self.t0, 1e-9)
        m["utd_realised"] = realised_utd(updates, env_steps, r.learning_starts)
        m["utd_deficit"] = self.limiter.deficit(env_steps, updates)
        m["limiter_bound"] = self.limiter.max_deficit(c.env.envs_per_worker)
        m["learner_wait_s"] = self._learner_wait_s
        m["actor_wait_s"] = float(self.board.wait_s.sum())
        m["epsilon_mean"] = float(np.mean([epsilon_for(c, w, env_steps) for w in range(c.env.num_workers)]))
        if self._lag_n:
            m["policy_lag_mean"] = self._lag_sum / self._lag_n
            m["policy_lag_max"] = float(self._lag_max)
            m["actor_staleness_mean"] = self._stale_sum / self._lag_n
        self._lag_sum, self._lag_n, self._lag_max, self._stale_sum = 0.0, 0, 0, 0.0
        produced, resident, sampled = replay.produced(), replay.resident(), replay.sampled
        for w in range(c.env.num_workers):
            m[f"worker{w}_produced_share"] = produced[w] / max(produced.sum(), 1)
            m[f"worker{w}_resident_share"] = resident[w] / max(resident.sum(), 1)
            m[f"worker{w}_sampled_share"] = sampled[w] / max(sampled.sum(), 1)
        loss = learner.pop_mean_loss()
        if loss is not None:
            m["td_loss"] = loss
        if stats:
            m.update(stats)
        m["param_norm"] = learner.param_norm()
        m["target_updates"] = learner.target_updates
        m["resets"] = learner.resets
        hard = not math.isfinite(m["param_norm"])
        if self.probe is not None:
            q, acts = learner.probe(self.probe)
            q_abs_max = float(q.abs().max())
            r_max = c.env.reward_bound or replay.max_abs_reward() or 1.0
            bound = q_bound(r_max, a.gamma)
            soft, hard_q = divergence_flags(q_abs_max, bound)
            hard = hard or hard_q
            m["q_probe_abs_max"] = q_abs_max
            m["q_bound"] = bound
            m["soft_divergence"] = float(soft)
            if not hard:
                m["srank"] = float(srank(acts[-1]))
                m.update(dormant_fractions(acts))
                m["dormant_frac"] = m["dormant_frac_tau0.1"]
        m["hard_divergence"] = float(hard)
        episodes = replay.new_episodes() if read_episodes else []
        if episodes:
            m["train_return_mean"] = float(np.mean([e[1] for e in episodes]))
            m["train_length_mean"] = float(np.mean([e[2] for e in episodes]))
            m["train_episodes"] = float(len(episodes))
        m.update(self._eval_pending)
        self._eval_pending = {}
        if self._evals_done:
            m["eval_return_best"] = self._eval_best
        self.history.append(m)
        self.cb.on_log(m)
        return "diverged" if hard else None

    def _last_words(self) -> None:
        """One more log point on a failure path, so that a crash keeps what the run had measured.
        It reads no locked state: a killed actor may have died holding the replay lock."""
        try:
            self._log(None, read_episodes=False)
        except Exception:  # the run is already failing; its original error is what matters
            pass

    def _final_log(self) -> None:
        if self.config.run.eval_every_steps:
            self._evaluate()
        self._log(None)

    def _result(self, status: str, error: str | None) -> RunResult:
        final: dict[str, float] = {}  # the latest value of every metric
        for record in self.history:
            final.update(record)
        return RunResult(status, self.config, list(self.history), final, error, time.monotonic() - self.t0)

