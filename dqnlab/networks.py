"""The Q-network (torch, learner side) and its numpy twin (actor side).

The learner owns a :class:`QNetwork`. Actors never import it for inference: they evaluate the same
maths in numpy on views of a flat float32 parameter vector (:class:`NumpyQ`), which is ~6x faster
than torch at batch 1 and keeps torch's thread pools out of the actor processes. ``flatten`` /
``ParamLayout`` define the one parameter order both sides use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

LN_EPS = 1e-5


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


@dataclass(frozen=True)
class ParamLayout:
    """Names, shapes and offsets of the parameters in the flat vector, in ``named_parameters`` order."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    size: int

    @classmethod
    def of(cls, net: nn.Module) -> ParamLayout:
        names, shapes, offsets, pos = [], [], [], 0
        for name, p in net.named_parameters():
            names.append(name)
            shapes.append(tuple(p.shape))
            offsets.append(pos)
            pos += p.numel()
        return cls(tuple(names), tuple(shapes), tuple(offsets), pos)

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        return {n: flat[o : o + int(np.prod(s))].reshape(s) for n, s, o in zip(self.names, self.shapes, self.offsets)}


def flatten_into(net: nn.Module, out: np.ndarray) -> None:
    """Copy the parameters of ``net`` into the float32 vector ``out`` (layout of ``ParamLayout.of``)."""
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    out[:] = flat.to("cpu", torch.float32).numpy()


class NumpyQ:
    """Greedy Q-evaluation in numpy on a private float32 parameter vector (the actor's local copy)."""

    def __init__(self, layout: ParamLayout, num_hidden: int, layer_norm: bool):
        self.layout = layout
        self.params = np.zeros(layout.size, dtype=np.float32)
        v = layout.views(self.params)
        self._layers = []
        for i in range(num_hidden):
            ln = (v[f"norms.{i}.weight"], v[f"norms.{i}.bias"]) if layer_norm else None
            self._layers.append((v[f"hidden.{i}.weight"], v[f"hidden.{i}.bias"], ln))
        self._head = (v["head.weight"], v["head.bias"])

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` (B, obs_dim) float32 -> Q (B, num_actions) float32."""
        if obs.shape[0] == 1:  # the actor's common case: matrix-vector products are ~2x faster
            return self._q_single(obs[0])[None, :]
        h = obs
        for w, b, ln in self._layers:
            h = h @ w.T + b
            if ln is not None:
                mu = h.mean(axis=-1, keepdims=True)
                var = h.var(axis=-1, keepdims=True)
                h = (h - mu) / np.sqrt(var + LN_EPS) * ln[0] + ln[1]
            np.maximum(h, 0.0, out=h)
        w, b = self._head
        return h @ w.T + b

    def _q_single(self, x: np.ndarray) -> np.ndarray:
        h = x
        for w, b, ln in self._layers:
            h = w.dot(h)
            h += b
            if ln is not None:
                h = (h - h.mean()) / np.sqrt(h.var() + LN_EPS) * ln[0] + ln[1]
            np.maximum(h, 0.0, out=h)
        w, b = self._head
        return w.dot(h) + b
