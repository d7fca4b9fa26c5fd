import numpy as np
import pytest
import torch

from dqnlab.agent.networks import QNetwork, flatten_into
from dqnlab.agent.policy import NumpyQ, ParamLayout


@pytest.mark.parametrize("layer_norm", [False, True])
def test_numpy_twin_computes_the_same_q_values_as_torch(layer_norm):
    torch.manual_seed(0)
    net = QNetwork(4, 3, (32, 16), layer_norm)
    layout = ParamLayout.of(net)
    twin = NumpyQ(layout, 2, layer_norm)
    flatten_into(net, twin.params)
    obs = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    expected = net(torch.from_numpy(obs)).detach().numpy()
    np.testing.assert_allclose(twin.q_values(obs), expected, rtol=1e-5, atol=1e-5)
    for row in range(3):  # the batch-1 fast path agrees too
        np.testing.assert_allclose(twin.q_values(obs[row : row + 1]), expected[row : row + 1], rtol=1e-5, atol=1e-5)


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
