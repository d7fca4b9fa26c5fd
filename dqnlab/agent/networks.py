"""The Q-network on the learner's side (torch) and the flat parameter vector it publishes.

Actors evaluate the same maths in numpy (:mod:`dqnlab.agent.policy`); :func:`flatten_into` writes the
parameters in the one order both sides use (:class:`~dqnlab.agent.policy.ParamLayout`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dqnlab.agent.policy import LN_EPS


class QNetwork(nn.Module):
    """MLP ``obs -> [Linear -> (LayerNorm) -> ReLU] * H -> Linear -> Q(s, .)``."""

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: tuple[int, ...], layer_norm: bool):
        super().__init__()
        self.layer_norm = layer_norm
        sizes = (obs_dim, *hidden_sizes)
        self.hidden = nn.ModuleList(nn.Linear(i, o) for i, o in zip(sizes[:-1], sizes[1:]))
        self.norms = nn.ModuleList(nn.LayerNorm(o, eps=LN_EPS) if layer_norm else nn.Identity() for o in hidden_sizes)
        self.head = nn.Linear(sizes[-1], num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        h = obs
        for linear, norm in zip(self.hidden, self.norms):
            h = torch.relu(norm(linear(h)))
        return self.head(h)

    def forward_with_activations(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Q-values and the post-ReLU activation of every hidden layer (last = penultimate features)."""
        acts = []
        h = obs
        for linear, norm in zip(self.hidden, self.norms):
            h = torch.relu(norm(linear(h)))
            acts.append(h)
        return self.head(h), acts


def flatten_into(net: nn.Module, out: np.ndarray) -> None:
    """Copy the parameters of ``net`` into the float32 vector ``out`` (layout of ``ParamLayout.of``)."""
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    out[:] = flat.to("cpu", torch.float32).numpy()


