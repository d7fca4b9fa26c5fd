"""The learner: the only writer of the Q-network parameters, for the K replicas of a run at once.

DQN update (Huber or MSE loss, Adam, gradient-norm clipping, optional double DQN), bootstrapping cut
on ``terminated`` only; target network by hard copy every ``target_period`` or Polyak ``tau``, and
plasticity resets every ``reset_every``, each counted in gradient updates or in env steps
(:mod:`dqnlab.agent.schedules`). Process-agnostic: :mod:`dqnlab.engine.loop` feeds it batches and
the env steps made.

Replicas (docs/design.md): the K networks are one :class:`~dqnlab.agent.networks.StackedQ` (one ``(K, P)``
parameter matrix), so one update of all K is one batched forward and backward and one
:class:`~dqnlab.agent.adam.StackedAdam` step (Adam is elementwise: one Adam over the stacked matrix is
K Adams). Per replica: its own loss (the total is the sum of per-replica means, so no gradient is
scaled by K), its own gradient-norm clip, target, resets (fresh weights from its own generator) and
Adam state. A replica whose parameters hard-diverge is frozen (:meth:`Learner.freeze`): its gradients
and Adam moments are zero from then on, so it never moves again, and nothing of it reaches another
replica (every operation is per replica row). K = 1 runs the same code.

The gradient is written out by hand (:meth:`StackedQ.backward`, tested against autograd) and the
gradient step (:meth:`Learner.gradient_step`) is only tensor ops with no host sync, so a CUDA graph
can capture it (:mod:`dqnlab.bench.device`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from dqnlab.agent.adam import StackedAdam
from dqnlab.agent.batch import Batch
from dqnlab.agent.diagnostics import q_statistics
from dqnlab.agent.layers import network_spec
from dqnlab.agent.networks import QNetwork, StackedQ
from dqnlab.agent.reference import td_target
from dqnlab.agent.schedules import Periodic, PolyakClock
from dqnlab.config import Config
from dqnlab.metrics import GRAD_NORM, TD_LOSS_LAST


def clip_per_replica_(grads: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale each row of ``grads`` ``(K, P)`` (one replica's whole gradient) by
    ``min(1, max_norm / (norm + 1e-6))``, as ``clip_grad_norm_`` does for one network. Returns the
    per-replica norms before clipping, shape ``(K,)``."""
    norms = torch.linalg.vector_norm(grads, dim=1)
    grads.mul_(torch.clamp(max_norm / (norms + 1e-6), max=1.0).unsqueeze(1))
    return norms


class StepOutputs(NamedTuple):
    """What one gradient step computed, per replica (tensors on the learner's device)."""

    loss: torch.Tensor
    """``(K,)`` mean TD loss (Huber or MSE) of the batch."""
    q_sa: torch.Tensor
    """``(K, B)`` Q of the taken actions."""
    q_all: torch.Tensor
    """``(K, B, A)`` Q of every action."""
    target: torch.Tensor
    """``(K, B)`` TD targets."""
    grad_norm: torch.Tensor
    """``(K,)`` gradient norms before clipping."""


class Learner:
    """Owns the online and target networks of every replica and their optimizer; counts updates."""

    def __init__(self, config: Config, obs_shape: int | tuple[int, ...], num_actions: int, device: str = "cpu"):
        """``obs_shape``: an observation's size (vectors) or shape (images, ``(C, H, W)``)."""
        self.config = config
        self.device = torch.device(device)
        self.spec = network_spec(config.network, obs_shape, num_actions)
        self.replicas = config.run.replicas
        self.seeds = [config.run.seed + k for k in range(self.replicas)]
        self._gens = [torch.Generator().manual_seed(s) for s in self.seeds]
        self.net = StackedQ.stack([self._fresh_net(k) for k in range(self.replicas)]).to(self.device)
        self.target = self.net.copy()
        self.optimizer = StackedAdam(self.net.flat, config.agent.lr)
        self.active = torch.ones(self.replicas, dtype=torch.bool, device=self.device)
        self._all_active = True
        self.updates = 0
        self.target_updates = 0
        self.resets = 0
        a, starts = config.agent, config.run.learning_starts
        self._target_copies = Periodic(a.target_period, a.target_unit, starts)
        self._polyak = PolyakClock(a.tau, a.target_unit, starts)
        self._resets = Periodic(a.reset_every, a.reset_unit, starts, a.no_resets_after_steps)
        self._loss_sum = torch.zeros(self.replicas, device=self.device)
        self._loss_count = 0
        self.last_grad_norm = torch.zeros(self.replicas, device=self.device)
        self.last_grads = torch.zeros_like(self.net.flat)
        """The clipped gradient ``(K, P)`` of the latest update (``net.views`` names its parts)."""

    def _fresh_net(self, replica: int) -> QNetwork:
        """A newly initialised network of ``replica``, drawn from that replica's own seeded generator
        (for replica k of a run with seed s, exactly what a one-replica run with seed s + k draws)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self._gens[replica])))
            return QNetwork(self.spec)

    def batch_tensors(self, batch: Batch) -> list[torch.Tensor]:
        """The arrays :meth:`gradient_step` reads (obs, actions, rewards, next_obs, terminated, and the
        importance-sampling weights of a prioritized batch) as tensors on the learner's device."""
        arrays = batch.learner_arrays() + ((batch.weights,) if batch.weights is not None else ())
        return [torch.from_numpy(x).to(self.device, non_blocking=True) for x in arrays]

    def gradient_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
                      terminated: torch.Tensor, weights: torch.Tensor | None = None) -> StepOutputs:  # fmt: skip
        """One gradient step of every active replica on its own batch (``(K, B, ...)`` tensors): TD
        target, per-replica loss (Huber or MSE, the mean over the batch) and its gradient, per-replica
        clipping, Adam. Tensor ops only: no host sync and no branch on the data (what a CUDA graph
        captures)."""
        a = self.config.agent
        next_q_online = self.net(next_obs) if a.double_dqn else None
        target = td_target(rewards, terminated, self.target(next_obs), a.gamma, next_q_online)
        q_all, tape = self.net.forward_for_backward(obs)
        picked = actions.unsqueeze(-1)
        q_sa = q_all.gather(-1, picked).squeeze(-1)
        diff = q_sa - target
        if a.loss == "mse":  # mean (q - y)^2; d/dq_sa = 2 (q_sa - y) / B
            per_element = diff.square()
            dq_sa = diff.mul(2.0 / q_sa.shape[1])
        else:  # mean Huber (beta 1); d/dq_sa = clamp(q_sa - y, -1, 1) / B
            per_element = F.smooth_l1_loss(q_sa, target, reduction="none")
            dq_sa = diff.clamp(-1.0, 1.0).div_(q_sa.shape[1])
        if weights is not None:  # prioritized replay: each element's loss weighted by its IS weight
            per_element = per_element * weights
            dq_sa = dq_sa * weights
        loss = per_element.mean(dim=1)
        # only the taken action's Q moves
        grads = self.net.backward(tape, torch.zeros_like(q_all).scatter_(-1, picked, dq_sa.unsqueeze(-1)))
        if not self._all_active:
            grads.masked_fill_(~self.active.unsqueeze(1), 0.0)
        grad_norm = clip_per_replica_(grads, a.max_grad_norm)
        self.optimizer.step(grads)
        self.last_grads = grads
        return StepOutputs(loss, q_sa, q_all, target, grad_norm)

    def finish_update(self, out: StepOutputs, env_steps: int | None = None) -> None:
        """After a gradient step: count it, accumulate its loss, then the target update and the reset
        on their schedules; ``env_steps`` (made so far, over all actors) is needed by a schedule in env
        steps."""
        a = self.config.agent
        self.updates += 1
        self._loss_sum += out.loss
        self._loss_count += 1
        self.last_grad_norm = out.grad_norm
        if env_steps is None:
            if "env_steps" in (a.target_unit, a.reset_unit) or a.no_resets_after_steps:
                raise ValueError("finish_update: env_steps is needed by a schedule counted in env steps")
            env_steps = 0
        if a.target_update == "polyak":
            weight = self._polyak.weight(env_steps)
            if weight > 0.0:
                self.target.flat.lerp_(self.net.flat, weight)
                self.target_updates += 1
        elif self._target_copies.due(self.updates, env_steps):
            self.target.flat.copy_(self.net.flat)
            self.target_updates += 1
        if a.reset != "none" and self._resets.due(self.updates, env_steps):
            self.reset(a.reset)

    def update(self, batch: Batch, want_stats: bool = False, env_steps: int | None = None) -> list[dict[str, float]] | None:
        """One update of every active replica on its own batch (arrays ``(K, B, ...)``): the gradient
        step, then target update and reset on their schedules (``env_steps``: made so far). Returns each
        replica's Q statistics of this batch when ``want_stats`` (cheap otherwise: no host sync)."""
        out = self.gradient_step(*self.batch_tensors(batch))
        self.finish_update(out, env_steps)
        self._last_out = out  # kept, not computed on: uniform replay never reads the TD errors
        if not want_stats:
            return None
        losses = out.loss.cpu().tolist()
        norms = out.grad_norm.cpu().tolist()
        stats_out = []
        for k in range(self.replicas):
            stats = q_statistics(out.q_sa[k], out.q_all[k], out.target[k])
            stats[GRAD_NORM] = norms[k]
            stats[TD_LOSS_LAST] = losses[k]
            stats_out.append(stats)
        return stats_out

    @property
    def last_td_errors(self) -> torch.Tensor:
        """``(K, B)`` TD errors ``Q(s, a) - y`` of the latest update (prioritized replay's new priorities),
        computed on demand."""
        return self._last_out.q_sa - self._last_out.target

    def freeze(self, replica: int) -> None:
        """Stop updating ``replica`` for good (its parameters hard-diverged): from now on its gradients
        are zeroed before the step and its Adam moments are zero, so Adam moves it by exactly 0."""
        self.active[replica] = False
        self._all_active = bool(self.active.all())
        self.optimizer.zero_row(replica)

    def pop_mean_loss(self) -> list[float] | None:
        """Per replica, the mean TD (Huber) loss over the updates since the previous call; None if
        there were none."""
        if self._loss_count == 0:
            return None
        mean = (self._loss_sum / self._loss_count).cpu().tolist()
        self._loss_sum.zero_()
        self._loss_count = 0
        return mean

    def param_norm(self) -> list[float]:
        """Per replica, the L2 norm of its online parameters."""
        return torch.linalg.vector_norm(self.net.flat.double(), dim=1).cpu().tolist()

    def reset_names(self, mode: str) -> list[str]:
        """Names of the parameters a reset ``mode`` touches (head = the last linear layer)."""
        if mode == "head":
            return list(self.spec.head)
        if mode in ("full", "shrink_perturb"):
            return list(self.net.names)
        raise ValueError(f"reset: got {mode!r}; allowed: 'head', 'full', 'shrink_perturb'")

    def reset(self, mode: str) -> None:
        """Re-initialise (``head``/``full``) or shrink-and-perturb the online parameters of every active
        replica, each from its own generator; give the target the same values for those parameters
        (Nikishin et al. reset both); clear their Adam state (every replica resets at the same update,
        so clearing the stacked columns' state is each replica clearing its own). The replay is kept."""
        columns = [self.net.columns(name) for name in self.reset_names(mode)]
        alpha = self.config.agent.shrink_alpha
        online, target = self.net.flat, self.target.flat
        for k in range(self.replicas):
            if not self.active[k]:
                continue
            fresh = StackedQ.stack([self._fresh_net(k)]).flat[0].to(self.device)
            for cols in columns:
                if mode == "shrink_perturb":
                    online[k, cols].mul_(alpha).add_(fresh[cols], alpha=1.0 - alpha)
                else:
                    online[k, cols] = fresh[cols]
                target[k, cols] = online[k, cols]
        for cols in columns:
            self.optimizer.clear(cols)
        self.resets += 1

    def probe(self, obs: torch.Tensor):
        """Q-values ``(K, P, A)`` and hidden activations (each ``(K, P, H)``) of the online networks on
        the fixed probe batches ``(K, P, obs_dim)``."""
        return self.net.forward_with_activations(obs.to(self.device))
