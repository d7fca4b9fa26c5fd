"""The Q-network on the learner's side (torch), built from one :class:`~dqnlab.agent.layers.NetworkSpec`.

:class:`QNetwork` is the spec as one ``nn.Module``: it draws a replica's initial weights and is the
reference the stacked maths (and its hand-written backward) is tested against. :class:`StackedQ` holds
the K replicas of a run as one ``(K, P)`` parameter matrix and runs each layer's stacked maths
(:mod:`dqnlab.agent.layers`) on all of them at once. Actors run the same layers in numpy
(:mod:`dqnlab.agent.policy`); :func:`flatten_into` writes the parameters in the one order both sides
use (the spec's :class:`~dqnlab.agent.layers.ParamLayout`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dqnlab.agent.layers import NetworkSpec, ParamLayout


class QNetwork(nn.Module):
    """The layers of ``spec`` in order; parameters named as the spec names them (``hidden.0.weight``,
    ``norms.0.bias``, ``conv.0.weight``, ``head.weight``), registered in one ``ModuleList`` per prefix."""

    def __init__(self, spec: NetworkSpec):
        super().__init__()
        self.spec = spec
        run = []
        for layer in spec.layers:
            module = layer.module()
            if layer.name:
                group, _, index = layer.name.partition(".")
                if not index:
                    self.add_module(group, module)
                else:
                    if not hasattr(self, group):
                        self.add_module(group, nn.ModuleList())
                    getattr(self, group).append(module)
            run.append(module)
        self._run = tuple(run)  # compute order (a tuple: not registered twice)
        self._features = set(spec.feature_layers())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        h = obs
        for module in self._run:
            h = module(h)
        return h

    def forward_with_activations(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Q-values and the post-ReLU activation of every fully connected hidden layer (last = the
        penultimate features)."""
        acts = []
        h = obs
        for i, module in enumerate(self._run):
            h = module(h)
            if i in self._features:
                acts.append(h)
        return h, acts


class StackedQ:
    """K Q-networks of one spec in one ``(K, P)`` float32 matrix :attr:`flat`: row k is replica k's
    parameters in the spec's layout order, the very vector the actors read. Named parameters are views of
    it (:meth:`named`), so an in-place change of ``flat`` (Adam, a target copy) is a change of every view,
    and publishing is one copy.

    ``net(obs)`` with ``obs (K, B, obs_dim)`` computes replica k's network on ``obs[k]``. The learner
    differentiates by hand: :meth:`forward_for_backward` keeps what :meth:`backward` needs to map
    ``dL/dQ`` to ``dL/dflat``. No tensor here requires grad."""

    def __init__(self, spec: NetworkSpec, flat: torch.Tensor):
        self.spec = spec
        self._layout = spec.layout
        self.flat = flat
        self._host = flat.detach().reshape(-1).numpy() if flat.device.type == "cpu" else None  # flat's own memory
        v = self._layout.views(flat)
        self._named = v
        # each layer with its prepared views (made once; views of ``flat`` see its in-place changes)
        self._layers = [(layer, layer.prepare({p: v[f"{layer.name}.{p}"] for p in layer.shapes()}))
                        for layer in spec.layers]  # fmt: skip
        self._param_names = [tuple(f"{layer.name}.{p}" for p in layer.shapes()) for layer in spec.layers]
        self._first_with_params = min(i for i, names in enumerate(self._param_names) if names)
        self._features = spec.feature_layers()

    @classmethod
    def stack(cls, nets: list[QNetwork]) -> StackedQ:
        rows = [torch.cat([p.detach().reshape(-1) for p in n.parameters()]) for n in nets]
        return cls(nets[0].spec, torch.stack(rows))

    def to(self, device: torch.device | str) -> StackedQ:
        return StackedQ(self.spec, self.flat.to(device))

    def copy(self) -> StackedQ:
        """An independent copy (the target network)."""
        return StackedQ(self.spec, self.flat.clone())

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
        return self._layout.columns(name)

    def layout(self) -> ParamLayout:
        """One replica's parameter layout (the shapes without the replica axis)."""
        return self._layout

    def host_vector(self) -> np.ndarray:
        """The K replicas' vectors back to back as float32 numpy: a view of :attr:`flat` on the CPU
        (valid until its next in-place change), a copy from any other device."""
        if self._host is not None:
            return self._host
        return self.flat.detach().reshape(-1).to("cpu", torch.float32).numpy()

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        h = obs
        for layer, s in self._layers:
            h = layer.forward(s, h)[0]
        return h

    def forward_with_activations(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Q-values ``(K, B, A)`` and the post-ReLU activation ``(K, B, H)`` of every fully connected
        hidden layer."""
        q, tape = self.forward_for_backward(obs)
        return q, [tape[i] for i in self._features]

    def forward_for_backward(self, obs: torch.Tensor) -> tuple[torch.Tensor, list]:
        """Q-values ``(K, B, A)`` and the tape :meth:`backward` reads (what each layer saved)."""
        tape = []
        h = obs
        for layer, s in self._layers:
            h, saved = layer.forward(s, h)
            tape.append(saved)
        return h, tape

    def backward(self, tape: list, dq: torch.Tensor) -> torch.Tensor:
        """``dL/dflat`` ``(K, P)`` given ``dq = dL/dQ`` ``(K, B, A)`` at the forward that made ``tape``: each
        layer's backward in reverse order (:mod:`dqnlab.agent.layers`)."""
        grads: dict[str, torch.Tensor] = {}
        d = dq
        for i in range(len(self._layers) - 1, self._first_with_params - 1, -1):
            layer, s = self._layers[i]
            d, own = layer.backward(s, tape[i], d, i > self._first_with_params)
            grads.update(zip(self._param_names[i], own))
        k = dq.shape[0]
        return torch.cat([grads[name].reshape(k, -1) for name in self._layout.names], dim=1)


def load_flat_(net: StackedQ, flat: np.ndarray) -> None:
    """Set the stacked parameters from ``flat`` (K vectors back to back, in layout order)."""
    rows = torch.from_numpy(np.asarray(flat, dtype=np.float32)).reshape(net.replicas, -1)
    net.flat.copy_(rows.to(net.flat.device))


def flatten_into(net: QNetwork | StackedQ, out: np.ndarray) -> None:
    """Copy the parameters of ``net`` into the float32 vector ``out``: for a :class:`StackedQ` the K
    replicas' vectors back to back, each in layout order."""
    if isinstance(net, StackedQ):
        out[:] = net.host_vector()
        return
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    out[:] = flat.to("cpu", torch.float32).numpy()
