"""Replicas: K seeds of one configuration trained in lockstep in one run, each a run of its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from small import small_config

from dqnlab.agent.learner import Learner
from dqnlab.engine import train
from dqnlab.engine.replay import SharedReplay
from dqnlab.metrics import (
    ENV_STEPS,
    EVAL_RETURN_MEAN,
    HARD_DIVERGENCE,
    LIMITER_BOUND,
    Q_MAX,
    TD_LOSS,
    TD_LOSS_LAST,
    UPDATES,
    UTD_REALISED,
)

small = small_config


STEPS_FOR_UTD = {0.25: 3000, 1.0: 1500, 4.0: 1000}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("replicas", [1, 4])
@pytest.mark.parametrize("utd", [0.25, 1.0, 4.0])
def test_every_replica_holds_the_utd_exactly_at_every_log_point(leak_guard, utd, replicas, workers):
    config = small(utd=utd, replicas=replicas, num_workers=workers, total_env_steps=STEPS_FOR_UTD[utd])
    result = train(config)
    assert result.status == "completed" and len(result.replicas) == replicas
    learning_starts = config.run.learning_starts
    for rep in result.replicas:
        assert rep.status == "completed" and rep.seed == config.run.seed + rep.replica
        logs = [m for m in rep.history if UTD_REALISED in m]
        assert len(logs) >= 4
        for m in logs:
            assert abs(m[UPDATES] - utd * (m[ENV_STEPS] - learning_starts)) <= m[LIMITER_BOUND] + 1e-9, m
        assert rep.final[ENV_STEPS] == config.run.total_env_steps
        assert rep.final[UPDATES] == int(utd * (config.run.total_env_steps - learning_starts))


class _Transitions:
    """Records, per replica, every transition committed to the replay (serial mode: in this process)."""

    def __init__(self, monkeypatch):
        self.rows: list[list[tuple]] = []
        commit = SharedReplay.commit

        def recording(replay, worker, obs, actions, rewards, next_obs, terminated, truncated, *args, **kwargs):
            while len(self.rows) < len(actions):
                self.rows.append([])
            for k in range(len(actions)):
                self.rows[k].append((worker, obs[k].copy(), actions[k].copy(), rewards[k].copy(), next_obs[k].copy(),
                                     terminated[k].copy(), truncated[k].copy()))  # fmt: skip
            return commit(replay, worker, obs, actions, rewards, next_obs, terminated, truncated, *args, **kwargs)

        monkeypatch.setattr(SharedReplay, "commit", recording)


@pytest.mark.parametrize("envs", [1, 4], ids=["one-env-each", "vectorised-cartpole"])
def test_a_replica_is_a_run_same_transitions_and_td_losses_as_a_one_replica_run_with_its_seed(monkeypatch, leak_guard,
                                                                                               envs):  # fmt: skip
    config = small(mode="serial", replicas=3, seed=7, total_env_steps=2000, learning_starts=500, utd=0.25,
                   log_every=10, eval_every_steps=1000, eval_episodes=2, envs_per_worker=envs)  # fmt: skip
    stacked = _Transitions(monkeypatch)
    together = train(config)
    rows = [list(r) for r in stacked.rows]
    for k in range(3):
        alone_rows = _Transitions(monkeypatch)
        alone = train(config.replace(replicas=1, seed=7 + k))
        mine, theirs = rows[k], alone_rows.rows[0]
        assert len(mine) == len(theirs) == 2000 // envs  # 2,000 env steps, `envs` per commit
        for a, b in zip(mine, theirs):  # exactly the same transitions, in the same order
            assert a[0] == b[0]
            for x, y in zip(a[1:], b[1:]):
                np.testing.assert_array_equal(x, y)
        ours = [m[TD_LOSS_LAST] for m in together.replicas[k].history if TD_LOSS_LAST in m]
        solo = [m[TD_LOSS_LAST] for m in alone.history if TD_LOSS_LAST in m]
        assert len(ours) == len(solo) >= 20  # the first 375 updates, every 10th
        np.testing.assert_allclose(ours[:20], solo[:20], rtol=1e-5)
        evals = [m[EVAL_RETURN_MEAN] for m in together.replicas[k].history if EVAL_RETURN_MEAN in m]
        assert evals == [m[EVAL_RETURN_MEAN] for m in alone.history if EVAL_RETURN_MEAN in m]


def test_in_serial_mode_a_cell_of_replicas_reproduces_exactly_so_its_a_a_floor_is_zero(leak_guard):
    """The seed is the unit: in serial mode a cell's seeds are a function of their seeds alone, never of
    the sitting (parallel mode's actor/learner interleaving is shared by a trial's replicas, so two
    identical parallel cells differ by a sitting effect). Two runs of the same K-replica cell agree in
    every replica's TD losses, Q and greedy returns, bit for bit: an identical cell's difference is 0."""
    config = small_config(mode="serial", replicas=3, seed=11, total_env_steps=1800, learning_starts=400, utd=2.0,
                          log_every=25, eval_every_steps=600, eval_episodes=2)  # fmt: skip
    first, again = train(config), train(config)
    keep = (TD_LOSS_LAST, EVAL_RETURN_MEAN, Q_MAX)
    for a, b in zip(first.replicas, again.replicas, strict=True):
        rows = [[m.get(k) for k in keep] for m in a.history]
        assert len(rows) >= 40 and sum(EVAL_RETURN_MEAN in m for m in a.history) == 3
        assert rows == [[m.get(k) for k in keep] for m in b.history]
    assert len({tuple(m.get(TD_LOSS_LAST) for m in r.history) for r in first.replicas}) == 3  # seeds differ


def test_a_poisoned_replica_is_frozen_as_diverged_and_the_others_are_untouched(monkeypatch, leak_guard):
    config = small(mode="serial", replicas=3, total_env_steps=2000, utd=1.0, eval_every_steps=500, eval_episodes=2)
    clean = train(config)
    learners: list[Learner] = []
    update = Learner.update

    def poisoning(self, batch, want_stats=False, env_steps=None):
        if self.updates == 300:  # mid-run: replica 1's parameters become NaN
            with torch.no_grad():
                for p in self.net.parameters():
                    p[1].fill_(float("nan"))
        if not learners:
            learners.append(self)
        return update(self, batch, want_stats, env_steps)

    monkeypatch.setattr(Learner, "update", poisoning)
    poisoned = train(config)
    assert poisoned.status == "completed"  # the run goes on with the other replicas
    statuses = [r.status for r in poisoned.replicas]
    assert statuses == ["completed", "diverged", "completed"]
    bad = poisoned.replicas[1].history
    assert bad[-1][HARD_DIVERGENCE] == 1.0 and bad[-1][UPDATES] <= 350  # found at the next log point, frozen
    assert all(m[ENV_STEPS] <= bad[-1][ENV_STEPS] for m in bad)
    for k in (0, 2):  # every metric of the others, returns included, exactly as in the clean run
        keep = [TD_LOSS, TD_LOSS_LAST, EVAL_RETURN_MEAN, UPDATES]
        got = [{n: m[n] for n in keep if n in m} for m in poisoned.replicas[k].history]
        want = [{n: m[n] for n in keep if n in m} for m in clean.replicas[k].history]
        assert got == want
    learner = learners[0]
    frozen = [p.detach()[1] for p in learner.net.parameters()]
    assert all(torch.isnan(p).all() for p in frozen)
    for key in ("exp_avg", "exp_avg_sq"):
        assert not getattr(learner.optimizer, key)[1].any()  # no Adam motion left
