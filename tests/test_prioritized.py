"""Prioritized replay (Schaul et al. 2016, as Ape-X uses it): the sum tree finds what a cumulative sum
finds, the replay draws each slot with probability p^alpha / sum p^alpha, the importance-sampling
weights are (N P)^-beta over the batch's largest, a slot overwritten since it was drawn keeps its new
priority, the weighted loss is the reference one, and actors' first priorities are their |TD errors|."""

from __future__ import annotations

import multiprocessing as mp
import types

import numpy as np
import pytest
import torch

from dqnlab.engine import sumtree
from dqnlab.engine.limiter import RateLimiter
from dqnlab.engine.replay import SharedReplay
from dqnlab.engine.shared import SharedArena


def test_the_sum_tree_finds_the_leaf_a_cumulative_sum_finds():
    rng = np.random.default_rng(0)
    capacity, k = 37, 3  # not a power of two: the tree pads to 64 leaves of weight 0
    tree = np.zeros((k, 2 * sumtree.leaves_for(capacity)))
    values = rng.random((k, capacity)) ** 3
    sumtree.set_leaves(tree, np.repeat(np.arange(k), capacity), np.tile(np.arange(capacity), k), values.ravel())
    np.testing.assert_allclose(sumtree.total(tree), values.sum(axis=1))
    mass = rng.random((k, 500)) * sumtree.total(tree)[:, None]
    expected = np.stack([np.searchsorted(np.cumsum(values[r]), mass[r], side="right") for r in range(k)])
    np.testing.assert_array_equal(sumtree.find(tree, mass), expected)
    sumtree.set_leaves(tree, np.array([1, 1]), np.array([5, 9]), np.array([10.0, 0.0]))  # updates keep sums exact
    values[1, 5], values[1, 9] = 10.0, 0.0
    np.testing.assert_allclose(sumtree.total(tree), values.sum(axis=1))


def _replay(capacity: int, replicas: int = 2, alpha: float = 0.7) -> SharedReplay:
    arena = SharedArena()
    limiter = RateLimiter(1.0, 0, 1.0, strict=False)
    replay = SharedReplay(arena, mp.get_context("fork").Lock(), capacity, 2, 1, limiter, 10**9, replicas, (alpha, 1e-6))
    arena.allocate()
    replay.bind()
    return replay


def _fill(replay: SharedReplay, priorities: np.ndarray) -> None:
    k, n = priorities.shape
    obs = np.zeros((k, n, 2), np.float32)
    z = np.zeros((k, n), bool)
    replay.claim(n)
    replay.commit(0, obs, np.zeros((k, n), np.int64), np.zeros((k, n), np.float32), obs, z, z, np.zeros((k, n), np.int64),
                  0, [], claim_next=0, priorities=priorities)  # fmt: skip


def test_slots_are_drawn_with_probability_p_alpha_over_the_sum_and_weighted_by_n_p_to_the_minus_beta():
    alpha, beta = 0.7, 0.5
    replay = _replay(8, alpha=alpha)
    p = np.array([[1.0, 2.0, 3.0, 4.0, 0.5, 8.0, 1.0, 1.0], [5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1]])
    _fill(replay, p)
    expected = (p + 1e-6) ** alpha / ((p + 1e-6) ** alpha).sum(axis=1, keepdims=True)
    rngs = [np.random.default_rng(s) for s in (1, 2)]
    counts = np.zeros((2, 8))
    for _ in range(400):
        batch = replay.sample(rngs, 250, beta=beta)
        for r in range(2):
            counts[r] += np.bincount(batch.slots[r], minlength=8)
            w = (8 * expected[r, batch.slots[r]]) ** -beta
            np.testing.assert_allclose(batch.weights[r], w / w.max(), rtol=1e-5)
    np.testing.assert_allclose(counts / counts.sum(axis=1, keepdims=True), expected, atol=0.004)
    assert replay.sampled.sum() == 2 * 400 * 250  # the per-worker accounting counts every draw


def test_new_priorities_skip_a_slot_overwritten_since_it_was_drawn():
    replay = _replay(4, replicas=1, alpha=1.0)
    _fill(replay, np.ones((1, 4)))
    batch = replay.sample([np.random.default_rng(0)], 4)
    _fill(replay, np.full((1, 1), 7.0))  # slot 0 now holds a new transition (seq 4) with priority 7
    replay.update_priorities(batch.slots, batch.seq, np.full((1, 4), 3.0))
    leaves = replay._a["prio_tree"][0, 4:8]
    assert leaves[0] == pytest.approx(7.0)  # the new transition's, not the stale batch's
    drawn = set(batch.slots[0]) - {0}
    assert all(leaves[s] == pytest.approx(3.0) for s in drawn)


def test_the_importance_weighted_loss_and_its_gradient_are_the_reference_ones():
    from dqnlab.agent.learner import Learner
    from dqnlab.config import Config

    for loss_name in ("huber", "mse"):
        learner = Learner(Config.from_flat(batch_size=8, learning_starts=32, probe_size=32, hidden_sizes=(8,),
                                           loss=loss_name, double_dqn=False, max_grad_norm=1e30), 2, 2)  # fmt: skip
        g = torch.Generator().manual_seed(0)
        obs, next_obs = torch.randn(1, 8, 2, generator=g), torch.randn(1, 8, 2, generator=g)
        actions, rewards = torch.randint(0, 2, (1, 8), generator=g), 5 * torch.randn(1, 8, generator=g)
        terminated, weights = torch.zeros(1, 8, dtype=torch.bool), torch.rand(1, 8, generator=g)
        params = [p.detach()[0].clone().requires_grad_(True) for p in learner.net.parameters()]
        w1, b1, w2, b2 = params
        q = torch.relu(obs[0] @ w1.T + b1) @ w2.T + b2
        with torch.no_grad():
            y = rewards[0] + 0.99 * learner.target(next_obs)[0].max(dim=1).values
        diff = q.gather(1, actions[0][:, None])[:, 0] - y
        element = diff.square() if loss_name == "mse" else torch.nn.functional.smooth_l1_loss(diff, torch.zeros(8),
                                                                                              reduction="none")  # fmt: skip
        (element * weights[0]).mean().backward()
        learner.gradient_step(obs, actions, rewards, next_obs, terminated, weights)
        grads = learner.net.views(learner.last_grads)
        for name, p in zip(["hidden.0.weight", "hidden.0.bias", "head.weight", "head.bias"], params):
            torch.testing.assert_close(grads[name][0], p.grad, rtol=1e-5, atol=1e-6)


def test_an_actors_first_priority_is_its_own_td_error():
    from dqnlab.config import Config
    from dqnlab.engine.actor import Actor

    q = {"obs": np.array([[[1.0, 3.0], [2.0, 0.5]]]), "next": np.array([[[4.0, 6.0], [1.0, 1.0]]])}
    fake = types.SimpleNamespace(config=Config.from_flat(replay="prioritized", gamma=0.9), _q=q["obs"],
                                 policy=types.SimpleNamespace(q_values=lambda obs: q["next"]))  # fmt: skip
    prio = Actor._initial_priorities(fake, np.array([[1, 0]]), np.array([[1.0, 1.0]]), None,
                                     np.array([[False, True]]))  # fmt: skip
    np.testing.assert_allclose(prio, [[abs(1 + 0.9 * 6 - 3), abs(1 + 0 - 2)]])


def test_a_prioritized_run_holds_the_utd_and_reports_every_workers_share(leak_guard):
    from small import small_config

    from dqnlab import metrics as M
    from dqnlab.engine import train

    for mode in ("serial", "parallel"):
        result = train(small_config(mode=mode, replay="prioritized", replicas=2, utd=2.0))
        for rep in result.replicas:
            assert rep.final[M.UPDATES] == 2000 and rep.final[M.UTD_REALISED] == pytest.approx(2.0)
            shares = [rep.final[M.worker_share(w, "sampled")] for w in range(2)]
            assert sum(shares) == pytest.approx(1.0) and min(shares) > 0.2
