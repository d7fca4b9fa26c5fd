"""The Q-networks on the learner's side (torch) and the flat parameter vector they publish.

:class:`QNetwork` is one MLP (``nn.Module``): it draws a replica's initial weights and is the
reference the stacked maths is tested against. :class:`StackedQ` holds the K replicas of a run as
stacked parameters (a leading replica axis) and computes all of them with batched matrix products.
Actors evaluate the same maths in numpy (:mod:`dqnlab.agent.policy`); :func:`flatten_into` writes the
parameters in the one order both sides use (:class:`~dqnlab.agent.policy.ParamLayout`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dqnlab.agent.policy import LN_EPS, ParamLayout


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


class StackedQ:
    """K Q-networks of one architecture as stacked tensors: each parameter of :class:`QNetwork` with
    a leading replica axis, in ``QNetwork.named_parameters`` order. ``forward(obs (K, B, obs_dim))``
    computes replica k's network on ``obs[k]`` (one ``baddbmm`` per layer for all K)."""

    def __init__(self, names: list[str], tensors: list[torch.Tensor], num_hidden: int, layer_norm: bool):
        self.names = tuple(names)
        self.tensors = tensors
        self.num_hidden, self.layer_norm = num_hidden, layer_norm
        p = dict(zip(names, tensors))
        self._hidden = [(p[f"hidden.{i}.weight"], p[f"hidden.{i}.bias"],
                         (p[f"norms.{i}.weight"], p[f"norms.{i}.bias"]) if layer_norm else None)
                        for i in range(num_hidden)]  # fmt: skip
        self._head = (p["head.weight"], p["head.bias"])

    @classmethod
    def stack(cls, nets: list[QNetwork]) -> StackedQ:
        named = [dict(n.named_parameters()) for n in nets]
        names = list(named[0])
        tensors = [torch.stack([d[name].detach() for d in named]).requires_grad_() for name in names]
        return cls(names, tensors, len(nets[0].hidden), nets[0].layer_norm)

    def to(self, device: torch.device | str) -> StackedQ:
        tensors = [t.detach().to(device).requires_grad_(t.requires_grad) for t in self.tensors]
        return StackedQ(list(self.names), tensors, self.num_hidden, self.layer_norm)

    def detached_copy(self) -> StackedQ:
        """A copy that takes no gradients (the target network)."""
        return StackedQ(list(self.names), [t.detach().clone() for t in self.tensors], self.num_hidden, self.layer_norm)

    @property
    def replicas(self) -> int:
        return self.tensors[0].shape[0]

    def parameters(self) -> list[torch.Tensor]:
        return self.tensors

    def named(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.tensors))

    def layout(self) -> ParamLayout:
        """One replica's parameter layout (the shapes without the replica axis)."""
        return ParamLayout.from_shapes([(n, tuple(t.shape[1:])) for n, t in zip(self.names, self.tensors)])

    def _layer(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor, ln) -> torch.Tensor:
        h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
        if ln is not None:
            h = F.layer_norm(h, h.shape[-1:], eps=LN_EPS) * ln[0].unsqueeze(1) + ln[1].unsqueeze(1)
        return torch.relu(h)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        h = obs
        for w, b, ln in self._hidden:
            h = self._layer(h, w, b, ln)
        w, b = self._head
        return torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))

    def forward_with_activations(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Q-values ``(K, B, A)`` and the post-ReLU activation ``(K, B, H)`` of every hidden layer."""
        acts = []
        h = obs
        for w, b, ln in self._hidden:
            h = self._layer(h, w, b, ln)
            acts.append(h)
        w, b = self._head
        return torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2)), acts


def load_flat_(net: StackedQ, flat: np.ndarray) -> None:
    """Set the stacked parameters from ``flat`` (K vectors back to back, ``ParamLayout`` order)."""
    rows = torch.from_numpy(np.asarray(flat, dtype=np.float32)).reshape(net.replicas, -1)
    pos = 0
    with torch.no_grad():
        for t in net.tensors:
            n = t[0].numel()
            t.copy_(rows[:, pos : pos + n].reshape(t.shape).to(t.device))
            pos += n


def flatten_into(net: QNetwork | StackedQ, out: np.ndarray) -> None:
    """Copy the parameters of ``net`` into the float32 vector ``out``: for a :class:`StackedQ` the K
    replicas' vectors back to back, each in ``ParamLayout`` order."""
    with torch.no_grad():
        if isinstance(net, StackedQ):
            k = net.replicas
            flat = torch.cat([t.detach().reshape(k, -1) for t in net.tensors], dim=1).reshape(-1)
        else:
            flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    out[:] = flat.to("cpu", torch.float32).numpy()
