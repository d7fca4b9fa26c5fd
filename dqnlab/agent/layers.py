"""The layer kinds a Q-network is built from, each with its three backends side by side:

- ``module()``: the torch ``nn.Module`` (autograd: initial weights, the reference every other backend is
  tested against);
- ``prepare(p)`` / ``forward(s, h)`` / ``backward(s, saved, d_out, need_input)``: the stacked maths of K
  replicas at once on ``(K, B, ...)`` tensors, with the gradient written by hand (no autograd tape: a
  small network's update costs its op dispatches, and the hand-written backward needs about half the
  ops of autograd's);
- ``np_forward(p, h)``: numpy for the actors, on views of their flat parameter vector, for one network
  ``(B, ...)`` (or one observation ``(d,)``, where a layer supports it) or K replicas ``(K, B, ...)``.

``p`` maps a layer's own parameter names (``weight``, ``bias``) to views of the replicas' parameter
matrix; :func:`network_spec` turns a :class:`~dqnlab.config.NetworkConfig` into the layer sequence, and
:mod:`dqnlab.agent.networks` runs it. Adding a layer kind is one class here and a line in
:func:`network_spec`; ``tests/test_networks.py`` checks every kind's three backends agree and its
backward equals autograd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dqnlab.agent.aten_ops import conv2d_backward, layer_norm_input_backward, relu_backward_
from dqnlab.config import ConfigError

LN_EPS = 1e-5
NARROW = 16
"""A product whose result has fewer columns than this is computed transposed: MKL's batched sgemm runs a
``(B, 64) x (64, 2)`` head at ~10% of this core's peak and ``(2, 64) x (64, B)`` ~3x faster; likewise the weight
gradient of a 4-input layer (``docs/performance.md``)."""


@dataclass(frozen=True)
class ParamLayout:
    """Names, shapes and offsets of one network's parameters in the flat vector (the order both the
    learner's matrix rows and the actors' vectors use; K replicas' vectors lie back to back)."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    size: int

    @classmethod
    def from_shapes(cls, named_shapes: list[tuple[str, tuple[int, ...]]]) -> ParamLayout:
        names, shapes, offsets, pos = [], [], [], 0
        for name, shape in named_shapes:
            names.append(name)
            shapes.append(tuple(shape))
            offsets.append(pos)
            pos += int(np.prod(shape))
        return cls(tuple(names), tuple(shapes), tuple(offsets), pos)

    def views(self, flat):
        """Named views of one network's ``flat`` vector, or of ``(K, size)`` rows (leading axis kept);
        numpy arrays or torch tensors."""
        lead = flat.shape[:-1]
        return {n: flat[..., o : o + int(np.prod(s))].reshape(*lead, *s)
                for n, s, o in zip(self.names, self.shapes, self.offsets)}  # fmt: skip

    def columns(self, name: str) -> slice:
        """The columns of the flat vector that hold parameter ``name``."""
        i = self.names.index(name)
        return slice(self.offsets[i], self.offsets[i] + int(np.prod(self.shapes[i])))


@dataclass(frozen=True)
class Linear:
    """``z = h W^T + b``; ``weight (out, in)``, ``bias (out,)``."""

    name: str
    in_features: int
    out_features: int

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {"weight": (self.out_features, self.in_features), "bias": (self.out_features,)}

    def module(self) -> nn.Module:
        return nn.Linear(self.in_features, self.out_features)

    def prepare(self, p: dict[str, torch.Tensor]) -> tuple:
        w = p["weight"]
        return w, w.transpose(1, 2), p["bias"].unsqueeze(1)

    def forward(self, s: tuple, h: torch.Tensor) -> tuple[torch.Tensor, object]:
        if self.out_features < NARROW:  # a head: (W h^T)^T, made contiguous for the argmax and gather after it
            return torch.bmm(s[0], h.transpose(1, 2)).transpose(1, 2).add_(s[2]).contiguous(), h
        return torch.bmm(h, s[1]).add_(s[2]), h  # bmm then add_: no broadcast copy of the bias (baddbmm's)

    def backward(self, s: tuple, h: torch.Tensor, dz: torch.Tensor, need_input: bool) -> tuple:
        dh = torch.bmm(dz, s[0]) if need_input else None
        if self.in_features < NARROW:  # the observation layer: (h^T dz)^T
            return dh, (torch.bmm(h.transpose(1, 2), dz).transpose(1, 2), dz.sum(1))
        return dh, (torch.bmm(dz.transpose(1, 2), h), dz.sum(1))

    @staticmethod
    def np_forward(p: dict[str, np.ndarray], h: np.ndarray, relu: bool = False) -> np.ndarray:
        """``relu``: the next layer's ReLU, applied in place (one call less a layer on the actor's path)."""
        w, b = p["weight"], p["bias"]
        if w.ndim == 3:  # K replicas
            z = np.matmul(h, w.transpose(0, 2, 1))
            z += b[:, None, :]
        elif h.ndim == 1:  # one observation: a matrix-vector product is ~2x faster
            z = w.dot(h)
            z += b
        else:
            z = h @ w.T
            z += b
        return np.maximum(z, 0.0, out=z) if relu else z


@dataclass(frozen=True)
class LayerNorm:
    """Normalise over the features, then ``y * weight + bias`` (``nn.LayerNorm``, eps 1e-5)."""

    name: str
    size: int

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {"weight": (self.size,), "bias": (self.size,)}

    def module(self) -> nn.Module:
        return nn.LayerNorm(self.size, eps=LN_EPS)

    def prepare(self, p: dict[str, torch.Tensor]) -> tuple:
        return p["weight"].unsqueeze(1), p["bias"].unsqueeze(1)

    def forward(self, s: tuple, z: torch.Tensor) -> tuple[torch.Tensor, object]:
        # normalised in place: z is the previous layer's fresh output, which it does not save (layers save
        # inputs); half the time of aten's layer_norm kernel on (K, B, 64) (docs/performance.md)
        z.sub_(z.mean(-1, keepdim=True))
        rstd = torch.linalg.vector_norm(z, dim=-1, keepdim=True).square_().div_(z.shape[-1]).add_(LN_EPS).rsqrt_()
        y = z.mul_(rstd)
        return torch.addcmul(s[1], y, s[0]), (y, rstd)

    def backward(self, s: tuple, saved: tuple, d_out: torch.Tensor, need_input: bool) -> tuple:
        y, rstd = saved
        grads = ((d_out * y).sum(1), d_out.sum(1))
        if not need_input:
            return None, grads
        # aten's kernel on the normalised y (mean 0, rstd 1) gives dL/dz / rstd; d_out is the next layer's
        # fresh gradient (ReLU's backward wrote into it), so it takes dL/dy in place
        dz = layer_norm_input_backward(d_out.mul_(s[0]), y, torch.zeros_like(rstd), torch.ones_like(rstd))
        return dz.mul_(rstd), grads

    @staticmethod
    def np_forward(p: dict[str, np.ndarray], h: np.ndarray, relu: bool = False) -> np.ndarray:
        w, b = p["weight"], p["bias"]
        if w.ndim == 2:  # K replicas: (K, H) affine over (K, B, H)
            w, b = w[:, None, :], b[:, None, :]
        mu = h.mean(axis=-1, keepdims=True)
        var = h.var(axis=-1, keepdims=True)
        z = (h - mu) / np.sqrt(var + LN_EPS) * w + b
        return np.maximum(z, 0.0, out=z) if relu else z


@dataclass(frozen=True)
class ReLU:
    """``max(h, 0)``; no parameters. Its output after a linear layer is a hidden layer's activation (the
    diagnostics' features)."""

    name: str = ""

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {}

    def module(self) -> nn.Module:
        return nn.ReLU()

    def prepare(self, p: dict[str, torch.Tensor]) -> tuple:
        return ()

    def forward(self, s: tuple, z: torch.Tensor) -> tuple[torch.Tensor, object]:
        out = z.relu_()  # in place: z is the previous layer's fresh output, which it does not save (layers save inputs)
        return out, out

    def backward(self, s: tuple, out: torch.Tensor, d_out: torch.Tensor, need_input: bool) -> tuple:
        return relu_backward_(d_out, out), ()  # into the next layer's fresh gradient

    @staticmethod
    def np_forward(p: dict[str, np.ndarray], h: np.ndarray, relu: bool = False) -> np.ndarray:
        return np.maximum(h, 0.0, out=h)  # h is the previous layer's fresh output


@dataclass(frozen=True)
class Conv2d:
    """A 2-D convolution without padding over ``(C, H, W)`` inputs; ``weight (out, in, k, k)``,
    ``bias (out,)``. K replicas are one grouped convolution (``groups=K``)."""

    name: str
    in_channels: int
    out_channels: int
    kernel: int
    stride: int = 1

    def shapes(self) -> dict[str, tuple[int, ...]]:
        c, k = self.out_channels, self.kernel
        return {"weight": (c, self.in_channels, k, k), "bias": (c,)}

    def module(self) -> nn.Module:
        return nn.Conv2d(self.in_channels, self.out_channels, self.kernel, self.stride)

    def out_shape(self, h: int, w: int) -> tuple[int, int, int]:
        return self.out_channels, (h - self.kernel) // self.stride + 1, (w - self.kernel) // self.stride + 1

    def prepare(self, p: dict[str, torch.Tensor]) -> tuple:
        # the views themselves: K rows of the parameter matrix are P apart, so the grouped weight
        # (K * out, in, k, k) is a copy, made at each call (made once, it would miss every later update)
        return p["weight"], p["bias"]

    def _grouped(self, s: tuple) -> tuple[torch.Tensor, torch.Tensor, int]:
        w, b = s
        k = w.shape[0]
        return w.reshape(k * self.out_channels, *w.shape[2:]), b.reshape(-1), k

    def forward(self, s: tuple, h: torch.Tensor) -> tuple[torch.Tensor, object]:
        w, b, k = self._grouped(s)
        batch = h.shape[1]
        x = h.transpose(0, 1).reshape(batch, k * self.in_channels, *h.shape[3:])  # replicas as channel groups
        y = torch.nn.functional.conv2d(x, w, b, self.stride, groups=k)
        return y.reshape(batch, k, self.out_channels, *y.shape[2:]).transpose(0, 1), x

    def backward(self, s: tuple, x: torch.Tensor, d_out: torch.Tensor, need_input: bool) -> tuple:
        w, _, k = self._grouped(s)
        batch = x.shape[0]
        dy = d_out.transpose(0, 1).reshape(batch, k * self.out_channels, *d_out.shape[3:])
        dx, dw, db = conv2d_backward(dy, x, w, self.stride, k, need_input)
        grads = (dw.reshape(k, self.out_channels, *dw.shape[1:]), db.reshape(k, self.out_channels))
        if dx is None:
            return None, grads
        return dx.reshape(batch, k, self.in_channels, *dx.shape[2:]).transpose(0, 1), grads

    def np_forward(self, p: dict[str, np.ndarray], h: np.ndarray, relu: bool = False) -> np.ndarray:
        w, b = p["weight"], p["bias"]
        s, n = self.stride, self.kernel
        windows = np.lib.stride_tricks.sliding_window_view(h, (n, n), axis=(-2, -1))[..., ::s, ::s, :, :]
        if w.ndim == 5:  # K replicas: windows (K, B, C, H', W', n, n), weights (K, out, C, n, n)
            z = np.einsum("kbchwij,kocij->kbohw", windows, w, optimize=True) + b[:, None, :, None, None]
        else:
            z = np.einsum("...chwij,ocij->...ohw", windows, w, optimize=True) + b[:, None, None]
        return np.maximum(z, 0.0, out=z) if relu else z


@dataclass(frozen=True)
class Reshape:
    """The flat feature vector as ``shape`` (an image observation ``(C, H, W)``, stored flat in the
    replay), or the convolutions' ``(C, H, W)`` output as one vector (``shape=(-1,)``). No parameters."""

    shape: tuple[int, ...]
    name: str = ""

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {}

    def module(self) -> nn.Module:
        return nn.Flatten() if self.shape == (-1,) else nn.Unflatten(-1, self.shape)

    def prepare(self, p: dict[str, torch.Tensor]) -> tuple:
        return ()

    def forward(self, s: tuple, h: torch.Tensor) -> tuple[torch.Tensor, object]:
        lead = 2  # (K, B, ...)
        out = h.reshape(*h.shape[:lead], *self.shape) if self.shape != (-1,) else h.reshape(*h.shape[:lead], -1)
        return out, h.shape

    def backward(self, s: tuple, shape: torch.Size, d_out: torch.Tensor, need_input: bool) -> tuple:
        return d_out.reshape(shape) if need_input else None, ()

    def np_forward(self, p: dict[str, np.ndarray], h: np.ndarray, relu: bool = False) -> np.ndarray:
        if self.shape == (-1,):
            return h.reshape(*h.shape[: h.ndim - 3], -1)  # the conv torso's (C, H, W) as one vector
        return h.reshape(*h.shape[:-1], *self.shape)


Layer = Linear | LayerNorm | ReLU | Conv2d | Reshape


@dataclass(frozen=True)
class NetworkSpec:
    """A Q-network as its layer sequence, from a flat observation of ``obs_dim`` floats to ``num_actions``
    Q-values. ``layout`` is its parameters' order in the flat vector the actors read (grouped by the
    parameter name's prefix, ``conv``, ``hidden``, ``norms``, ``head``, each in layer order: the order of
    the torch module's ``named_parameters``)."""

    layers: tuple[Layer, ...]
    obs_dim: int
    num_actions: int

    @property
    def layout(self) -> ParamLayout:
        groups: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
        for layer in self.layers:
            for pname, shape in layer.shapes().items():
                groups.setdefault(layer.name.split(".")[0], []).append((f"{layer.name}.{pname}", shape))
        return ParamLayout.from_shapes([entry for group in groups.values() for entry in group])

    @property
    def head(self) -> tuple[str, ...]:
        """The parameter names of the last layer (the head a reset re-initialises)."""
        last = self.layers[-1]
        return tuple(f"{last.name}.{p}" for p in last.shapes())

    @property
    def one_observation_path(self) -> bool:
        """Whether every layer takes one observation as a vector (the actors' fast path): not through
        convolutions."""
        return not any(isinstance(layer, (Conv2d, Reshape)) for layer in self.layers)

    def update_flops(self, batch: int, double_dqn: bool = True) -> int:
        """Multiply-adds x 2 of one run-update's matrix products on a batch: the forwards of the online
        network on the states, the target on the next states (and the online on them: double DQN), and the
        backward (each layer's weight gradient, and its input gradient but the first's). Elementwise work
        is not counted: the floor a core's matmul peak sets."""
        products = []  # multiply-adds of each parameterised layer's forward, per sample
        for layer in self.layers:
            if isinstance(layer, Linear):
                products.append(layer.in_features * layer.out_features)
            elif isinstance(layer, Conv2d):
                products.append(0)  # not counted (no image env is measured); the MLP part is
        forward = 2 * batch * sum(products)
        backward = 2 * batch * (sum(products) + sum(products[1:]))
        return (3 if double_dqn else 2) * forward + backward

    def feature_layers(self) -> list[int]:
        """The indices of the ReLUs that end a fully connected hidden layer: their outputs are the hidden
        activations the diagnostics read (the last: the penultimate features)."""
        out, seen_linear = [], False
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Linear):
                seen_linear = True
            elif isinstance(layer, ReLU) and seen_linear:
                out.append(i)
        return out


def network_spec(network, obs_shape: tuple[int, ...] | int, num_actions: int) -> NetworkSpec:
    """The layer sequence of a :class:`~dqnlab.config.NetworkConfig`: for an image observation
    ``(C, H, W)`` and ``conv_layers``, the convolutions (each with its ReLU) and a flatten; then per
    hidden width ``Linear -> (LayerNorm) -> ReLU``; then the linear head."""
    shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
    layers: list[Layer] = []
    conv = getattr(network, "conv_layers", ())
    if conv:
        if len(shape) != 3:
            raise ConfigError(f"conv_channels: got {conv!r} for observations of shape {shape}; allowed: image "
                             "observations (C, H, W), or no conv_layers")  # fmt: skip
        layers.append(Reshape(shape))
        c, h, w = shape
        for i, (channels, kernel, stride) in enumerate(conv):
            layer = Conv2d(f"conv.{i}", c, channels, kernel, stride)
            c, h, w = layer.out_shape(h, w)
            if h < 1 or w < 1:
                raise ConfigError(f"conv_kernels: layer {i} {(channels, kernel, stride)} leaves no pixel of the "
                                 f"{shape} observation; allowed: kernels and strides that fit it")  # fmt: skip
            layers += [layer, ReLU()]
        layers.append(Reshape((-1,)))
        width = c * h * w
    else:
        width = math.prod(shape)
    for i, size in enumerate(network.hidden_sizes):
        layers.append(Linear(f"hidden.{i}", width, size))
        if network.layer_norm:
            layers.append(LayerNorm(f"norms.{i}", size))
        layers.append(ReLU())
        width = size
    layers.append(Linear("head", width, num_actions))
    return NetworkSpec(tuple(layers), math.prod(shape), num_actions)


def mlp_spec(obs_dim: int, num_actions: int, hidden_sizes: tuple[int, ...], layer_norm: bool = False) -> NetworkSpec:
    """The MLP ``obs -> [Linear -> (LayerNorm) -> ReLU] * H -> Linear`` (a :func:`network_spec` shorthand)."""
    from dqnlab.config import NetworkConfig

    return network_spec(NetworkConfig(hidden_sizes=tuple(hidden_sizes), layer_norm=layer_norm), obs_dim, num_actions)
