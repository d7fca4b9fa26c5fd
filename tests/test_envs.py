"""Env banks: an actor's envs of one replica stepped as one, with same-step autoreset."""

import gymnasium as gym
import numpy as np
import pytest

from dqnlab.engine.envs import CartPoleBank, GymBank, make_bank


def _step(bank, actions):
    n = len(actions)
    out = (np.empty((n, 4), np.float32), np.empty(n, np.float32), np.empty(n, bool), np.empty(n, bool),
           np.empty((n, 4), np.float32))  # fmt: skip
    ended = bank.step(actions, out)
    assert ended == bool((out[2] | out[3]).any())  # the bank says whether an episode ended
    return out


def test_the_cartpole_bank_makes_gymnasiums_cartpole_transitions_bit_for_bit():
    n, limit, steps = 6, 40, 3000  # a short time limit, so that truncations happen as well as terminations
    bank = CartPoleBank(n, np.random.default_rng(0), limit)
    refs = [gym.make("CartPole-v1", max_episode_steps=limit) for _ in range(n)]

    def start(i: int) -> None:  # the reference env i starts from the bank's reset state of env i
        refs[i].reset(seed=i)
        refs[i].unwrapped.state = bank.state[:, i].copy()

    obs = bank.reset()
    for i in range(n):
        start(i)
    rng = np.random.default_rng(1)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        actions = rng.integers(0, 2, n)
        next_obs, rewards, terminated, truncated, new_obs = _step(bank, actions)
        for i, env in enumerate(refs):
            o, r, term, trunc, _ = env.step(int(actions[i]))
            np.testing.assert_array_equal(next_obs[i], o)
            assert (rewards[i], terminated[i], truncated[i]) == (r, term, trunc)
            if term or trunc:
                ends["terminated" if term else "truncated"] += 1
                start(i)  # same-step autoreset: the bank's next observation is a fresh reset state
                np.testing.assert_array_equal(new_obs[i], np.asarray(env.unwrapped.state, dtype=np.float32))
            else:
                np.testing.assert_array_equal(new_obs[i], o)
        obs = new_obs
    assert obs.shape == (n, 4) and obs.dtype == np.float32
    assert ends["terminated"] > 100 and ends["truncated"] > 10  # both ways an episode ends were exercised


def test_a_gym_bank_autoresets_on_the_same_step_and_keeps_the_true_last_observation():
    bank = GymBank("CartPole-v1", 2, np.random.default_rng(0), max_episode_steps=5)
    bank.reset()
    for t in range(1, 11):
        next_obs, rewards, terminated, truncated, obs = _step(bank, np.zeros(2, dtype=np.int64))
        done = terminated | truncated
        if t % 5 == 0:  # the time limit: truncated, not terminated (the pole has not fallen in 5 steps)
            assert truncated.all() and not terminated.any()
        assert (done == (t % 5 == 0)).all()
        assert np.array_equal(next_obs == obs, np.broadcast_to(~done[:, None], obs.shape))  # reset obs only where done
        assert (rewards == 1.0).all()
    bank.close()


def test_a_bank_draws_its_envs_from_the_replicas_generator_alone():
    a = make_bank("CartPole-v1", 8, np.random.default_rng([3, 0]))
    b = make_bank("CartPole-v1", 8, np.random.default_rng([3, 0]))
    c = make_bank("CartPole-v1", 8, np.random.default_rng([4, 0]))
    first = a.reset()
    np.testing.assert_array_equal(first, b.reset())
    assert not np.array_equal(first, c.reset())


@pytest.mark.parametrize(
    "env_id, n, bank",
    [("CartPole-v1", 1, GymBank), ("CartPole-v1", 3, GymBank), ("CartPole-v1", 4, CartPoleBank),
     ("CartPole-v0", 16, CartPoleBank), ("Acrobot-v1", 8, GymBank)],
)  # fmt: skip
def test_the_vectorised_cartpole_is_used_from_four_envs_on_and_only_for_cartpole(env_id, n, bank):
    made = make_bank(env_id, n, np.random.default_rng(0))
    assert type(made) is bank
    if bank is CartPoleBank:  # the registered time limit: 500 for v1, 200 for v0
        assert made.max_episode_steps == gym.spec(env_id).max_episode_steps
    made.close()


@pytest.mark.parametrize("n", [1, 8])
def test_a_workers_episode_step_limit_reaches_either_bank(n):
    assert make_bank("CartPole-v1", n, np.random.default_rng(0), max_episode_steps=2000).max_episode_steps == 2000


class _Grid(gym.Env):
    """A 2x3 Box observation (the step count in every cell), two actions, 3-step episodes."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2, 3), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((2, 3), np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full((2, 3), self.t, np.float32), 1.0, self.t == 3, False, {}


gym.register("dqnlab-test/Grid-v0", entry_point=_Grid)


def test_a_gym_bank_flattens_a_multi_dimensional_observation_on_every_step_as_on_reset():
    """The replay holds ``prod(shape)`` floats a slot: a (2, 3) observation had crashed the first step."""
    bank = GymBank("dqnlab-test/Grid-v0", 2, np.random.default_rng(0))
    assert bank.reset().shape == (2, 6)
    out = (np.empty((2, 6), np.float32), np.empty(2, np.float32), np.empty(2, bool), np.empty(2, bool),
           np.empty((2, 6), np.float32))  # fmt: skip
    for t in (1, 2, 3):
        bank.step(np.zeros(2, np.int64), out)
        np.testing.assert_array_equal(out[0], np.full((2, 6), t))  # the true next observation
    np.testing.assert_array_equal(out[4], np.zeros((2, 6)))  # the episode ended: the reset observation
    assert out[2].all()
