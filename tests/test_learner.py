import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dqnlab.agent.batch import Batch
from dqnlab.agent.layers import mlp_spec as mlp
from dqnlab.agent.learner import Learner, clip_per_replica_, td_target
from dqnlab.agent.networks import QNetwork, StackedQ
from dqnlab.agent.reference import dqn_gradient
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


def _batch(rng, n=32, replicas=1, reward_scale=1.0):
    obs = rng.standard_normal((replicas, n, 4)).astype(np.float32)
    z = np.zeros((replicas, n), dtype=np.int64)
    rewards = (reward_scale * rng.standard_normal((replicas, n))).astype(np.float32)
    return Batch(obs, rng.integers(0, 2, (replicas, n)), rewards, rng.standard_normal((replicas, n, 4)).astype(np.float32),
                 rng.random((replicas, n)) < 0.1, z.astype(np.int16), z, z)  # fmt: skip


def _learner(**overrides) -> Learner:
    config = Config.from_flat(batch_size=32, learning_starts=32, probe_size=32, **overrides)
    return Learner(config, obs_shape=4, num_actions=2)


def _params(net):
    return [p.detach().clone() for p in net.parameters()]


def test_stacked_forward_is_each_replicas_own_network():
    nets = [QNetwork(mlp(4, 3, (16, 8))) for _ in range(3)]
    stacked = StackedQ.stack(nets)
    obs = torch.randn(3, 5, 4)
    q = stacked(obs)
    for k, net in enumerate(nets):
        torch.testing.assert_close(q[k], net(obs[k]), rtol=1e-5, atol=1e-6)
    ln_nets = [QNetwork(mlp(4, 3, (16, 8), layer_norm=True)) for _ in range(2)]
    for n in ln_nets:  # non-trivial LayerNorm affine parameters
        for norm in n.norms:
            torch.nn.init.normal_(norm.weight)
            torch.nn.init.normal_(norm.bias)
    q, acts = StackedQ.stack(ln_nets).forward_with_activations(obs[:2])
    for k, net in enumerate(ln_nets):
        q_k, acts_k = net.forward_with_activations(obs[k])
        torch.testing.assert_close(q[k], q_k, rtol=1e-5, atol=1e-6)
        for a, b in zip(acts, acts_k):
            torch.testing.assert_close(a[k], b, rtol=1e-5, atol=1e-6)


def _reference_update(net: QNetwork, target: QNetwork, opt: torch.optim.Adam, batch: Batch, k: int, config: Config):
    """One autograd single-network DQN update of replica k's slice of ``batch`` (dqnlab.agent.reference)."""
    _, _, norm = dqn_gradient(net, target, tuple(torch.from_numpy(x[k]) for x in batch.learner_arrays()), config.agent)
    grads = [p.grad.clone() for p in net.parameters()]
    opt.step()
    return float(norm), grads


def _references(learner: Learner, lr: float):
    refs = []
    for k in range(learner.replicas):
        net = QNetwork(learner.spec)
        with torch.no_grad():
            for p, s in zip(net.parameters(), learner.net.parameters()):
                p.copy_(s[k])
        refs.append((net, copy.deepcopy(net), torch.optim.Adam(net.parameters(), lr=lr)))
    return refs


@pytest.mark.parametrize("loss", ["huber", "mse"])
@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("double_dqn", [False, True])
def test_one_stacked_update_of_k_replicas_equals_k_single_network_updates(layer_norm, double_dqn, loss):
    k_replicas, lr = 3, 1e-2
    settings = dict(replicas=k_replicas, layer_norm=layer_norm, double_dqn=double_dqn, hidden_sizes=(16, 16), lr=lr,
                    loss=loss)  # fmt: skip
    batches = [_batch(np.random.default_rng(s), replicas=k_replicas) for s in range(3)]
    # the first batch's gradient norms, measured on copies: clip between the largest and the others,
    # so that clipping is active in one replica only
    probe = _learner(**settings)
    norms = [_reference_update(*ref, batches[0], k, probe.config)[0] for k, ref in enumerate(_references(probe, lr))]
    ranked = sorted(norms)
    learner = _learner(**settings, max_grad_norm=(ranked[-1] + ranked[-2]) / 2)
    refs = _references(learner, lr)
    for step, batch in enumerate(batches):
        norms, ref_grads = zip(*(_reference_update(*refs[k], batch, k, learner.config) for k in range(k_replicas)))
        learner.update(batch)
        if step == 0:
            assert sum(n > learner.config.agent.max_grad_norm for n in norms) == 1  # clipping in one replica only
        torch.testing.assert_close(learner.last_grad_norm, torch.tensor(norms), rtol=1e-5, atol=1e-6)
        grads = learner.net.views(learner.last_grads)
        moments = {key: learner.net.views(getattr(learner.optimizer, key)) for key in ("exp_avg", "exp_avg_sq")}
        for k, (net, _, opt) in enumerate(refs):
            for (name, p), g in zip(net.named_parameters(), ref_grads[k]):
                torch.testing.assert_close(grads[name][k], g, rtol=1e-5, atol=1e-6)  # gradients (after clipping)
                torch.testing.assert_close(learner.net.named()[name][k], p.detach(), rtol=1e-5, atol=1e-6)  # parameters
                for key in ("exp_avg", "exp_avg_sq"):
                    torch.testing.assert_close(moments[key][name][k], opt.state[p][key], rtol=1e-5, atol=1e-7)  # Adam


def test_per_replica_clipping_matches_clip_grad_norm():
    grads = [torch.randn(3, 4, 5), 0.1 * torch.randn(3, 4)]
    expected = []
    for k in range(3):
        gs = [g[k].clone().requires_grad_(False) for g in grads]
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in gs]
        for p, g in zip(params, gs):
            p.grad = g
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        expected.append((float(norm), [p.grad for p in params]))
    matrix = torch.cat([g.reshape(3, -1) for g in grads], dim=1)  # one replica's whole gradient per row
    norms = clip_per_replica_(matrix, 1.0)
    for k, (norm, gs) in enumerate(expected):
        assert float(norms[k]) == pytest.approx(norm, rel=1e-6)
        torch.testing.assert_close(matrix[k], torch.cat([e.reshape(-1) for e in gs]))


def test_a_frozen_replica_never_moves_and_its_nan_reaches_no_other_replica():
    poisoned = _learner(replicas=3, hidden_sizes=(16,), lr=1e-2)
    clean = _learner(replicas=3, hidden_sizes=(16,), lr=1e-2)
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(2):
        poisoned.update(_batch(rng_a, replicas=3))
        clean.update(_batch(rng_b, replicas=3))
    with torch.no_grad():
        for p in poisoned.net.parameters():
            p[1].fill_(float("nan"))
    poisoned.freeze(1)
    frozen = [p.detach()[1].clone() for p in poisoned.net.parameters()]
    for _ in range(5):
        poisoned.update(_batch(rng_a, replicas=3))
        clean.update(_batch(rng_b, replicas=3))
    for k in (0, 2):
        assert torch.equal(poisoned.net.flat[k], clean.net.flat[k])  # the others: bit for bit as without the poison
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(getattr(poisoned.optimizer, key)[k], getattr(clean.optimizer, key)[k])
    for p, f in zip(poisoned.net.parameters(), frozen):
        assert torch.isnan(p.detach()[1]).all() and torch.isnan(f).all()  # frozen as it was: untouched NaN


def test_a_replica_frozen_with_finite_weights_never_moves_again():
    # finite weights, primed Adam moments: a freeze that only zeroed the gradients would let the
    # momentum carry the replica on, step after step
    learner = _learner(replicas=3, hidden_sizes=(16,), lr=1e-2)
    rng = np.random.default_rng(6)
    for _ in range(3):
        learner.update(_batch(rng, replicas=3))
    learner.freeze(1)
    frozen = learner.net.flat[1].clone()
    others = learner.net.flat[[0, 2]].clone()
    for _ in range(4):
        learner.update(_batch(rng, replicas=3))
    assert torch.isfinite(frozen).all()
    assert torch.equal(learner.net.flat[1], frozen)  # bit for bit
    assert not torch.equal(learner.net.flat[[0, 2]], others)  # the others went on learning


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


def test_polyak_mode_moves_the_target_after_every_update():
    learner = _learner(target_update="polyak", tau=0.5, replicas=2)
    before = _params(learner.target)
    learner.update(_batch(np.random.default_rng(0), replicas=2))
    expected = [0.5 * o + 0.5 * t for o, t in zip(_params(learner.net), before)]
    for got, want in zip(_params(learner.target), expected):
        torch.testing.assert_close(got, want)


def _prime(learner, steps=3):
    rng = np.random.default_rng(1)
    for _ in range(steps):
        learner.update(_batch(rng, replicas=learner.replicas))


@pytest.mark.parametrize("mode", ["head", "full", "shrink_perturb"])
def test_each_reset_mode_changes_exactly_what_it_says_and_clears_that_optimizer_state(mode):
    learner = _learner(reset=mode, reset_every=10_000, shrink_alpha=0.5, replicas=2)
    _prime(learner)
    before = {n: p.detach().clone() for n, p in learner.net.named().items()}
    touched = set(learner.reset_names(mode))
    learner.reset(mode)
    for name, p in learner.net.named().items():
        for k in range(2):
            changed = not torch.equal(before[name][k], p.detach()[k])
            assert changed == (name in touched), f"{mode}: {name} replica {k} changed={changed}"
        cols = learner.net.columns(name)
        adam = learner.optimizer
        cleared = bool((adam.beta1_power[cols] == 1).all() and (adam.beta2_power[cols] == 1).all()
                       and (adam.exp_avg[:, cols] == 0).all() and (adam.exp_avg_sq[:, cols] == 0).all())  # fmt: skip
        kept = bool((adam.beta1_power[cols] < 1).all() and (adam.beta2_power[cols] < 1).all())
        assert cleared == (name in touched), f"{mode}: optimizer state of {name}"
        assert kept == (name not in touched), f"{mode}: Adam step count of {name}"
        if name in touched:
            assert torch.equal(p.detach(), learner.target.named()[name])
    if mode == "head":
        assert touched == {"head.weight", "head.bias"}


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8])
def test_shrink_perturb_is_alpha_theta_plus_one_minus_alpha_fresh_from_each_replicas_generator(alpha):
    learner = _learner(reset="shrink_perturb", reset_every=10_000, shrink_alpha=alpha, replicas=2)
    _prime(learner)
    before = _params(learner.net)
    states = [g.get_state() for g in learner._gens]  # the fresh draws the reset will make, drawn here first
    fresh = [_params(learner._fresh_net(k)) for k in range(2)]
    for g, s in zip(learner._gens, states):
        g.set_state(s)
    learner.reset("shrink_perturb")
    after = _params(learner.net)
    assert not all(torch.equal(a, b) for a, b in zip(before, after))
    for i, (b, a, t) in enumerate(zip(before, after, learner.target.parameters())):
        for k in range(2):
            torch.testing.assert_close(a[k], alpha * b[k] + (1 - alpha) * fresh[k][i])
        torch.testing.assert_close(t.detach(), a)  # the target takes the same values
    adam = learner.optimizer  # Adam state cleared: moments zero, every column restarts at step 0
    assert (adam.beta1_power == 1).all() and (adam.beta2_power == 1).all()
    assert not adam.exp_avg.any() and not adam.exp_avg_sq.any()
    assert not torch.equal(fresh[0][0], fresh[1][0])  # each replica draws from its own generator


def test_shrink_perturb_with_alpha_1_keeps_the_weights():
    learner = _learner(reset="shrink_perturb", reset_every=10_000, shrink_alpha=1.0)
    _prime(learner)
    before = _params(learner.net)
    learner.reset("shrink_perturb")
    assert all(torch.equal(a, b) for a, b in zip(before, _params(learner.net)))


def test_reset_runs_on_schedule_in_updates():
    learner = _learner(reset="head", reset_every=4)
    _prime(learner, steps=8)
    assert learner.resets == 2


def test_replica_k_starts_from_the_weights_a_one_replica_run_with_seed_plus_k_draws():
    three = _learner(replicas=3, seed=10)
    for k in range(3):
        one = _learner(seed=10 + k)
        for a, b in zip(three.net.parameters(), one.net.parameters()):
            assert torch.equal(a.detach()[k], b.detach()[0])


def test_update_reduces_td_loss_on_a_fixed_batch():
    learner = _learner(lr=1e-2, target_period=10_000)
    batch = _batch(np.random.default_rng(3))
    first = learner.update(batch, want_stats=True)[0]["td_loss_last"]
    for _ in range(100):
        last = learner.update(batch, want_stats=True)[0]["td_loss_last"]
    assert last < first * 0.5


def test_stacked_adam_is_torch_adam_per_row_and_a_cleared_column_restarts_as_dropped_state():
    from dqnlab.agent.adam import StackedAdam

    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(3, 2)  # two "parameters", 3 replicas
    mine = StackedAdam(torch.cat([a, b], dim=1).clone(), lr=1e-2)
    refs = [[torch.nn.Parameter(a[k].clone()), torch.nn.Parameter(b[k].clone())] for k in range(3)]
    opts = [torch.optim.Adam(ps, lr=1e-2) for ps in refs]
    for step in range(6):
        if step == 3:  # the second parameter is reset: its Adam state is dropped (mine: its columns cleared)
            mine.clear(slice(4, 6))
            for ps, opt in zip(refs, opts):
                opt.state.pop(ps[1])
        g = torch.randn(3, 6)
        mine.step(g)
        for k, (ps, opt) in enumerate(zip(refs, opts)):
            ps[0].grad, ps[1].grad = g[k, :4].clone(), g[k, 4:].clone()
            opt.step()
            torch.testing.assert_close(mine.params[k], torch.cat([p.detach() for p in ps]), rtol=1e-5, atol=1e-7)
            torch.testing.assert_close(mine.exp_avg_sq[k, 4:], opt.state[ps[1]]["exp_avg_sq"], rtol=1e-5, atol=1e-9)
    steps = torch.tensor([6, 6, 6, 6, 3, 3], dtype=torch.float64)
    torch.testing.assert_close(mine.beta1_power, 0.9**steps, rtol=1e-12, atol=0)
    torch.testing.assert_close(mine.beta2_power, 0.999**steps, rtol=1e-12, atol=0)


def test_the_mse_and_huber_losses_differ_where_a_td_error_exceeds_1():
    # |q - y| > 1 somewhere: Huber's gradient is clamped there, MSE's is not (the reason the loss decides
    # divergence at CleanRL's settings)
    batch = _batch(np.random.default_rng(4), reward_scale=10.0)
    huber, mse = _learner(loss="huber"), _learner(loss="mse")
    assert torch.equal(huber.net.flat, mse.net.flat)
    out_h = huber.gradient_step(*huber.batch_tensors(batch))
    out_m = mse.gradient_step(*mse.batch_tensors(batch))
    diff = out_m.q_sa - out_m.target
    assert (diff.abs() > 1).any()
    torch.testing.assert_close(out_m.loss, diff.square().mean(dim=1))
    torch.testing.assert_close(out_h.loss, F.smooth_l1_loss(out_h.q_sa, out_h.target, reduction="none").mean(dim=1))
    assert not torch.equal(huber.net.flat, mse.net.flat)
