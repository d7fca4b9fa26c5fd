"""An actor's environments: the ``n`` envs of one replica, stepped as one bank with same-step autoreset.

``bank.step(actions, out)`` writes every env's transition into ``out`` (``next_obs`` is the true last
observation where an episode ended, ``terminated`` and ``truncated`` apart) and the observations to act
on next, a fresh reset one where the episode ended: what a loop of ``env.step`` and, on done,
``env.reset`` gives; it returns whether any episode ended. ``out`` is the caller's preallocated
``(next_obs, rewards, terminated, truncated, obs)`` arrays of ``n`` rows (no allocation per step: an
actor steps tens of thousands of times a second).

- :class:`GymBank`: ``n`` ``gym.make`` envs stepped in a Python loop (any registered env).
- :class:`CartPoleBank`: CartPole-v0/v1 as numpy arrays over the ``n`` envs, gymnasium's
  ``CartPoleEnv`` dynamics and ``TimeLimit`` truncation written out in the same floating-point order
  (tested transition by transition against gymnasium). One call steps all ``n`` in ~25 us, where the
  loop costs ~7-12 us per env. (gymnasium's own ``CartPoleVectorEnv`` resets on the *next* step; a
  replica whose step sometimes yields no transition would break the replicas' lockstep.)

:func:`make_bank` picks :class:`CartPoleBank` for CartPole from :data:`VECTOR_MIN_ENVS` envs on,
where it measures faster (``python -m dqnlab.bench``); below that the loop is faster.
Every bank draws its env seeds from the replica's generator it is given, so a replica's envs are
the same whatever the other replicas are.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np

VECTOR_MIN_ENVS = 4
CARTPOLE_ENTRY_POINT = "gymnasium.envs.classic_control.cartpole:CartPoleEnv"
SEED_HIGH = 2**31 - 1


def time_limit(env_id: str, max_episode_steps: int | None) -> int | None:
    """The episode step limit of ``env_id``: ``max_episode_steps`` when given, else its registered one."""
    return max_episode_steps or gym.spec(env_id).max_episode_steps


class GymBank:
    """``n`` ``gym.make(env_id)`` envs (env checker off: it costs ~15% of a cheap step; TimeLimit kept)."""

    def __init__(self, env_id: str, n: int, rng: np.random.Generator, max_episode_steps: int | None = None):
        limit = {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
        self.envs = [gym.make(env_id, disable_env_checker=True, **limit) for _ in range(n)]
        self._seeds = rng.integers(0, SEED_HIGH, size=n)
        self.num_actions = int(self.envs[0].action_space.n)
        self.max_episode_steps = self.envs[0].spec.max_episode_steps
        shape = self.envs[0].observation_space.shape
        self._flatten = shape is not None and len(shape) > 1  # a 1-D observation is written as it is

    def reset(self) -> np.ndarray:
        """First observations ``(n, obs_dim)``, each env seeded from the replica's generator."""
        return np.array([np.asarray(env.reset(seed=int(s))[0], dtype=np.float32).reshape(-1)
                         for env, s in zip(self.envs, self._seeds)])  # fmt: skip

    def step(self, actions: np.ndarray, out: tuple[np.ndarray, ...]) -> bool:
        """Step env i with ``actions[i]``; write ``(next_obs, rewards, terminated, truncated, obs)`` into
        ``out`` (observations flattened, as :meth:`reset` gives them); return whether any episode ended."""
        next_obs, rewards, terminated, truncated, obs = out
        ended = False
        for i, env in enumerate(self.envs):
            o, rewards[i], term, trunc, _ = env.step(int(actions[i]))
            terminated[i], truncated[i] = term, trunc
            next_obs[i] = np.reshape(o, -1) if self._flatten else o
            if term or trunc:
                o, _ = env.reset()
                ended = True
            obs[i] = np.reshape(o, -1) if self._flatten else o
        return ended

    def close(self) -> None:
        for env in self.envs:
            env.close()


class CartPoleBank:
    """``n`` CartPole envs as arrays: gymnasium's ``CartPoleEnv`` (Euler integration, reward 1 every
    step, termination at |x| > 2.4 or |theta| > 12 degrees) with ``TimeLimit`` truncation at
    ``max_episode_steps``; reset states uniform in [-0.05, 0.05]^4 from the bank's own generator."""

    GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    TOTAL_MASS = MASSPOLE + MASSCART
    POLEMASS_LENGTH = MASSPOLE * LENGTH
    THETA_LIMIT = 12 * 2 * math.pi / 360
    X_LIMIT = 2.4
    num_actions = 2

    def __init__(self, n: int, rng: np.random.Generator, max_episode_steps: int):
        self.n = n
        self.max_episode_steps = max_episode_steps
        self._rng = np.random.default_rng(rng.integers(0, SEED_HIGH, size=n))
        self.state = np.zeros((4, n))  # rows x, x_dot, theta, theta_dot (float64, as gymnasium keeps them)
        self._elapsed = np.zeros(n, dtype=np.int64)

    def reset(self) -> np.ndarray:
        self.state = self._rng.uniform(-0.05, 0.05, size=(4, self.n))
        self._elapsed[:] = 0
        return self.state.T.astype(np.float32)

    def step(self, actions: np.ndarray, out: tuple[np.ndarray, ...]) -> bool:
        next_obs, rewards, terminated, truncated, obs = out
        x, x_dot, theta, theta_dot = self.state
        force = np.where(actions == 1, self.FORCE_MAG, -self.FORCE_MAG)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + self.POLEMASS_LENGTH * np.square(theta_dot) * sintheta) / self.TOTAL_MASS
        thetaacc = (self.GRAVITY * sintheta - costheta * temp) / (
            self.LENGTH * (4.0 / 3.0 - self.MASSPOLE * np.square(costheta) / self.TOTAL_MASS)
        )
        xacc = temp - self.POLEMASS_LENGTH * thetaacc * costheta / self.TOTAL_MASS
        state = np.stack((x + self.TAU * x_dot, x_dot + self.TAU * xacc,
                          theta + self.TAU * theta_dot, theta_dot + self.TAU * thetaacc))  # fmt: skip
        x, theta = state[0], state[2]
        np.logical_or(x < -self.X_LIMIT, x > self.X_LIMIT, out=terminated)
        terminated |= (theta < -self.THETA_LIMIT) | (theta > self.THETA_LIMIT)
        self._elapsed += 1
        np.greater_equal(self._elapsed, self.max_episode_steps, out=truncated)
        rewards[:] = 1.0
        next_obs[:] = state.T
        done = terminated | truncated
        ended = bool(done.any())
        if ended:
            state[:, done] = self._rng.uniform(-0.05, 0.05, size=(4, int(done.sum())))
            self._elapsed[done] = 0
        obs[:] = state.T
        self.state = state
        return ended

    def close(self) -> None:
        pass


def is_cartpole(env_id: str) -> bool:
    spec = gym.spec(env_id)
    return spec.entry_point == CARTPOLE_ENTRY_POINT and not spec.kwargs


def make_bank(env_id: str, n: int, rng: np.random.Generator, max_episode_steps: int | None = None):
    """The bank of ``n`` envs of one replica: :class:`CartPoleBank` for CartPole with ``n >=``
    :data:`VECTOR_MIN_ENVS`, else :class:`GymBank`."""
    if n >= VECTOR_MIN_ENVS and is_cartpole(env_id):
        return CartPoleBank(n, rng, time_limit(env_id, max_episode_steps))
    return GymBank(env_id, n, rng, max_episode_steps)
