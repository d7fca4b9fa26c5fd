"""Adam for the K replicas of a run at once, over the rows of one ``(K, P)`` parameter matrix.

Adam is elementwise, so K independent Adams are one set of elementwise ops on the stacked matrices
(a handful of kernels, whatever K and the network's depth). The update is ``torch.optim.Adam``'s, step
for step (no weight decay, no amsgrad): ``m <- lerp(m, g, 1 - beta1)``, ``v <- beta2 v + (1 - beta2) g^2``,
``theta <- theta - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)``. The step count ``t``
is per column, because a reset clears some parameters' state (their Adam restarts from t = 0, as
``torch.optim.Adam`` does for a parameter whose state was dropped) while the others go on; it is kept
as the powers ``beta^t`` (float64 running products: two multiplications a step instead of two
``pow`` calls, exact to ~1e-16 t). Only tensor ops, no host sync: a CUDA graph can capture the step.
"""

from __future__ import annotations

import torch


class StackedAdam:
    """Adam over ``params`` ``(K, P)`` (updated in place); ``exp_avg``/``exp_avg_sq`` are its moments,
    ``beta1_power``/``beta2_power`` ``(P,)`` are ``beta^t`` with ``t`` the steps each column has taken
    since its state was last cleared."""

    def __init__(self, params: torch.Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.params = params
        self.lr, self.betas, self.eps = lr, betas, eps
        self.exp_avg = torch.zeros_like(params)
        self.exp_avg_sq = torch.zeros_like(params)
        self.beta1_power = torch.ones(params.shape[1], dtype=torch.float64, device=params.device)
        self.beta2_power = torch.ones_like(self.beta1_power)
        self._denom = torch.empty_like(params)  # the step's two (K, P) temporaries, written in place each step
        self._move = torch.empty_like(params)

    def step(self, grads: torch.Tensor) -> None:
        """One Adam step of every row on ``grads`` ``(K, P)``."""
        beta1, beta2 = self.betas
        step_size = (self.lr / (1.0 - self.beta1_power.mul_(beta1))).to(self.params.dtype)
        bias2_sqrt = (1.0 - self.beta2_power.mul_(beta2)).sqrt_().to(self.params.dtype)
        self.exp_avg.lerp_(grads, 1.0 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grads, grads, value=1.0 - beta2)
        denom = torch.sqrt(self.exp_avg_sq, out=self._denom).div_(bias2_sqrt).add_(self.eps)
        self.params.addcdiv_(torch.mul(self.exp_avg, step_size, out=self._move), denom, value=-1.0)

    def clear(self, columns: slice) -> None:
        """Forget the state of ``columns`` in every row: zero moments, step count 0."""
        self.exp_avg[:, columns] = 0.0
        self.exp_avg_sq[:, columns] = 0.0
        self.beta1_power[columns] = 1.0
        self.beta2_power[columns] = 1.0

    def zero_row(self, row: int) -> None:
        """Zero row ``row``'s moments: with zero gradients from then on, Adam moves it by exactly 0."""
        self.exp_avg[row] = 0.0
        self.exp_avg_sq[row] = 0.0
