"""One network definition, three backends: every layer kind's torch module, stacked maths and numpy agree
(forward), and the stacked hand-written backward equals autograd, for one replica and several."""

import numpy as np
import pytest
import torch

from dqnlab.agent.layers import Conv2d, LayerNorm, Linear, NetworkSpec, ReLU, Reshape, mlp_spec, network_spec
from dqnlab.agent.networks import QNetwork, StackedQ, flatten_into
from dqnlab.agent.policy import NumpyQ
from dqnlab.config import Config, ConfigError

EVERY_KIND = NetworkSpec((Reshape((2, 6, 6)), Conv2d("conv.0", 2, 3, 3, 1), ReLU(), Conv2d("conv.1", 3, 4, 2, 2), ReLU(),
                          Reshape((-1,)), Linear("hidden.0", 16, 8), LayerNorm("norms.0", 8), ReLU(),
                          Linear("head", 8, 3)), obs_dim=72, num_actions=3)  # fmt: skip
"""Every layer kind in one network: an image observation (2 channels, 6x6) through two convolutions (the
second strided), flattened, a LayerNorm'd hidden layer and the head."""

SPECS = {"mlp": mlp_spec(4, 3, (32, 16)), "mlp+layernorm": mlp_spec(4, 3, (32, 16), layer_norm=True),
         "every kind": EVERY_KIND}  # fmt: skip


def _nets(spec: NetworkSpec, k: int) -> list[QNetwork]:
    torch.manual_seed(0)
    nets = [QNetwork(spec) for _ in range(k)]
    for net in nets:  # non-trivial LayerNorm affine parameters
        for name, p in net.named_parameters():
            if name.startswith("norms."):
                torch.nn.init.normal_(p)
    return nets


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("name", list(SPECS))
def test_the_three_backends_agree_and_the_stacked_backward_equals_autograd(name, k):
    spec = SPECS[name]
    nets = _nets(spec, k)
    stacked = StackedQ.stack(nets)
    step = torch.randn_like(stacked.flat) * 0.05
    stacked.flat.add_(step)  # an in-place update after stacking (Adam's, a target copy's) reaches every backend
    for r, net in enumerate(nets):
        with torch.no_grad():
            for p, d in zip(net.parameters(), stacked.views(step).values()):
                p.add_(d[r])
    twin = NumpyQ(spec, replicas=k)
    flatten_into(stacked, twin.params)
    obs = torch.randn(k, 5, spec.obs_dim)
    dq = torch.randn(k, 5, spec.num_actions)
    q, tape = stacked.forward_for_backward(obs)
    grads = stacked.views(stacked.backward(tape, dq))
    q_numpy = twin.q_values(obs.numpy())
    for r, net in enumerate(nets):
        q_r = net(obs[r])
        torch.testing.assert_close(q[r], q_r.detach(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(q_numpy[r], q_r.detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(twin.replica(r).q_values(obs[r, :1].numpy()), q_r[:1].detach().numpy(), rtol=1e-4,
                                   atol=1e-5)  # the one-observation path  # fmt: skip
        (q_r * dq[r]).sum().backward()  # d/dtheta of <Q, dq> is the backward of dq
        for pname, p in net.named_parameters():
            torch.testing.assert_close(grads[pname][r], p.grad, rtol=1e-4, atol=1e-5, msg=pname)
    assert [n for n, _ in nets[0].named_parameters()] == list(stacked.names) == list(spec.layout.names)


@pytest.mark.parametrize("name", list(SPECS))
def test_the_hidden_activations_are_the_same_in_torch_and_stacked(name):
    spec = SPECS[name]
    nets = _nets(spec, 2)
    obs = torch.randn(2, 5, spec.obs_dim)
    q, acts = StackedQ.stack(nets).forward_with_activations(obs)
    assert len(acts) == len(spec.feature_layers()) >= 1
    for r, net in enumerate(nets):
        q_r, acts_r = net.forward_with_activations(obs[r])
        torch.testing.assert_close(q[r], q_r, rtol=1e-5, atol=1e-5)
        for a, b in zip(acts, acts_r):
            assert a.shape[-1] == b.shape[-1] and a[r].ndim == 2  # fully connected features (B, H)
            torch.testing.assert_close(a[r], b, rtol=1e-5, atol=1e-5)


def test_the_config_builds_the_network_and_refuses_convolutions_that_do_not_fit():
    spec = network_spec(Config.from_flat(conv_channels=(8, 4), conv_kernels=(3, 2), conv_strides=(1, 2)).network,
                        (2, 7, 7), 3)  # fmt: skip
    assert [type(layer).__name__ for layer in spec.layers] == ["Reshape", "Conv2d", "ReLU", "Conv2d", "ReLU", "Reshape",
                                                              "Linear", "ReLU", "Linear", "ReLU", "Linear"]  # fmt: skip
    assert spec.obs_dim == 98 and spec.head == ("head.weight", "head.bias")
    with pytest.raises(ConfigError, match="conv_kernels"):
        network_spec(Config.from_flat(conv_channels=(4,), conv_kernels=(9,)).network, (2, 7, 7), 3)
    with pytest.raises(ConfigError, match="conv_channels"):
        network_spec(Config.from_flat(conv_channels=(4,)).network, 4, 2)  # vector observations
    from dqnlab.engine import train

    with pytest.raises(ConfigError, match="conv_channels"):  # the engine runs vector observations, and says so
        train(Config.from_flat(conv_channels=(4,), total_env_steps=600, learning_starts=200, batch_size=32, probe_size=32))
    with pytest.raises(ConfigError, match="conv_kernels"):
        Config.from_flat(conv_channels=(4, 4), conv_kernels=(3,))


def test_layer_norm_present_iff_on_and_sits_after_linear_before_relu():
    with_ln, without = QNetwork(mlp_spec(4, 2, (64, 64), True)), QNetwork(mlp_spec(4, 2, (64, 64)))
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in with_ln.modules()) == 2
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in without.modules())
    net = QNetwork(mlp_spec(4, 2, (8,), True))
    obs = torch.randn(5, 4)
    _, acts = net.forward_with_activations(obs)
    ln = net.norms[0]
    expected = torch.relu(torch.nn.functional.layer_norm(net.hidden[0](obs), (8,), ln.weight, ln.bias))
    torch.testing.assert_close(acts[0], expected)


def test_a_replicas_initial_weights_are_drawn_in_the_order_the_mlp_always_drew_them():
    # hidden linears in order, then the head (LayerNorm draws nothing): the same weights for a seed as
    # before the layers were one spec, so runs reproduce across the change
    torch.manual_seed(3)
    net = QNetwork(mlp_spec(4, 2, (8, 8), True))
    torch.manual_seed(3)
    linears = [torch.nn.Linear(4, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)]
    for mine, want in zip([net.hidden[0], net.hidden[1], net.head], linears):
        torch.testing.assert_close(mine.weight, want.weight)


def test_named_parameters_are_views_of_the_one_matrix_actors_read():
    nets = _nets(SPECS["mlp+layernorm"], 2)
    stacked = StackedQ.stack(nets)
    with torch.no_grad():
        stacked.flat.add_(1.0)  # one in-place change of the matrix ...
    for k, net in enumerate(nets):  # ... is a change of every named view
        for name, p in net.named_parameters():
            torch.testing.assert_close(stacked.named()[name][k], p.detach() + 1.0)
    out = np.empty(stacked.flat.numel(), np.float32)
    flatten_into(stacked, out)
    np.testing.assert_array_equal(out, stacked.flat.reshape(-1).numpy())
