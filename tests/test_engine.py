"""End-to-end runs of the engine: exact UTD, worker shares, modes, failures, divergence."""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from small import small_config

from dqnlab.config import Config
from dqnlab.engine import RunFailed, train
from dqnlab.metrics import (
    ACTOR_STALENESS_RUN_MEAN,
    ENV_STEPS,
    EVAL_RETURN_BEST,
    EVAL_RETURN_MEAN,
    HARD_DIVERGENCE,
    LIMITER_BOUND,
    POLICY_LAG_MAX,
    POLICY_LAG_MEAN,
    POLICY_LAG_RUN_MAX,
    POLICY_LAG_RUN_MEAN,
    TD_LOSS,
    UPDATES,
    UTD_DEFICIT,
    worker_share,
)


def small(**overrides) -> Config:
    return small_config(**{**dict(total_env_steps=2000), **overrides})


class Recorder:
    def __init__(self):
        self.logs, self.ended = [], None

    def on_log(self, replica, metrics):
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
    # The learner is held at its first housekeeping after its first update until the free actors have
    # spent the whole budget: a slow learner by construction, on any machine. The run ends when the
    # budget is spent (a free limiter owes nothing more): the realised UTD reports the drift exactly.
    from dqnlab.engine.build import build, make_loop
    from dqnlab.tracking.callbacks import CallbackList

    config = small(utd=4.0, limiter="free", learning_starts=600, total_env_steps=3000, log_every=5)
    parts = build(config, 4, 2)

    class HeldLearner:
        def on_progress(self, env_steps, updates, total, elapsed_s):
            while updates and parts.replay.env_steps < total:
                parts.pool.health_check()
                time.sleep(0.01)

    recorder = Recorder()
    result = make_loop(parts, CallbackList([HeldLearner(), recorder])).run()
    assert result.status == "completed" and result.final["env_steps"] == 3000
    final = result.final
    assert final["utd_realised"] == final["updates"] / (3000 - 600)  # what was done, not what was owed
    assert final["updates"] < 4.0 * (3000 - 600) / 2  # the drift is reported: far below the owed updates
    assert final[UTD_DEFICIT] == 4.0 * (3000 - 600) - final["updates"]
    assert all(m["updates"] <= 4.0 * (m["env_steps"] - 600) + 1.0 for m in result.history)  # learner still bounded


def test_slow_worker_transitions_are_sampled_in_proportion_to_what_it_produced(leak_guard, monkeypatch):
    # Every batch is compared with the ring as it was when drawn: uniform sampling draws worker w with
    # probability (its transitions) / (all), whatever the workers' speeds. The ring's composition is read
    # just before and just after each draw (commits may land between), so each batch's expected count lies
    # between the two; the total drawn lies within 4 binomial standard errors of that interval.
    from dqnlab.engine.replay import SharedReplay

    draws = []  # per batch: worker 1's share of the ring before and after the draw, and its draws
    sample = SharedReplay.sample

    def recording(self, *args, **kwargs):
        before = self.produced()
        batch = sample(self, *args, **kwargs)
        after = self.produced()
        draws.append((before[1] / before.sum(), after[1] / after.sum(), int((batch.worker == 1).sum()),
                      batch.worker.size))  # fmt: skip
        return batch

    monkeypatch.setattr(SharedReplay, "sample", recording)
    config = small(utd=1.0, num_workers=2, total_env_steps=3000, learning_starts=300, worker_step_delay_s=(0.0, 0.01))
    result = train(config)
    f = result.final
    produced = np.array([f["worker0_produced_share"], f["worker1_produced_share"]])
    resident = np.array([f["worker0_resident_share"], f["worker1_resident_share"]])
    np.testing.assert_allclose(resident, produced)  # capacity > budget: everything produced is resident
    low, high, drawn, n = (np.array(x, dtype=float) for x in zip(*draws))
    lo, hi = (n * np.minimum(low, high)).sum(), (n * np.maximum(low, high)).sum()
    p = (low + high) / 2
    se = np.sqrt((n * p * (1 - p)).sum())
    print(f"slow worker: produced share {produced[1]:.3f}; drawn {drawn.sum():.0f}, expected [{lo:.0f}, {hi:.0f}] "
          f"+- {se:.1f}")  # fmt: skip
    assert lo - 4 * se <= drawn.sum() <= hi + 4 * se
    assert f["worker1_sampled_share"] == pytest.approx(drawn.sum() / n.sum())  # the share it reports


def test_serial_mode_is_deterministic_and_parallel_mode_measures_the_same(leak_guard):
    config = small(mode="serial", utd=1.0, total_env_steps=3000, eval_every_steps=1000, eval_episodes=2,
                   log_every=100)  # fmt: skip
    a, b = train(config), train(config)
    assert [m.get(TD_LOSS) for m in a.history] == [m.get(TD_LOSS) for m in b.history]
    assert [m.get(EVAL_RETURN_MEAN) for m in a.history] == [m.get(EVAL_RETURN_MEAN) for m in b.history]
    parallel = train(config.replace(mode="parallel"))
    for r in (a, parallel):
        assert r.status == "completed" and r.final[UPDATES] == 2500
    # What the schedule bounds: a transition's policy lag is its replay age plus its actor's staleness.
    # Serial mode steps the actors in turn, and one re-reads the weights every sync_every of its env steps,
    # during which the others make theirs: at most utd * (sync_every * workers + slack) updates (+
    # publish_every) stale. In parallel a descheduled actor may fall further behind: only the identity holds.
    c = config.run
    stale_max = config.agent.utd * (c.sync_every * config.env.num_workers + c.limiter_slack) + c.publish_every
    assert 0 <= a.final[ACTOR_STALENESS_RUN_MEAN] <= stale_max
    for r in (a, parallel):
        assert 0 <= r.final[ACTOR_STALENESS_RUN_MEAN] <= r.final[POLICY_LAG_RUN_MEAN]
    print(f"policy lag over the run: serial {a.final[POLICY_LAG_RUN_MEAN]:.1f}, "
          f"parallel {parallel.final[POLICY_LAG_RUN_MEAN]:.1f} updates")  # fmt: skip
    # ... serial mode steps the workers in turn, so each holds half the ring at every draw and is drawn
    # half the time, within 4 binomial standard errors of 2,500 batches of 32 ...
    assert [a.final[worker_share(w, "produced")] for w in range(2)] == [0.5, 0.5]
    assert abs(a.final[worker_share(1, "sampled")] - 0.5) <= 4 * math.sqrt(0.25 / (2500 * 32))
    # ... and the deficit stayed inside the limiter's bound at every log point
    for r in (a, parallel):
        assert all(abs(m[UTD_DEFICIT]) <= m[LIMITER_BOUND] + 1e-9 for m in r.history if UTD_DEFICIT in m)


def test_a_parallel_run_from_a_process_with_threads_forks_its_actors_elsewhere(leak_guard):
    import threading

    from conftest import children

    stop = threading.Event()
    busy = threading.Thread(target=stop.wait, name="busy-thread")
    busy.start()
    seen: list[set[str]] = []

    class Children:  # what this process has forked, seen while the run is going on
        def on_log(self, replica, metrics):
            seen.append({Path(f"/proc/{pid}/cmdline").read_bytes().decode().replace("\0", " ") for pid in
                         children(os.getpid())})  # fmt: skip

    recorder = Recorder()
    try:
        result = train(small(total_env_steps=1500), [Children(), recorder])
    finally:
        stop.set()
        busy.join()
    assert result.status == "completed" and result.final[UPDATES] == 1000
    assert recorder.ended is not None and recorder.ended.status == "completed"  # callbacks got every event here
    assert len(recorder.logs) == len(result.history)
    assert seen and all(cmds and all("dqnlab.engine.fresh_process" in c for c in cmds) for cmds in seen), seen


def test_kill_9_of_a_worker_fails_the_run_at_its_next_health_check_naming_it(leak_guard):
    # Once the killed actor's exit is visible (a zombie, not reaped), the learner's next housekeeping
    # checks the workers before it reports progress: the run fails, and no progress is reported after
    # the kill, however long the machine took to get there.
    import psutil

    killed, progress_after_kill = {}, []

    class Killer:
        def on_progress(self, env_steps, updates, total, elapsed_s):
            if killed:
                progress_after_kill.append(env_steps)
            elif env_steps > 1000:
                import multiprocessing as mp

                victim = next(p for p in mp.active_children() if p.name == "dqnlab-actor-1")
                os.kill(victim.pid, signal.SIGKILL)
                proc = psutil.Process(victim.pid)
                while proc.status() != psutil.STATUS_ZOMBIE:  # the kernel ended it; its parent has not reaped it
                    time.sleep(0.001)
                killed["t"] = time.monotonic()

    recorder = Recorder()
    with pytest.raises(RunFailed) as err:
        train(small(total_env_steps=10**6, utd=0.25), [Killer(), recorder])
    print(f"kill -9 of an actor: run failed {time.monotonic() - killed['t']:.2f} s later")
    assert progress_after_kill == []
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


def _evals(history):
    return [m for m in history if EVAL_RETURN_MEAN in m]


@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_every_evaluation_is_recorded_once_at_its_own_env_step(leak_guard, mode):
    # utd 0.05 and log_every 500: the run's 475 updates make no log point before the end, while an
    # evaluation is due every 1,000 env steps
    config = small(mode=mode, utd=0.05, total_env_steps=10_000, learning_starts=500, eval_every_steps=1000,
                   eval_episodes=1, log_every=500, num_workers=2)  # fmt: skip
    result = train(config)
    evals = _evals(result.history)
    steps = [m[ENV_STEPS] for m in evals]
    assert len(evals) == 10, steps
    for k, (m, s) in enumerate(zip(evals, steps), start=1):
        assert k * 1000 <= s < (k + 1) * 1000 or s == 10_000, steps  # taken once per period, at its own step
        if mode == "serial":
            assert s == k * 1000
        assert m[UPDATES] <= 0.05 * (s - 500) + 1.0 + 1e-9
    assert steps[-1] == 10_000  # the end-of-run evaluation, not a duplicate of it
    assert len(set(steps)) == len(steps)
    assert result.final[EVAL_RETURN_BEST] == max(m[EVAL_RETURN_MEAN] for m in evals)


@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_the_end_of_run_evaluation_comes_after_the_last_owed_update(leak_guard, mode):
    # the budget is a multiple of eval_every_steps (as in every shipped preset): the evaluation due at
    # the last env step used to run with up to limiter_slack + utd * envs_per_worker updates still owed
    # (here 1 + 4 * 4 = 17), and the end-of-run one was then skipped as a duplicate
    config = small(mode=mode, utd=4.0, num_workers=2, envs_per_worker=4, total_env_steps=2000, learning_starts=500,
                   eval_every_steps=500, eval_episodes=1, log_every=1000)  # fmt: skip
    result = train(config)
    evals = _evals(result.history)
    assert result.final[UPDATES] == 6000
    assert evals[-1][ENV_STEPS] == 2000 and evals[-1][UPDATES] == 6000, [(m[ENV_STEPS], m[UPDATES]) for m in evals]
    assert [m[ENV_STEPS] for m in evals].count(2000) == 1


@pytest.mark.parametrize("log_every, eval_every_steps", [(20, 100), (100_000, 25)],
                         ids=["found-at-a-log-point", "found-by-the-evaluation"])  # fmt: skip
def test_a_diverged_run_is_never_evaluated_on_non_finite_weights(leak_guard, log_every, eval_every_steps):
    # second case: no log point comes before the end, so only the evaluation's own check can find the NaN
    config = small(lr=1e12, max_grad_norm=1e30, total_env_steps=20_000, learning_starts=200, probe_size=32,
                   log_every=log_every, gamma=0.999, eval_every_steps=eval_every_steps, eval_episodes=1,
                   mode="serial")  # fmt: skip
    result = train(config)
    assert result.status == "diverged"
    diverged_at = next(m[ENV_STEPS] for m in result.history if m.get(HARD_DIVERGENCE) == 1.0)
    assert all(m[ENV_STEPS] < diverged_at for m in _evals(result.history))
    assert result.history[-1][HARD_DIVERGENCE] == 1.0  # the divergence is the run's last record
    from dqnlab.objective import final_eval_return

    assert math.isnan(final_eval_return(result.history, result.status))  # no policy, no return


@pytest.mark.parametrize("slack", [0.5, 3.0])
def test_strict_run_ends_at_exactly_the_owed_updates_for_any_slack(leak_guard, slack):
    config = small(utd=1.0, limiter_slack=slack, total_env_steps=1500, mode="serial")
    result = train(config)
    assert result.final[UPDATES] == 1000  # floor(utd * (E - learning_starts)), not a slack beyond it
    bound = max(slack + 1.0, 1.0)
    for m in result.history:
        if UTD_DEFICIT in m:
            assert -slack - 1e-9 <= m[UTD_DEFICIT] <= bound + 1e-9, m
            assert m[LIMITER_BOUND] == bound


def test_policy_lag_is_reported_for_the_window_and_for_the_whole_run(leak_guard):
    result = train(small(utd=1.0, total_env_steps=2000, log_every=100, mode="serial"))
    logs = [m for m in result.history if POLICY_LAG_MEAN in m]
    windows = np.array([m[POLICY_LAG_MEAN] for m in logs])
    maxima = np.array([m[POLICY_LAG_MAX] for m in logs])
    last = result.final
    assert len(logs) == 15  # 1,500 updates / log_every 100; the end-of-run record has an empty window
    # every window holds log_every * batch_size draws: the run mean is the mean of the window means
    assert last[POLICY_LAG_RUN_MEAN] == pytest.approx(windows.mean(), rel=1e-9)
    assert last[POLICY_LAG_RUN_MAX] == maxima.max()
    assert windows[-1] > last[POLICY_LAG_RUN_MEAN]  # the last window alone would overstate the run


def test_heterogeneous_workers_get_their_own_time_limit_and_step_delay(monkeypatch, leak_guard):
    from dqnlab.engine.actor import Actor

    made = []
    init = Actor.__init__

    def recording(self, worker, config, *args, **kwargs):
        init(self, worker, config, *args, **kwargs)
        made.append((worker, self.step_delay_s, self.banks[0].max_episode_steps))

    monkeypatch.setattr(Actor, "__init__", recording)
    from dqnlab.engine.replay import SharedReplay

    logged = []  # every finished episode the learner reads from the replay's episode log
    read = SharedReplay.new_episodes

    def reading(self):
        episodes = read(self)
        logged.extend(episodes)
        return episodes

    monkeypatch.setattr(SharedReplay, "new_episodes", reading)
    config = small(mode="serial", total_env_steps=1000, worker_max_episode_steps=(7,), worker_step_delay_s=(0.0, 0.001))
    result = train(config)
    assert sorted(made) == [(0, 0.0, 7), (1, 0.001, 500)]  # worker 1 keeps CartPole's own limit
    assert result.status == "completed"
    # worker 0's episodes end by step 7: it finishes most of the episodes while the two produce alike,
    # and its share of episodes is what the episode log says
    final = result.final
    assert final[worker_share(0, "episodes")] + final[worker_share(1, "episodes")] == pytest.approx(1.0)
    assert abs(final[worker_share(0, "produced")] - 0.5) < 0.1  # serial mode steps the workers in turn
    assert final[worker_share(0, "episodes")] > 0.6  # ~7-step episodes against CartPole's own (~20 at first)
    assert all(length <= 7 for worker, _, _, length, _ in logged if worker == 0)
    by_worker = [sum(e[0] == w for e in logged) for w in (0, 1)]
    assert min(by_worker) > 0
    assert final[worker_share(0, "episodes")] == pytest.approx(by_worker[0] / sum(by_worker))
    with pytest.raises(Exception, match="worker_max_episode_steps"):
        small(worker_max_episode_steps=(5, 5, 5))  # more entries than workers


def test_the_learner_flushes_denormals_while_it_runs_and_restores_the_process_after(leak_guard):
    denormal = torch.tensor([1e-39])  # below float32's smallest normal, 1.18e-38

    class Watch:
        seen: list[tuple[bool, int]] = []

        def on_progress(self, env_steps, updates, total_env_steps, elapsed_s):
            self.seen.append((bool((denormal * 1.0 == 0).all()), torch.get_num_threads()))

    threads = torch.get_num_threads()
    train(small(mode="serial", total_env_steps=600, learner_threads=1), callbacks=[Watch()])
    assert Watch.seen and all(flushed and n == 1 for flushed, n in Watch.seen)  # flushed: arithmetic reads it as 0
    assert (denormal * 1.0 != 0).all() and torch.get_num_threads() == threads  # the caller's process as it was


@pytest.mark.parametrize("mode, workers", [("serial", 1), ("serial", 2), ("parallel", 2)])
@pytest.mark.parametrize("utd", [0.25, 1.0, 4.0])
def test_target_copies_and_resets_follow_their_unit_at_every_utd(leak_guard, mode, workers, utd):
    from dqnlab.metrics import RESETS, TARGET_UPDATES

    total, starts = 1300, 500
    common = dict(mode=mode, num_workers=workers, utd=utd, total_env_steps=total, learning_starts=starts,
                  log_every=10_000, reset="head", reset_every=400, target_period=100)  # fmt: skip
    in_updates = train(small(**common, target_unit="updates", reset_unit="updates")).final
    owed = math.floor(utd * (total - starts))
    assert in_updates[UPDATES] == owed
    assert in_updates[TARGET_UPDATES] == owed // 100  # 2, 8 or 32 copies: utd times more per env step
    assert in_updates[RESETS] == owed // 400  # 0, 2 or 8
    in_steps = train(small(**common, target_unit="env_steps", reset_unit="env_steps",
                           no_resets_after_steps=1000)).final  # fmt: skip
    # a copy at the first update after each multiple of 100 env steps past learning starts: 8 at
    # every UTD (7 when no update follows the last env step); a reset at 800 env steps only (the one
    # due at 1,200 falls after no_resets_after_steps)
    assert in_steps[TARGET_UPDATES] in (7, 8)
    assert in_steps[RESETS] == 1


def test_current_data_diagnostics_read_the_replay_as_it_is_now_and_the_probe_as_it_was(leak_guard):
    from dqnlab.engine.build import build, make_loop
    from dqnlab.tracking.callbacks import CallbackList

    config = small(buffer_capacity=400, learning_starts=200, probe_size=64, num_workers=1)
    parts = build(config, 4, 2)
    loop = make_loop(parts, CallbackList([]))

    def fill(value: float, n: int) -> None:
        obs = np.full((1, n, 4), value, np.float32)
        flags = np.zeros((1, n), bool)
        parts.replay.claim(n)
        parts.replay.commit(0, obs, np.zeros((1, n), np.int64), np.ones((1, n), np.float32), obs, flags, flags,
                            np.zeros((1, n), np.int64), 0, [], claim_next=0)  # fmt: skip

    fill(0.0, 200)  # the first policies' data
    loop.probe = torch.from_numpy(parts.replay.sample_obs(loop.rngs, 64))
    fill(1.0, 400)  # the ring has turned over: only new data is resident
    current = loop._current_batch()
    assert current.shape == (1, 64, 4)
    assert (loop.probe == 0).all() and (current == 1).all()
    parts.pool.stop()


def test_a_run_whose_q_blows_up_is_labelled_soft_diverged_at_its_evaluations(leak_guard):
    from dqnlab.metrics import Q_LIMIT, SOFT_DIVERGENCE

    # no target network to speak of (a copy every update), a large step and no clipping: Q runs away
    config = small(mode="serial", utd=4.0, total_env_steps=3000, learning_starts=500, lr=0.05, target_period=1,
                   max_grad_norm=1e30, gamma=0.999, eval_every_steps=500, eval_episodes=1, log_every=100)  # fmt: skip
    result = train(config)
    checks = [m for m in result.history if SOFT_DIVERGENCE in m]
    assert checks and all(Q_LIMIT in m for m in checks)
    assert any(m[SOFT_DIVERGENCE] == 1.0 for m in checks) or result.status == "diverged"
