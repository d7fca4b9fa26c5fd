"""dqnlab.audit.sb3 on Stable-Baselines3's DQN: it sees the very batches SB3 samples (without changing
SB3's random draws), and the realised UTD that train_freq, gradient_steps and n_envs make."""

from __future__ import annotations

import numpy as np
import pytest

sb3 = pytest.importorskip("stable_baselines3", reason="the bench extra: pip install -e '.[bench]'")


def _model(n_envs: int, seed: int = 0):
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)
    return DQN("MlpPolicy", env, learning_starts=200, buffer_size=2000, batch_size=32, train_freq=4, gradient_steps=2,
               target_update_interval=100, seed=seed, device="cpu", policy_kwargs={"net_arch": [32, 32]})  # fmt: skip


@pytest.mark.parametrize("n_envs", [1, 4])
def test_the_callback_reports_sb3s_realised_utd_and_each_envs_shares(tmp_path, n_envs):
    from dqnlab import metrics as M
    from dqnlab.audit.sb3 import AuditCallback

    model = _model(n_envs)
    callback = AuditCallback(tmp_path, diag_every_updates=50)
    model.learn(2400, callback=callback)
    final = callback.report.final
    # SB3 trains after each rollout of train_freq=4 vector steps (4 x n_envs env steps) that ends past
    # learning_starts, gradient_steps=2 updates each: the realised UTD is exact, so the test is
    rollout = 4 * n_envs
    updates = 2 * sum(1 for end in range(rollout, 2400 + 1, rollout) if end > 200)
    assert final[M.UPDATES] == model._n_updates == updates
    assert final[M.ENV_STEPS] == model.num_timesteps == 2400
    assert final[M.UTD_REALISED] == updates / (2400 - 200)  # ~2 / (4 x n_envs): it falls as n_envs grows
    for i in range(n_envs):
        for kind in ("produced", "resident", "sampled"):
            assert final[M.worker_share(i, kind)] == pytest.approx(1 / n_envs, abs=0.1)
    assert M.SRANK_CURRENT in final and M.Q_MAX in final


def test_the_callback_records_the_batches_sb3_returns_and_leaves_its_random_draws_alone(tmp_path):
    from dqnlab.audit.sb3 import AuditCallback

    def run(with_audit: bool):
        model = _model(2, seed=3)
        seen = []
        if with_audit:
            callback = AuditCallback(tmp_path / "a")
            original_start = callback._on_training_start

            def start():
                original_start()
                recording = model.replay_buffer._get_samples

                def checking(batch_inds, env=None):
                    out = recording(batch_inds, env)
                    rows, envs = callback.last_indices  # the rows the audit attributed the batch to
                    seen.append(np.array_equal(model.replay_buffer.observations[rows, envs], out.observations.numpy()))
                    return out

                model.replay_buffer._get_samples = checking

            callback._on_training_start = start
            model.learn(800, callback=callback)
        else:
            model.learn(800)
        return model, seen

    audited, seen = run(True)
    plain, _ = run(False)
    assert seen and all(seen)  # the recorded states are the batch SB3 trained on
    for a, b in zip(audited.q_net.parameters(), plain.q_net.parameters()):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())  # the same training, bit for bit


def test_the_callback_audits_a_dict_observation_space(tmp_path):
    """"Any VecEnv" includes Dict observations (MultiInputPolicy): the sampled batch's observations are a
    dict of tensors, and the Q diagnostics run on them."""
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    from dqnlab import metrics as M
    from dqnlab.audit.sb3 import AuditCallback

    class AsDict(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Dict({"state": env.observation_space})

        def observation(self, obs):
            return {"state": obs}

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0, wrapper_class=AsDict)
    model = DQN("MultiInputPolicy", env, learning_starts=100, buffer_size=1000, batch_size=16, train_freq=4,
                gradient_steps=1, seed=0, device="cpu", policy_kwargs={"net_arch": [16, 16]})  # fmt: skip
    callback = AuditCallback(tmp_path, diag_every_updates=20)
    model.learn(600, callback=callback)
    final = callback.report.final
    assert final[M.UPDATES] == model._n_updates and M.Q_MAX in final and M.SRANK_CURRENT in final
