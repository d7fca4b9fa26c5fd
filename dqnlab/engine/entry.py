"""The engine's entry point: :func:`train` checks a config against this machine, builds the run
(:mod:`dqnlab.engine.build`) and drives it (:mod:`dqnlab.engine.loop`), in this process or, when this
process has other threads, in a fresh thread-free one (:mod:`dqnlab.engine.fresh_process`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from dqnlab.config import Config, ConfigError
from dqnlab.engine.build import build, make_loop
from dqnlab.engine.result import RunFailed, RunResult
from dqnlab.tracking.callbacks import CallbackList


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


def train(config: Config, callbacks: Iterable[Any] = ()) -> RunResult:
    """Run ``config`` to its env-step budget. Returns status ``completed`` or ``diverged``; raises
    :class:`RunFailed` (with the partial result) on a crash and re-raises KeyboardInterrupt after
    stopping everything.

    Actors are never forked from a process that runs other threads (a fork copies the locks they may
    hold): called from such a process (a notebook kernel, a sweep, a program that used MLflow's
    thread pools), a parallel run is carried out in a fresh thread-free process
    (:mod:`dqnlab.engine.fresh_process`, ~1.6 s to start) and ``callbacks`` still receive every event here."""
    obs_dim, num_actions = inspect_env(config.env.env_id)
    if config.network.conv_channels:
        raise ConfigError(f"conv_channels: got {config.network.conv_channels!r}; allowed: () for now: the engine's "
                          "actors and replay run vector observations (the convolution layers are tested on their "
                          "own, tests/test_networks.py, and usable through Learner and QNetwork)")  # fmt: skip
    if config.run.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: got 'cuda' but torch.cuda.is_available() is False; allowed: 'cpu'")
    if config.run.mode == "parallel" and other_threads():
        return _train_in_fresh_process(config, list(callbacks))
    return make_loop(build(config, obs_dim, num_actions), CallbackList(callbacks)).run()


def other_threads() -> list[str]:
    """Names of the live Python threads of this process other than the calling one."""
    return [t.name for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive()]


def _train_in_fresh_process(config: Config, callbacks: list[Any]) -> RunResult:
    from dqnlab.engine.fresh_process import Outcome, TrialRequest, run_trial

    outcome = run_trial(TrialRequest(config, quiet=True, env_spec=gym.spec(config.env.env_id)), callbacks)
    if outcome.kind is Outcome.RESULT:
        return outcome.result
    if outcome.kind is Outcome.CONFIG:
        raise ConfigError(outcome.message)
    if outcome.kind is Outcome.INTERRUPTED:
        raise KeyboardInterrupt(outcome.message)
    result = outcome.result or RunResult("failed", config, error=outcome.message)
    raise RunFailed(f"run failed: {outcome.message}", result) from outcome.exception
