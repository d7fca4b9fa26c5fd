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
    # nor does the stale slot's |TD error| become the largest priority, which new transitions start at
    assert 0 in batch.slots[0]
    before = replay._a["prio_max"].copy()
    td = np.where(batch.slots == 0, 1e6, 1.0)
    replay.update_priorities(batch.slots, batch.seq, td)
    np.testing.assert_array_equal(replay._a["prio_max"], before)


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
    states = {"obs": np.array([[[0.0], [1.0]]]), "next": np.array([[[2.0], [3.0]]])}  # one replica, two envs

    def q_values(x):  # the actor's Q of the states it is given: the next states' differ from the states'
        return q["next"] if np.array_equal(x, states["next"]) else q["obs"]

    fake = types.SimpleNamespace(config=Config.from_flat(replay="prioritized", gamma=0.9), _q=q["obs"],
                                 policy=types.SimpleNamespace(q_values=q_values))  # fmt: skip
    prio = Actor._initial_priorities(fake, np.array([[1, 0]]), np.array([[1.0, 1.0]]), states["next"],
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
            assert sum(shares) == pytest.approx(1.0)
            if mode == "serial":  # the workers step in turn: each holds half the ring (in parallel: their speeds)
                assert min(shares) > 0.2


def test_a_transition_without_an_actors_priority_takes_the_largest_so_far():
    replay = _replay(8, replicas=2, alpha=0.5)
    _fill(replay, np.array([[5.0, 1.0], [0.5, 2.0]]))
    k, n = 2, 2
    obs, z = np.zeros((k, n, 2), np.float32), np.zeros((k, n), bool)
    replay.claim(n)
    replay.commit(0, obs, np.zeros((k, n), np.int64), np.zeros((k, n), np.float32), obs, z, z, np.zeros((k, n), np.int64),
                  0, [], claim_next=0)  # fmt: skip
    leaves = replay._a["prio_tree"][:, 8:]
    np.testing.assert_allclose(leaves[:, 2:4], [[(5 + 1e-6) ** 0.5] * 2, [(2 + 1e-6) ** 0.5] * 2])


def test_priorities_land_in_the_ring_slot_a_commit_wraps_to():
    replay = _replay(4, replicas=2, alpha=1.0)
    _fill(replay, np.ones((2, 3)))
    _fill(replay, np.array([[7.0, 9.0], [3.0, 4.0]]))  # seq 3 -> slot 3, seq 4 -> slot 0
    np.testing.assert_allclose(replay._a["prio_tree"][:, 4:8], [[9, 1, 1, 7], [4, 1, 1, 3]], rtol=1e-5)
    np.testing.assert_allclose(sumtree.total(replay._a["prio_tree"]), [18, 9], rtol=1e-5)


def test_draws_are_stratified_one_in_each_equal_slice_of_the_mass():
    replay = _replay(16, replicas=2, alpha=1.0)
    _fill(replay, np.ones((2, 16)))
    batch = replay.sample([np.random.default_rng(s) for s in (4, 5)], 16)
    np.testing.assert_array_equal(batch.slots, np.tile(np.arange(16), (2, 1)))  # slice j holds exactly slot j


def test_a_non_finite_td_error_never_makes_a_replicas_priorities_or_weights_non_finite():
    replay = _replay(8, replicas=2, alpha=0.6)
    _fill(replay, np.arange(1.0, 17.0).reshape(2, 8))
    batch = replay.sample([np.random.default_rng(s) for s in (0, 1)], 4)
    td = np.array([[np.nan, np.inf, -np.inf, 1.0], [2.0, 2.0, 2.0, 2.0]])
    replay.update_priorities(batch.slots, batch.seq, td)
    tree = replay._a["prio_tree"]
    assert np.isfinite(tree).all() and np.isfinite(replay._a["prio_max"]).all()
    assert replay._a["prio_max"][0] == pytest.approx(8.0 + 1e-6)  # the largest finite one, unchanged
    later = replay.sample([np.random.default_rng(s) for s in (2, 3)], 64, beta=0.5)
    assert np.isfinite(later.weights).all()
    _fill(replay, np.array([[np.nan], [1.0]]))  # an actor's non-finite first priority, too
    assert np.isfinite(tree).all()


def test_a_peer_killed_holding_the_replay_lock_fails_the_priority_write_back_instead_of_hanging_it():
    import threading

    replay = _replay(8, replicas=1)
    _fill(replay, np.ones((1, 8)))
    batch = replay.sample([np.random.default_rng(0)], 4)
    replay._lock.acquire()  # taken by a peer that died inside commit: never released

    def dead_peer():
        raise RuntimeError("worker 0 (pid 1) was killed by SIGKILL")

    outcome = []

    def write_back():
        try:
            replay.update_priorities(batch.slots, batch.seq, np.ones((1, 4)), health_check=dead_peer)
        except RuntimeError as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=write_back, daemon=True)
    thread.start()
    thread.join(timeout=60)  # a hang detector: the health check is polled every 0.25 s of waiting
    assert outcome == ["worker 0 (pid 1) was killed by SIGKILL"]


def test_beta_is_annealed_linearly_to_one_over_the_budget_and_the_sampler_draws_with_it():
    from dqnlab.config import Config
    from dqnlab.engine.sampler import Sampler, annealed_beta

    assert [annealed_beta(0.4, s, 100) for s in (0, 50, 100, 200)] == pytest.approx([0.4, 0.7, 1.0, 1.0])
    replay = _replay(8, replicas=1, alpha=1.0)
    p = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]])
    _fill(replay, p)
    config = Config.from_flat(replay="prioritized", priority_beta=0.4, total_env_steps=1000, batch_size=32,
                              learning_starts=32, probe_size=32)  # fmt: skip
    batch = Sampler(replay, config, [np.random.default_rng(0)]).draw(500)
    probs = (p[0] + 1e-6) / (p[0] + 1e-6).sum()
    w = (8 * probs[batch.slots[0]]) ** -0.7  # beta at half the budget
    np.testing.assert_allclose(batch.weights[0], w / w.max(), rtol=1e-5)


def test_the_learners_td_errors_are_q_minus_the_reference_target_before_its_step():
    from dqnlab.agent.batch import Batch
    from dqnlab.agent.learner import Learner
    from dqnlab.agent.networks import QNetwork
    from dqnlab.agent.reference import dqn_loss
    from dqnlab.config import Config

    config = Config.from_flat(batch_size=8, learning_starts=32, probe_size=32, hidden_sizes=(8,), replicas=2)
    learner = Learner(config, 3, 2)
    rng = np.random.default_rng(0)
    arrays = dict(obs=rng.standard_normal((2, 8, 3)).astype(np.float32), actions=rng.integers(0, 2, (2, 8)),
                  rewards=rng.standard_normal((2, 8)).astype(np.float32),
                  next_obs=rng.standard_normal((2, 8, 3)).astype(np.float32), terminated=rng.random((2, 8)) < 0.3)
    nets = []
    for k in range(2):  # each replica's online and target network before the step, as nn.Modules
        pair = []
        for stacked in (learner.net, learner.target):
            net = QNetwork(learner.spec)
            net.load_state_dict({name: v[k].clone() for name, v in stacked.named().items()})
            pair.append(net)
        nets.append(pair)
    batch = Batch(**arrays, worker=np.zeros((2, 8), np.int16), version=np.zeros((2, 8)), insert_updates=np.zeros((2, 8)))
    learner.update(batch)
    for k, (net, target) in enumerate(nets):
        tensors = [torch.from_numpy(arrays[n][k]) for n in ("obs", "actions", "rewards", "next_obs", "terminated")]
        _, td = dqn_loss(net, target, *tensors, config.agent)
        torch.testing.assert_close(learner.last_td_errors[k], td)


def test_the_learner_loop_writes_each_updates_td_errors_back_as_priorities(leak_guard, monkeypatch):
    from small import small_config

    from dqnlab.agent.learner import Learner
    from dqnlab.engine.build import build, make_loop
    from dqnlab.tracking.callbacks import CallbackList

    config = small_config(mode="serial", replay="prioritized", replicas=2, utd=1.0, total_env_steps=600,
                          learning_starts=200, probe_size=32, priority_alpha=0.5)  # fmt: skip
    seen = []
    update = Learner.update

    def recording(self, batch, *args, **kwargs):
        out = update(self, batch, *args, **kwargs)
        seen.append((batch.slots.copy(), batch.seq.copy(), self.last_td_errors.numpy().copy()))
        return out

    monkeypatch.setattr(Learner, "update", recording)
    parts = build(config, 4, 2)
    make_loop(parts, CallbackList([])).run()
    slots, seq, td = seen[-1]  # the last update: no commit and no update came after it
    tree, width = parts.replay._a["prio_tree"], parts.replay._a["prio_tree"].shape[1] // 2
    checked = 0
    for k in range(2):
        once = [j for j in range(slots.shape[1]) if (slots[k] == slots[k, j]).sum() == 1]
        for j in once:
            assert parts.replay._a["seq"][slots[k, j]] == seq[k, j]
            assert tree[k, width + slots[k, j]] == pytest.approx((abs(td[k, j]) + 1e-6) ** 0.5)
            checked += 1
    assert len(seen) == 400 and checked > 0
