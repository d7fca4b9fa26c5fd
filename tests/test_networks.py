import numpy as np
import pytest
import torch

from dqnlab.agent.networks import QNetwork, StackedQ, flatten_into
from dqnlab.agent.policy import NumpyQ, ParamLayout


def _nets(k: int, layer_norm: bool) -> list[QNetwork]:
    torch.manual_seed(0)
    nets = [QNetwork(4, 3, (32, 16), layer_norm) for _ in range(k)]
    for net in nets:  # non-trivial LayerNorm affine parameters
        for norm in net.norms if layer_norm else []:
            torch.nn.init.normal_(norm.weight)
            torch.nn.init.normal_(norm.bias)
    return nets


@pytest.mark.parametrize("layer_norm", [False, True])
def test_numpy_twin_computes_the_same_q_values_as_torch(layer_norm):
    (net,) = _nets(1, layer_norm)
    layout = ParamLayout.of(net)
    twin = NumpyQ(layout, 2, layer_norm)
    flatten_into(StackedQ.stack([net]), twin.params)
    obs = np.random.default_rng(0).standard_normal((1, 10, 4)).astype(np.float32)
    expected = net(torch.from_numpy(obs[0])).detach().numpy()
    np.testing.assert_allclose(twin.q_values(obs)[0], expected, rtol=1e-5, atol=1e-5)
    for row in range(3):  # the batch-1 fast path agrees too
        one = twin.q_values(obs[:, row : row + 1])[0]
        np.testing.assert_allclose(one, expected[row : row + 1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_numpy_twin_of_k_replicas_computes_each_replicas_network(layer_norm):
    nets = _nets(4, layer_norm)
    stacked = StackedQ.stack(nets)
    twin = NumpyQ(stacked.layout(), 2, layer_norm, replicas=4)
    flatten_into(stacked, twin.params)
    obs = np.random.default_rng(1).standard_normal((4, 3, 4)).astype(np.float32)
    q = twin.q_values(obs)
    for k, net in enumerate(nets):
        expected = net(torch.from_numpy(obs[k])).detach().numpy()
        np.testing.assert_allclose(q[k], expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(twin.replica(k).q_values(obs[k]), expected, rtol=1e-5, atol=1e-5)


def test_layer_norm_present_iff_on():
    with_ln = QNetwork(4, 2, (64, 64), layer_norm=True)
    without = QNetwork(4, 2, (64, 64), layer_norm=False)
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in with_ln.modules()) == 2
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in without.modules())


def test_layer_norm_sits_after_linear_before_relu():
    net = QNetwork(4, 2, (8,), layer_norm=True)
    obs = torch.randn(5, 4)
    _, acts = net.forward_with_activations(obs)
    ln = net.norms[0]
    expected = torch.relu(torch.nn.functional.layer_norm(net.hidden[0](obs), (8,), ln.weight, ln.bias))
    torch.testing.assert_close(acts[0], expected)


@pytest.mark.parametrize("hidden_sizes", [(8,), (32, 16), (16, 8, 8)])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_the_hand_written_backward_equals_autograd_for_every_replica(hidden_sizes, layer_norm):
    torch.manual_seed(1)
    nets = [QNetwork(4, 3, hidden_sizes, layer_norm) for _ in range(3)]
    for net in nets:  # non-trivial LayerNorm affine parameters
        for norm in net.norms if layer_norm else []:
            torch.nn.init.normal_(norm.weight)
            torch.nn.init.normal_(norm.bias)
    stacked = StackedQ.stack(nets)
    obs, dq = torch.randn(3, 7, 4), torch.randn(3, 7, 3)
    q, tape = stacked.forward_for_backward(obs)
    grads = stacked.views(stacked.backward(tape, dq))
    for k, net in enumerate(nets):
        q_k = net(obs[k])
        torch.testing.assert_close(q[k], q_k.detach(), rtol=1e-5, atol=1e-6)
        (q_k * dq[k]).sum().backward()  # d/dtheta of <Q, dq> is the backward of dq
        for name, p in net.named_parameters():
            torch.testing.assert_close(grads[name][k], p.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert {n for n, _ in nets[0].named_parameters()} == set(grads)  # every parameter has its gradient


def test_named_parameters_are_views_of_the_one_matrix_actors_read():
    nets = _nets(2, True)
    stacked = StackedQ.stack(nets)
    with torch.no_grad():
        stacked.flat.add_(1.0)  # one in-place change of the matrix ...
    for k, net in enumerate(nets):  # ... is a change of every named view
        for name, p in net.named_parameters():
            torch.testing.assert_close(stacked.named()[name][k], p.detach() + 1.0)
    out = np.empty(stacked.flat.numel(), np.float32)
    flatten_into(stacked, out)
    np.testing.assert_array_equal(out, stacked.flat.reshape(-1).numpy())
