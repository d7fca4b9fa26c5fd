"""End-to-end runs of the engine: exact UTD, worker shares, modes, failures, divergence."""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from dqnlab.config import Config
from dqnlab.run import RunFailed, train


def small(**overrides) -> Config:
    base = dict(
        total_env_steps=2000, learning_starts=500, batch_size=32, buffer_capacity=10_000, probe_size=64,
        hidden_sizes=(32, 32), log_every=50, eval_every_steps=0, num_workers=2, sync_every=50,
    )  # fmt: skip
    return Config.from_flat({**base, **overrides})


class Recorder:
    def __init__(self):
        self.logs, self.ended = [], None

    def on_log(self, metrics):
        self.logs.append(metrics)

    def on_end(self, result):
        self.ended = result


STEPS_FOR_UTD = {0.25: 4000, 1.0: 2000, 4.0: 1500}


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("utd", [0.25, 1.0, 4.0])
def test_strict_limiter_holds_utd_at_every_log_point_and_at_the_end(leak_guard, utd, workers):
    config = small(utd=utd, num_workers=workers, total_env_steps=STEPS_FOR_UTD[utd])
    result = train(config)
    assert result.status == "completed"
    learning_starts = config.run.learning_starts
    bound = config.run.limiter_slack + utd * config.env.envs_per_worker
    assert len(result.history) >= 5
    for m in result.history:
        since = m["env_steps"] - learning_starts
        assert abs(m["updates"] - utd * since) <= bound + 1e-9, m
        if since * utd >= 100 * bound:  # far enough in that the slack is under 1%
            assert abs(m["utd_realised"] - utd) <= 0.01 * utd, m
    final = result.final
    assert final["env_steps"] == config.run.total_env_steps
    assert abs(final["utd_realised"] - utd) <= 0.01 * utd
    assert abs(final["updates"] - utd * (final["env_steps"] - learning_starts)) <= 1
    produced = sum(final[f"worker{w}_produced_share"] for w in range(workers))
    assert produced == pytest.approx(1.0)


def test_free_limiter_with_a_slow_learner_reports_the_drift(leak_guard):
    # a wide network and a big batch make the learner far slower than two free actors
    config = small(utd=4.0, limiter="free", hidden_sizes=(512, 512), batch_size=512, learning_starts=600,
                   probe_size=64, total_env_steps=6000, log_every=5)  # fmt: skip
    result = train(config)
    assert result.status == "completed"
    assert result.final["env_steps"] == 6000
    assert result.final["utd_realised"] < 0.5 * 4.0  # the drift is measured and reported
    assert all(m["updates"] <= 4.0 * (m["env_steps"] - 600) + 1.0 for m in result.history)  # learner still bounded


def test_slow_worker_transitions_are_sampled_in_proportion_to_what_it_produced(leak_guard):
    config = small(utd=1.0, num_workers=2, total_env_steps=3000, learning_starts=300)
    result = train(config, step_delay_s={1: 0.002})
    f = result.final
    produced = np.array([f["worker0_produced_share"], f["worker1_produced_share"]])
    sampled = np.array([f["worker0_sampled_share"], f["worker1_sampled_share"]])
    resident = np.array([f["worker0_resident_share"], f["worker1_resident_share"]])
    assert 0.02 < produced[1] < 0.4, produced  # the slow worker really is slower
    np.testing.assert_allclose(resident, produced)  # capacity > budget: everything produced is resident
    # The sampled share counts every draw since the first update, while the worker's produced share
    # moves with its speed; compare it to the produced share as the learner saw it, weighted by the
    # updates of each log window (capacity > budget, so that is also what the ring held).
    weights, shares, last = [], [], 0
    for m in result.history:
        weights.append(m["updates"] - last)
        shares.append([m["worker0_produced_share"], m["worker1_produced_share"]])
        last = m["updates"]
    seen = np.average(np.array(shares), axis=0, weights=np.array(weights, dtype=float))
    print("slow-worker shares: seen", seen, "sampled", sampled, "final produced", produced)
    assert np.abs(sampled - seen).max() < 0.05, (seen, sampled, produced)  # stated tolerance: 0.05


def test_serial_mode_is_deterministic_and_matches_the_parallel_accounting(leak_guard):
    config = small(mode="serial", utd=1.0, total_env_steps=1500, eval_every_steps=500, eval_episodes=2)
    a, b = train(config), train(config)
    losses_a = [m.get("td_loss") for m in a.history]
    assert losses_a == [m.get("td_loss") for m in b.history]
    assert [m.get("eval_return_mean") for m in a.history] == [m.get("eval_return_mean") for m in b.history]
    parallel = train(config.replace(mode="parallel"))
    for r in (a, parallel):
        assert r.status == "completed"
        assert r.final["env_steps"] == 1500 and r.final["updates"] == 1000
        assert len(r.history) == len(a.history)


def test_kill_9_of_a_worker_fails_the_run_within_5_s_naming_it(leak_guard):
    killed = {}

    class Killer:
        def on_progress(self, env_steps, updates, total, elapsed_s):
            if env_steps > 1000 and not killed:
                import multiprocessing as mp

                victim = next(p for p in mp.active_children() if p.name == "dqnlab-actor-1")
                os.kill(victim.pid, signal.SIGKILL)
                killed["t"] = time.monotonic()

    recorder = Recorder()
    with pytest.raises(RunFailed) as err:
        train(small(total_env_steps=10**6, utd=0.25), [Killer(), recorder])
    elapsed = time.monotonic() - killed["t"]
    print(f"kill -9 of an actor: run failed {elapsed:.2f} s later")
    assert elapsed < 5.0
    assert "worker 1" in str(err.value) and "SIGKILL" in str(err.value)
    assert err.value.result.status == "failed"
    assert recorder.ended is err.value.result
    assert err.value.result.history, "metrics logged before the crash are kept"


class _Exploding(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    steps = 0  # per process: counts every step of every instance

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        type(self).steps += 1
        if type(self).steps > 300:
            raise RuntimeError("boom: injected env failure")
        return np.zeros(2, np.float32), 0.0, False, type(self).steps % 50 == 0, {}


gym.register("dqnlab-test/Exploding-v0", entry_point=_Exploding)


def test_an_actor_that_raises_fails_the_run_with_its_traceback(leak_guard):
    with pytest.raises(RunFailed) as err:
        train(small(env_id="dqnlab-test/Exploding-v0", total_env_steps=10**5, learning_starts=100, probe_size=32))
    text = str(err.value)
    assert "worker" in text and "boom: injected env failure" in text and "Traceback" in text


def test_hard_divergence_ends_the_run_as_diverged_with_metrics_kept(leak_guard):
    config = small(lr=1e12, max_grad_norm=1e30, total_env_steps=20_000, learning_starts=200, probe_size=32,
                   log_every=20, gamma=0.999)  # fmt: skip
    result = train(config)
    assert result.status == "diverged"
    assert result.final["hard_divergence"] == 1.0
    assert result.final["env_steps"] < 20_000
    assert len(result.history) >= 1


def test_unknown_env_id_fails_before_any_process_starts():
    from dqnlab.config import ConfigError

    with pytest.raises(ConfigError, match="env_id"):
        train(small(env_id="NoSuchEnv-v9"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_learner_with_cpu_actors_holds_utd(leak_guard):
    result = train(small(device="cuda", utd=1.0, total_env_steps=1500))
    assert result.status == "completed"
    assert result.final["updates"] == 1000


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_refused_before_any_process_starts():
    from dqnlab.config import ConfigError

    with pytest.raises(ConfigError, match="device: got 'cuda'"):
        train(small(device="cuda"))
