import numpy as np
import pytest
import torch

from dqnlab.agent.batch import Batch
from dqnlab.agent.learner import Learner, polyak_, td_target
from dqnlab.config import Config


def test_terminated_stops_bootstrapping_truncated_does_not():
    next_q = torch.tensor([[1.0, 3.0], [1.0, 3.0]])
    rewards = torch.tensor([1.0, 1.0])
    terminated = torch.tensor([True, False])  # row 1 is truncated: it still bootstraps
    y = td_target(rewards, terminated, next_q, 0.9)
    torch.testing.assert_close(y, torch.tensor([1.0, 1.0 + 0.9 * 3.0]))


def test_double_dqn_target_uses_online_argmax_and_target_value():
    next_q_target = torch.tensor([[10.0, 2.0]])
    next_q_online = torch.tensor([[0.0, 5.0]])  # online prefers action 1
    y = td_target(torch.tensor([0.0]), torch.tensor([False]), next_q_target, 0.5, next_q_online)
    torch.testing.assert_close(y, torch.tensor([1.0]))  # 0.5 * target[1], not 0.5 * max = 5


def _batch(rng, n=32):
    obs = rng.standard_normal((n, 4)).astype(np.float32)
    z = np.zeros(n, dtype=np.int64)
    return Batch(obs, rng.integers(0, 2, n), np.ones(n, np.float32), obs.copy(), np.zeros(n, bool),
                 np.zeros(n, bool), z.astype(np.int16), z, z, z)  # fmt: skip


def _learner(**overrides) -> Learner:
    config = Config.from_flat(batch_size=32, learning_starts=32, probe_size=32, **overrides)
    return Learner(config, obs_dim=4, num_actions=2)


def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def test_hard_target_copy_happens_every_target_period_updates():
    learner = _learner(target_period=3)
    rng = np.random.default_rng(0)
    before = _params(learner.target)
    for _ in range(2):
        learner.update(_batch(rng))
    assert all(torch.equal(a, b) for a, b in zip(before, _params(learner.target)))
    learner.update(_batch(rng))
    assert all(torch.equal(a, b) for a, b in zip(_params(learner.net), _params(learner.target)))
    assert learner.target_updates == 1


def test_polyak_maths():
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    ta, tb = _params(a), _params(b)
    polyak_(a, b, 0.25)
    for new, old_t, online in zip(_params(a), ta, tb):
        torch.testing.assert_close(new, 0.25 * online + 0.75 * old_t)


def test_polyak_mode_moves_the_target_after_every_update():
    learner = _learner(target_update="polyak", tau=0.5)
    before = _params(learner.target)
    learner.update(_batch(np.random.default_rng(0)))
    expected = [0.5 * o + 0.5 * t for o, t in zip(_params(learner.net), before)]
    for got, want in zip(_params(learner.target), expected):
        torch.testing.assert_close(got, want)


def _prime(learner, steps=3):
    rng = np.random.default_rng(1)
    for _ in range(steps):
        learner.update(_batch(rng))


@pytest.mark.parametrize("mode", ["head", "full", "shrink_perturb"])
def test_each_reset_mode_changes_exactly_what_it_says_and_clears_that_optimizer_state(mode):
    learner = _learner(reset=mode, reset_every=10_000, shrink_alpha=0.5)
    _prime(learner)
    names = [n for n, _ in learner.net.named_parameters()]
    before = dict(zip(names, _params(learner.net)))
    touched = {id(p) for p in learner.reset_parameters(mode)}
    learner.reset(mode)
    after = dict(learner.net.named_parameters())
    for name, p in after.items():
        changed = not torch.equal(before[name], p.detach())
        is_touched = id(p) in touched
        assert changed == is_touched, f"{mode}: {name} changed={changed}"
        assert (p in learner.optimizer.state) == (not is_touched), f"{mode}: optimizer state of {name}"
    if mode == "head":
        assert {n for n, p in after.items() if id(p) in touched} == {"head.weight", "head.bias"}
    for p, tp in zip(learner.net.parameters(), learner.target.parameters()):
        if id(p) in touched:
            assert torch.equal(p, tp)


def test_shrink_perturb_interpolates_towards_a_fresh_init():
    learner = _learner(reset="shrink_perturb", reset_every=10_000, shrink_alpha=1.0)
    _prime(learner)
    before = _params(learner.net)
    learner.reset("shrink_perturb")  # alpha = 1 keeps the weights exactly
    assert all(torch.equal(a, b) for a, b in zip(before, _params(learner.net)))


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8])
def test_shrink_perturb_is_alpha_theta_plus_one_minus_alpha_fresh(alpha):
    learner = _learner(reset="shrink_perturb", reset_every=10_000, shrink_alpha=alpha)
    _prime(learner)
    before = _params(learner.net)
    state = learner._gen.get_state()  # the fresh draw the reset will make, drawn here first
    fresh = _params(learner._fresh_net())
    learner._gen.set_state(state)
    learner.reset("shrink_perturb")
    after = _params(learner.net)
    assert not all(torch.equal(a, b) for a, b in zip(before, after))
    for b, f, a, t in zip(before, fresh, after, learner.target.parameters()):
        torch.testing.assert_close(a, alpha * b + (1 - alpha) * f)
        torch.testing.assert_close(t.detach(), a)  # the target takes the same values
    assert all(not learner.optimizer.state.get(p) for p in learner.net.parameters())  # Adam state cleared


def test_reset_runs_on_schedule_in_updates():
    learner = _learner(reset="head", reset_every=4)
    _prime(learner, steps=8)
    assert learner.resets == 2


def test_update_reduces_td_loss_on_a_fixed_batch():
    learner = _learner(lr=1e-2, target_period=10_000)
    batch = _batch(np.random.default_rng(3))
    first = learner.update(batch, want_stats=True)["td_loss_last"]
    for _ in range(100):
        last = learner.update(batch, want_stats=True)["td_loss_last"]
    assert last < first * 0.5
