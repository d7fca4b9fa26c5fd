"""The Q-networks on the learner's side (torch) and the flat parameter vector they publish.

:class:`QNetwork` is one MLP (``nn.Module``): it draws a replica's initial weights and is the
reference the stacked maths (and its hand-written backward) is tested against. :class:`StackedQ`
holds the K replicas of a run as one ``(K, P)`` parameter matrix and computes all of them with
batched matrix products.
Actors evaluate the same maths in numpy (:mod:`dqnlab.agent.policy`); :func:`flatten_into` writes the
parameters in the one order both sides use (:class:`~dqnlab.agent.policy.ParamLayout`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dqnlab.agent.aten_ops import layer_norm_input_backward, relu_backward
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
    """K Q-networks of one architecture in one ``(K, P)`` float32 matrix :attr:`flat`: row k is replica
    k's parameters in :class:`ParamLayout` order (``QNetwork.named_parameters``, each flattened), the very
    vector the actors read. Named parameters are views of it (:meth:`named`), so an in-place change of
    ``flat`` (Adam, a target copy) is a change of every view, and publishing is one copy.

    ``net(obs)`` with ``obs (K, B, obs_dim)`` computes replica k's network on ``obs[k]`` (one ``baddbmm``
    per layer for all K). The learner differentiates by hand: :meth:`forward_for_backward` keeps what
    :meth:`backward` needs to map ``dL/dQ`` to ``dL/dflat``. A small MLP's update costs its op dispatches,
    not its arithmetic, and the hand-written backward needs about half the ops of autograd's; it is
    tested against autograd. No tensor here requires grad."""

    def __init__(self, layout: ParamLayout, flat: torch.Tensor, num_hidden: int, layer_norm: bool):
        self._layout = layout
        self.flat = flat
        self._host = flat.detach().reshape(-1).numpy() if flat.device.type == "cpu" else None  # flat's own memory
        self.num_hidden, self.layer_norm = num_hidden, layer_norm
        v = layout.views(flat)
        self._named = v
        # the views every forward and backward uses, made once (views of ``flat``: they see its in-place
        # changes): weight, its transpose, bias as (K, 1, out), LayerNorm affine as (K, 1, H) or None
        self._hidden = [(v[f"hidden.{i}.weight"], v[f"hidden.{i}.weight"].transpose(1, 2),
                         v[f"hidden.{i}.bias"].unsqueeze(1),
                         (v[f"norms.{i}.weight"].unsqueeze(1), v[f"norms.{i}.bias"].unsqueeze(1)) if layer_norm else None)
                        for i in range(num_hidden)]  # fmt: skip
        self._head = (v["head.weight"], v["head.weight"].transpose(1, 2), v["head.bias"].unsqueeze(1))

    @classmethod
    def stack(cls, nets: list[QNetwork]) -> StackedQ:
        rows = [torch.cat([p.detach().reshape(-1) for p in n.parameters()]) for n in nets]
        return cls(ParamLayout.of(nets[0]), torch.stack(rows), len(nets[0].hidden), nets[0].layer_norm)

    def to(self, device: torch.device | str) -> StackedQ:
        return StackedQ(self._layout, self.flat.to(device), self.num_hidden, self.layer_norm)

    def copy(self) -> StackedQ:
        """An independent copy (the target network)."""
        return StackedQ(self._layout, self.flat.clone(), self.num_hidden, self.layer_norm)

    @property
    def replicas(self) -> int:
        return self.flat.shape[0]

    @property
    def names(self) -> tuple[str, ...]:
        return self._layout.names

    def parameters(self) -> list[torch.Tensor]:
        """The named parameters' views ``(K, *shape)``, in layout order."""
        return list(self._named.values())

    def named(self) -> dict[str, torch.Tensor]:
        return dict(self._named)

    def views(self, matrix: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named views of any ``(K, P)`` matrix in this layout (gradients, Adam moments)."""
        return self._layout.views(matrix)

    def columns(self, name: str) -> slice:
        """The columns of ``flat`` that hold parameter ``name``."""
        i = self._layout.names.index(name)
        start = self._layout.offsets[i]
        return slice(start, start + int(np.prod(self._layout.shapes[i])))

    def layout(self) -> ParamLayout:
        """One replica's parameter layout (the shapes without the replica axis)."""
        return self._layout

    def host_vector(self) -> np.ndarray:
        """The K replicas' vectors back to back as float32 numpy: a view of :attr:`flat` on the CPU
        (valid until its next in-place change), a copy from any other device."""
        if self._host is not None:
            return self._host
        return self.flat.detach().reshape(-1).to("cpu", torch.float32).numpy()

    def _hidden_layer(self, h: torch.Tensor, layer: tuple, tape: list | None) -> torch.Tensor:
        """``relu(LayerNorm?(h W^T + b))``; appends ``(input, pre-norm, normalised, mean, rstd, output)``
        to ``tape`` when given."""
        _, w_t, b, ln = layer
        z = torch.baddbmm(b, h, w_t)
        if ln is None:
            y = mean = rstd = None
            out = torch.relu(z)
        else:
            y, mean, rstd = torch.native_layer_norm(z, z.shape[-1:], None, None, LN_EPS)
            out = torch.relu(torch.addcmul(ln[1], y, ln[0]))
        if tape is not None:
            tape.append((h, z, y, mean, rstd, out))
        return out

    def _head_layer(self, h: torch.Tensor) -> torch.Tensor:
        _, w_t, b = self._head
        return torch.baddbmm(b, h, w_t)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        h = obs
        for layer in self._hidden:
            h = self._hidden_layer(h, layer, None)
        return self._head_layer(h)

    def forward_with_activations(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Q-values ``(K, B, A)`` and the post-ReLU activation ``(K, B, H)`` of every hidden layer."""
        q, tape = self.forward_for_backward(obs)
        return q, [step[-1] for step in tape]

    def forward_for_backward(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[tuple]]:
        """Q-values ``(K, B, A)`` and the tape :meth:`backward` reads (one entry per hidden layer)."""
        tape: list[tuple] = []
        h = obs
        for layer in self._hidden:
            h = self._hidden_layer(h, layer, tape)
        return self._head_layer(h), tape

    def backward(self, tape: list[tuple], dq: torch.Tensor) -> torch.Tensor:
        """``dL/dflat`` ``(K, P)`` given ``dq = dL/dQ`` ``(K, B, A)`` at the forward that made ``tape``:
        per layer ``dW = dz^T h``, ``db = sum_B dz``, ``dh = dz W``; ReLU passes where its output is
        positive; LayerNorm's affine part by hand, its normalisation by aten's own backward kernel
        (:mod:`dqnlab.agent.aten_ops`)."""
        grads: dict[str, torch.Tensor] = {}
        w = self._head[0]
        grads["head.weight"] = torch.bmm(dq.transpose(1, 2), tape[-1][-1])
        grads["head.bias"] = dq.sum(1)
        dh = torch.bmm(dq, w)
        for i in reversed(range(self.num_hidden)):
            h, z, y, mean, rstd, out = tape[i]
            w, _, _, ln = self._hidden[i]
            dz = relu_backward(dh, out)
            if ln is not None:
                grads[f"norms.{i}.weight"] = (dz * y).sum(1)
                grads[f"norms.{i}.bias"] = dz.sum(1)
                dz = layer_norm_input_backward(dz * ln[0], z, mean, rstd)
            grads[f"hidden.{i}.weight"] = torch.bmm(dz.transpose(1, 2), h)
            grads[f"hidden.{i}.bias"] = dz.sum(1)
            if i > 0:
                dh = torch.bmm(dz, w)
        k = dq.shape[0]
        return torch.cat([grads[name].reshape(k, -1) for name in self._layout.names], dim=1)


def load_flat_(net: StackedQ, flat: np.ndarray) -> None:
    """Set the stacked parameters from ``flat`` (K vectors back to back, ``ParamLayout`` order)."""
    rows = torch.from_numpy(np.asarray(flat, dtype=np.float32)).reshape(net.replicas, -1)
    net.flat.copy_(rows.to(net.flat.device))


def flatten_into(net: QNetwork | StackedQ, out: np.ndarray) -> None:
    """Copy the parameters of ``net`` into the float32 vector ``out``: for a :class:`StackedQ` the K
    replicas' vectors back to back, each in ``ParamLayout`` order."""
    if isinstance(net, StackedQ):
        out[:] = net.host_vector()
        return
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    out[:] = flat.to("cpu", torch.float32).numpy()
