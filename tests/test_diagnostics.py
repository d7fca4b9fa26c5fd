import math

import numpy as np
import pytest
import torch

from dqnlab.agent.diagnostics import (
    discounted_returns,
    dormant_fractions,
    overestimation,
    q_bound,
    q_statistics,
    srank,
)


@pytest.mark.parametrize("rank", [1, 3, 8])
def test_srank_of_matrices_of_known_rank(rank):
    rng = np.random.default_rng(rank)
    # equal singular values: all `rank` of them are needed to reach 99%
    u, _ = np.linalg.qr(rng.standard_normal((64, rank)))
    v, _ = np.linalg.qr(rng.standard_normal((16, rank)))
    assert srank(u @ v.T) == rank


def test_srank_ignores_the_smallest_one_percent_of_the_spectrum():
    s = np.array([50.0, 49.0, 0.5, 0.4])  # the last two hold 0.9% of the mass
    assert srank(np.diag(s)) == 2
    assert srank(np.zeros((5, 3))) == 0


def test_dormant_fraction_of_known_activations():
    h = np.ones((4, 10))
    h[:, 0] = 0.0  # dead unit: tau 0 and tau 0.1 dormant
    h[:, 1] = 0.05  # score 0.05/((8+0.05)/10) ~ 0.062 <= 0.1: tau 0.1 dormant only
    out = dormant_fractions([h, np.ones((3, 4))])
    assert out["dormant_frac_tau0_l0"] == pytest.approx(0.1)
    assert out["dormant_frac_tau0.1_l0"] == pytest.approx(0.2)
    assert out["dormant_frac_tau0.1_l1"] == 0.0
    assert out["dormant_frac_tau0.1"] == pytest.approx(2 / 14)
    assert out["dormant_frac_tau0"] == pytest.approx(1 / 14)


def test_all_dead_layer_is_fully_dormant():
    out = dormant_fractions([np.zeros((3, 5))])
    assert out["dormant_frac_tau0"] == 1.0


def _constant_q(value: float, replicas: int = 1, num_actions: int = 2):
    """A learner whose networks output ``value`` for every action of every state (head weights 0)."""
    from dqnlab.agent.learner import Learner
    from dqnlab.config import Config

    learner = Learner(Config.from_flat(batch_size=32, learning_starts=32, probe_size=32, replicas=replicas), 4,
                      num_actions)  # fmt: skip
    with torch.no_grad():
        learner.net.named()["head.weight"].zero_()
        learner.net.named()["head.bias"].fill_(value)
    return learner


def test_a_cartpole_agent_whose_q_sits_on_the_bound_is_not_soft_diverged():
    # CartPole pays r = 1 a step and bootstraps through its time limit: the optimal Q is exactly
    # 1 / (1 - 0.99) = 100, so a good agent's Q sits on the textbook bound, a little above it at times
    from dqnlab.agent.collapse import collapse_signs, divergence_check
    from dqnlab.metrics import Q_ABOVE_BOUND, Q_BOUND, Q_LIMIT, SOFT_DIVERGENCE

    assert q_bound(1.0, 0.99) == pytest.approx(100.0)
    learner = _constant_q(101.0)
    states = torch.randn(1, 32, 4)
    signs = collapse_signs(learner, states, states, [1.0], 0.99, margin=0.5)[0].metrics
    assert signs[Q_ABOVE_BOUND] == 1.0  # the textbook test labels it
    assert signs[Q_BOUND] == pytest.approx(100.0) and signs[Q_LIMIT] == pytest.approx(150.0)
    check = divergence_check(learner, states, states, [1.0], 0.99, margin=0.5)[0]
    assert check[SOFT_DIVERGENCE] == 0.0  # what the env can pay plus the margin: not diverged
    assert divergence_check(_constant_q(1e4), states, states, [1.0], 0.99, 0.5)[0][SOFT_DIVERGENCE] == 1.0


def test_soft_divergence_works_for_negative_rewards_and_non_finite_q():
    # Acrobot pays -1 a step: Q lives in [-100, 0]; a Q of -180 is beyond anything the env can pay
    from dqnlab.agent.collapse import q_limit, soft_divergence

    limit = q_limit(1.0, 0.99, 0.5)
    assert not soft_divergence(abs(-99.0), limit)
    assert soft_divergence(abs(-180.0), limit)
    assert soft_divergence(math.nan, limit) and soft_divergence(math.inf, limit)


def test_a_nan_q_on_either_batch_is_soft_divergence_whichever_batch_it_is_on():
    # finite weights can still give NaN Q on some states (inf - inf in a layer): a NaN on the current
    # batch beside a finite probe must fire the check as a NaN on the probe does (Python's max(p, nan)
    # returns p and hid it)
    from dqnlab.agent.collapse import collapse_signs, divergence_check
    from dqnlab.metrics import Q_ABOVE_BOUND, SOFT_DIVERGENCE

    learner = _constant_q(50.0)
    finite, overflowing = torch.randn(1, 32, 4), torch.full((1, 32, 4), math.inf)
    for probe, current in ((finite, overflowing), (overflowing, finite)):
        assert divergence_check(learner, probe, current, [1.0], 0.99, 0.5)[0][SOFT_DIVERGENCE] == 1.0
        assert collapse_signs(learner, probe, current, [1.0], 0.99, 0.5)[0].metrics[Q_ABOVE_BOUND] == 1.0
    assert divergence_check(learner, finite, finite, [1.0], 0.99, 0.5)[0][SOFT_DIVERGENCE] == 0.0


def test_discounted_returns_and_overestimation_by_hand():
    g = discounted_returns(np.array([1.0, 1.0, 1.0]), 0.5)
    np.testing.assert_allclose(g, [1.75, 1.5, 1.0])
    assert overestimation(np.array([2.75, 2.5, 2.0]), np.array([1.0, 1.0, 1.0]), 0.5) == pytest.approx(1.0)


def test_q_statistics():
    q_all = torch.tensor([[1.0, 3.0], [2.0, 0.0], [5.0, 4.0]])
    q_sa = torch.tensor([1.0, 2.0, 4.0])
    stats = q_statistics(q_sa, q_all, torch.tensor([0.0, 1.0, 2.0]))
    assert stats["q_mean"] == pytest.approx(7 / 3)
    assert (stats["q_max"], stats["q_min"]) == (4.0, 1.0)
    assert stats["q_greedy_mean"] == pytest.approx(10 / 3)
    assert stats["q_p50"] == 2.0
    assert stats["target_mean"] == 1.0


class OffHost(torch.Tensor):
    """A stand-in for a tensor on an accelerator, checkable on a CPU-only machine: operations among
    such tensors work (and stay on the "device"), ``float()`` works (a device sync), but ``.numpy()``
    and any operation mixing it with a host tensor raise, as they do for a CUDA tensor. ``.cpu()`` or
    ``.to("cpu")`` returns a plain host tensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_flatten, tree_map

        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if any(isinstance(t, cls) for t in tensors) and any(not isinstance(t, cls) for t in tensors):
            raise RuntimeError(f"{name}: expected all tensors to be on the same device, found a host tensor")
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        to_host = name == "cpu" or (name == "to" and any(str(a).startswith("cpu") for a in [*args[1:], *kwargs.values()]))
        if to_host:
            return out.as_subclass(torch.Tensor)
        return tree_map(lambda x: x.as_subclass(cls) if type(x) is torch.Tensor else x, out)

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert an accelerator tensor to numpy; copy it to the host first")


@pytest.fixture
def device_semantics(monkeypatch):
    """``torch.as_tensor(t, dtype=...)`` keeps a device tensor on its device (it converts an OffHost to a
    host tensor otherwise: torch does not dispatch it to ``__torch_function__``)."""
    as_tensor = torch.as_tensor

    def faithful(data, dtype=None, device=None):
        if isinstance(data, OffHost):
            out = data if dtype is None else data.to(dtype)
            return out if device is None else out.to(device)
        return as_tensor(data, dtype=dtype, device=device)

    monkeypatch.setattr(torch, "as_tensor", faithful)


def off_host(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float32)).as_subclass(OffHost)


def test_the_offhost_stand_in_refuses_what_a_gpu_tensor_refuses(device_semantics):
    t = off_host(np.ones((3, 2)))
    with pytest.raises(TypeError):
        t.numpy()
    with pytest.raises(RuntimeError, match="same device"):
        torch.searchsorted(t[:, 0].contiguous(), torch.tensor([0.5]))
    assert isinstance(t.abs().max(dim=1).values, OffHost) and float(t.sum()) == 6.0  # device-local ops work
    assert type(t.cpu()) is torch.Tensor and type(t.to("cpu", torch.float64)) is torch.Tensor
    assert isinstance(torch.as_tensor(t, dtype=torch.float64), OffHost)


def test_diagnostics_move_device_tensors_to_the_host_first(device_semantics):
    rng = np.random.default_rng(0)
    acts = [rng.random((32, 8)), rng.random((32, 4))]
    expected = dormant_fractions(acts)
    assert dormant_fractions([off_host(a) for a in acts]) == pytest.approx(expected)
    assert srank(off_host(acts[0])) == srank(acts[0])
    q_all = rng.standard_normal((16, 2))
    q_sa = q_all[:, 0]
    target = rng.standard_normal(16)
    host = q_statistics(torch.as_tensor(q_sa), torch.as_tensor(q_all), torch.as_tensor(target))
    assert q_statistics(off_host(q_sa), off_host(q_all), off_host(target)) == pytest.approx(host, rel=1e-6)


class _Chain:
    """A chain env: reward 1 every step, never terminates; the observation is the step index.
    ``TimeLimit`` cuts it at ``horizon`` steps (truncated); with ``terminal`` it terminates there."""

    def __init__(self, horizon: int, terminal: bool):
        self.horizon, self.terminal, self.t = horizon, terminal, 0

    def reset(self, seed=None):
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.horizon
        return np.array([float(self.t)], np.float32), 1.0, end and self.terminal, end and not self.terminal, {}


class _TrueValues:
    """The exact greedy value function of the chain: 1/(1-gamma) for the continuing task (cut by a
    time limit), (1 - gamma^(T-t))/(1-gamma) for the episodic one."""

    def __init__(self, gamma: float, horizon: int, terminal: bool):
        self.gamma, self.horizon, self.terminal = gamma, horizon, terminal

    def q_values(self, obs):
        t = obs[:, 0]
        v = (1 - self.gamma ** (self.horizon - t)) / (1 - self.gamma) if self.terminal else 1 / (1 - self.gamma) + 0 * t
        return np.stack([v, v - 1.0], axis=1)


@pytest.mark.parametrize("terminal", [False, True])
def test_overestimation_of_the_true_value_function_is_zero_at_truncation_and_termination(terminal):
    from dqnlab.agent.greedy_episodes import evaluate

    gamma, horizon = 0.99, 50
    res = evaluate(_TrueValues(gamma, horizon, terminal), _Chain(horizon, terminal), episodes=2, gamma=gamma, seed=0)
    assert res.returns == [50.0, 50.0]
    assert res.overestimation == pytest.approx(0.0, abs=1e-3)  # float32 observations: ~1e-5 of Q ~ 100
    if not terminal:  # without the tail the same episode reads mean_t gamma^(T-t)/(1-gamma) ~ +39
        naive = overestimation(np.full(horizon, 1 / (1 - gamma)), np.ones(horizon), gamma)
        assert naive > 30


def test_discounted_returns_bootstrap_the_tail():
    g = discounted_returns(np.array([1.0, 1.0]), 0.5, bootstrap=4.0)
    np.testing.assert_allclose(g, [1 + 0.5 + 0.25 * 4, 1 + 0.5 * 4])


def test_the_learners_collapse_signs_work_on_device_tensors(device_semantics):
    """What the engine computes at a log point, with the learner's probe outputs left on a device."""
    from dqnlab.agent.collapse import collapse_signs
    from dqnlab.agent.learner import Learner
    from dqnlab.config import Config
    from dqnlab.metrics import DORMANT_CURRENT, DORMANT_FRAC, HARD_DIVERGENCE, SRANK, SRANK_CURRENT

    config = Config.from_flat(batch_size=32, learning_starts=32, probe_size=32, replicas=2)
    learner = Learner(config, obs_shape=4, num_actions=2)
    probe = torch.randn(2, 32, 4)
    current = torch.randn(2, 32, 4)
    host = collapse_signs(learner, probe, current, [1.0, 1.0], gamma=0.99, margin=0.5)
    on_host = learner.probe

    def probe_on_device(obs):
        q, acts = on_host(obs)
        return off_host(q.numpy()), [off_host(a.numpy()) for a in acts]

    learner.probe = probe_on_device
    device = collapse_signs(learner, probe, current, [1.0, 1.0], gamma=0.99, margin=0.5)
    for k in range(2):
        assert device[k].metrics == pytest.approx(host[k].metrics)
        assert device[k].metrics[HARD_DIVERGENCE] == 0.0
        assert {SRANK, DORMANT_FRAC, SRANK_CURRENT, DORMANT_CURRENT[0.1]} <= set(device[k].metrics)
