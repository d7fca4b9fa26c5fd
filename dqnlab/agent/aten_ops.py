"""The private ATen kernels the hand-written backward (:mod:`dqnlab.agent.layers`) calls, behind one
function each: the only place this project touches ``torch.ops.aten``, so a torch release that moves
them breaks here, and the backward's test against autograd (``tests/test_networks.py``) says so."""

from __future__ import annotations

import torch


def relu_backward_(grad_out: torch.Tensor, relu_out: torch.Tensor) -> torch.Tensor:
    """``dL/dz`` of ``relu_out = relu(z)`` given ``grad_out = dL/d relu_out``, written into ``grad_out``
    (which must not be needed after): passes where the output is positive."""
    return torch.ops.aten.threshold_backward.grad_input(grad_out, relu_out, 0, grad_input=grad_out)


def layer_norm_input_backward(grad_y: torch.Tensor, z: torch.Tensor, mean: torch.Tensor,
                              rstd: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """``dL/dz`` of the normalisation ``y = (z - mean) * rstd`` over the last axis (no affine part),
    given ``grad_y = dL/dy`` and the ``mean``/``rstd`` its forward saved (aten's own kernel)."""
    return torch.ops.aten.native_layer_norm_backward(grad_y, z, z.shape[-1:], mean, rstd, None, None,
                                                     [True, False, False])[0]  # fmt: skip


def conv2d_backward(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, stride: int, groups: int,
                    need_input: bool) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(dL/dx, dL/dweight, dL/dbias)`` of ``conv2d(x, weight, bias, stride, groups=groups)`` (no padding)
    given ``grad_out``; ``dL/dx`` only when ``need_input`` (aten's own kernel)."""
    return torch.ops.aten.convolution_backward(grad_out, x, weight, [weight.shape[0]], [stride, stride], [0, 0],
                                               [1, 1], False, [0, 0], groups, [need_input, True, True])  # fmt: skip
