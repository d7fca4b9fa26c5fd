"""The learner: the only writer of the Q-network parameters, for the K replicas of a run at once.

DQN update (Huber loss, Adam, gradient-norm clipping, optional double DQN), bootstrapping cut on
``terminated`` only; target network by hard copy every ``target_period`` updates or Polyak ``tau``
after every update; plasticity resets every ``reset_every`` updates. All periods are counted in
gradient updates. Process-agnostic: :mod:`dqnlab.engine.loop` feeds it batches.

Replicas (DESIGN.md): the K networks are one :class:`~dqnlab.agent.networks.StackedQ` (every
parameter has a leading replica axis), so one update of all K is one batched forward/backward and
one fused Adam step (Adam is elementwise: one Adam over stacked tensors is K Adams). Per replica:
its own loss (the total is the sum of per-replica means, so no gradient is scaled by K), its own
gradient-norm clip, target, resets (fresh weights from its own generator) and Adam state. A replica
whose parameters hard-diverge is frozen (:meth:`Learner.freeze`): its gradients and Adam moments are
zero from then on, so it never moves again, and nothing of it reaches another replica (every
operation is per replica slice). K = 1 runs the same code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dqnlab.agent.batch import Batch
from dqnlab.agent.diagnostics import q_statistics
from dqnlab.agent.networks import QNetwork, StackedQ
from dqnlab.config import Config
from dqnlab.metrics import GRAD_NORM, TD_LOSS_LAST


def td_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_q_target: torch.Tensor,
    gamma: float,
    next_q_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """``r + gamma * (1 - terminated) * V(s')`` over the last axis of the Q-values; ``V`` from the
    target net, with the greedy action of the online net when ``next_q_online`` is given (double
    DQN). Truncation does not stop it. Any leading shape: ``(B, A)`` or ``(K, B, A)``."""
    if next_q_online is None:
        next_v = next_q_target.max(dim=-1).values
    else:
        next_v = next_q_target.gather(-1, next_q_online.argmax(dim=-1, keepdim=True)).squeeze(-1)
    return rewards + gamma * (~terminated).to(next_v.dtype) * next_v


def clip_per_replica_(grads: list[torch.Tensor], max_norm: float, active: torch.Tensor | None = None) -> torch.Tensor:
    """Per replica (leading axis): zero the gradients of inactive replicas, then scale each replica's
    gradients by ``min(1, max_norm / (norm + 1e-6))`` as ``clip_grad_norm_`` does for one network.
    Returns the per-replica norms before clipping, shape ``(K,)``."""
    if active is not None:
        for g in grads:
            g.masked_fill_(~active.view(-1, *([1] * (g.dim() - 1))), 0.0)
    norms = torch.sqrt(sum(g.pow(2).flatten(1).sum(1) for g in grads))
    coef = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))
    return norms


def _make_adam(params, lr: float) -> torch.optim.Adam:
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):  # fused kernels missing for this device/dtype
        return torch.optim.Adam(params, lr=lr)


class Learner:
    """Owns the online and target networks of every replica and their optimizer; counts updates."""

    def __init__(self, config: Config, obs_dim: int, num_actions: int, device: str = "cpu"):
        self.config = config
        self.device = torch.device(device)
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self.replicas = config.run.replicas
        self.seeds = [config.run.seed + k for k in range(self.replicas)]
        self._gens = [torch.Generator().manual_seed(s) for s in self.seeds]
        self.net = StackedQ.stack([self._fresh_net(k) for k in range(self.replicas)]).to(self.device)
        self.target = self.net.detached_copy()
        self.optimizer = _make_adam(self.net.parameters(), config.agent.lr)
        self.active = torch.ones(self.replicas, dtype=torch.bool, device=self.device)
        self._all_active = True
        self.updates = 0
        self.target_updates = 0
        self.resets = 0
        self._loss_sum = torch.zeros(self.replicas, device=self.device)
        self._loss_count = 0
        self.last_grad_norm = torch.zeros(self.replicas, device=self.device)

    def _fresh_net(self, replica: int) -> QNetwork:
        """A newly initialised network of ``replica``, drawn from that replica's own seeded generator
        (for replica k of a run with seed s, exactly what a one-replica run with seed s + k draws)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self._gens[replica])))
            n = self.config.network
            return QNetwork(self.obs_dim, self.num_actions, n.hidden_sizes, n.layer_norm)

    def _to_tensors(self, batch: Batch):
        dev = self.device
        return [torch.from_numpy(x).to(dev, non_blocking=True)
                for x in (batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.terminated)]  # fmt: skip

    def update(self, batch: Batch, want_stats: bool = False) -> list[dict[str, float]] | None:
        """One gradient step of every active replica on its own batch (arrays ``(K, B, ...)``); then
        target update and reset on their schedules. Returns each replica's Q statistics of this batch
        when ``want_stats`` (cheap otherwise: no host sync)."""
        a = self.config.agent
        obs, actions, rewards, next_obs, terminated = self._to_tensors(batch)
        with torch.no_grad():
            next_q_target = self.target(next_obs)
            next_q_online = self.net(next_obs) if a.double_dqn else None
            target = td_target(rewards, terminated, next_q_target, a.gamma, next_q_online)
        q_all = self.net(obs)
        q_sa = q_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        per_replica = F.smooth_l1_loss(q_sa, target, reduction="none").mean(dim=1)
        loss = per_replica.sum() if self._all_active else torch.where(self.active, per_replica, 0.0).sum()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad for p in self.net.parameters()]
        self.last_grad_norm = clip_per_replica_(grads, a.max_grad_norm, None if self._all_active else self.active)
        self.optimizer.step()
        self.updates += 1
        self._loss_sum += per_replica.detach()
        self._loss_count += 1

        if a.target_update == "polyak":
            torch._foreach_lerp_(self.target.parameters(), self.net.parameters(), a.tau)
            self.target_updates += 1
        elif self.updates % a.target_period == 0:
            torch._foreach_copy_(self.target.parameters(), self.net.parameters())
            self.target_updates += 1
        if a.reset != "none" and self.updates % a.reset_every == 0:
            self.reset(a.reset)

        if not want_stats:
            return None
        losses = per_replica.detach().cpu().tolist()
        norms = self.last_grad_norm.cpu().tolist()
        out = []
        for k in range(self.replicas):
            stats = q_statistics(q_sa[k], q_all[k], target[k])
            stats[GRAD_NORM] = norms[k]
            stats[TD_LOSS_LAST] = losses[k]
            out.append(stats)
        return out

    def freeze(self, replica: int) -> None:
        """Stop updating ``replica`` for good (its parameters hard-diverged): from now on its gradients
        are zeroed before the step and its Adam moments are zero, so Adam moves it by exactly 0."""
        self.active[replica] = False
        self._all_active = bool(self.active.all())
        for p in self.net.parameters():
            for key in ("exp_avg", "exp_avg_sq"):
                state = self.optimizer.state.get(p, {})
                if key in state:
                    state[key][replica].zero_()

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
        with torch.no_grad():
            sq = sum(p.double().pow(2).flatten(1).sum(1) for p in self.net.parameters())
            return torch.sqrt(sq).cpu().tolist()

    def reset_names(self, mode: str) -> list[str]:
        """Names of the parameters a reset ``mode`` touches (head = the last linear layer)."""
        if mode == "head":
            return ["head.weight", "head.bias"]
        if mode in ("full", "shrink_perturb"):
            return list(self.net.names)
        raise ValueError(f"reset: got {mode!r}; allowed: 'head', 'full', 'shrink_perturb'")

    def reset(self, mode: str) -> None:
        """Re-initialise (``head``/``full``) or shrink-and-perturb the online parameters of every active
        replica, each from its own generator; give the target the same values for those parameters
        (Nikishin et al. reset both); clear their Adam state (every replica resets at the same update,
        so clearing the stacked tensors' state is each replica clearing its own). The replay is kept."""
        names = self.reset_names(mode)
        alpha = self.config.agent.shrink_alpha
        online, target = self.net.named(), self.target.named()
        with torch.no_grad():
            for k in range(self.replicas):
                if not self.active[k]:
                    continue
                fresh = dict(self._fresh_net(k).named_parameters())
                for name in names:
                    p, f = online[name][k], fresh[name].to(self.device)
                    if mode == "shrink_perturb":
                        p.mul_(alpha).add_(f, alpha=1.0 - alpha)
                    else:
                        p.copy_(f)
                    target[name][k].copy_(p)
            for name in names:
                self.optimizer.state.pop(online[name], None)
        self.resets += 1

    @torch.no_grad()
    def probe(self, obs: torch.Tensor):
        """Q-values ``(K, P, A)`` and hidden activations (each ``(K, P, H)``) of the online networks on
        the fixed probe batches ``(K, P, obs_dim)``."""
        return self.net.forward_with_activations(obs.to(self.device))
