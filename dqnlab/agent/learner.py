"""The learner: the only writer of the Q-network parameters.

DQN update (Huber loss, Adam, global grad-norm clipping, optional double DQN), bootstrapping cut on
``terminated`` only; target network by hard copy every ``target_period`` updates or Polyak ``tau``
after every update; plasticity resets every ``reset_every`` updates. All periods are counted in
gradient updates. Process-agnostic: :mod:`dqnlab.engine.loop` feeds it batches.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from dqnlab.agent.batch import Batch
from dqnlab.agent.diagnostics import q_statistics
from dqnlab.agent.networks import QNetwork
from dqnlab.config import Config


def td_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_q_target: torch.Tensor,
    gamma: float,
    next_q_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """``r + gamma * (1 - terminated) * V(s')``; ``V`` from the target net, with the greedy action of
    the online net when ``next_q_online`` is given (double DQN). Truncation does not stop it."""
    if next_q_online is None:
        next_v = next_q_target.max(dim=1).values
    else:
        next_v = next_q_target.gather(1, next_q_online.argmax(dim=1, keepdim=True)).squeeze(1)
    return rewards + gamma * (~terminated).to(next_v.dtype) * next_v


def polyak_(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """``theta' <- tau * theta + (1 - tau) * theta'``, in place."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)


def hard_copy_(target: torch.nn.Module, online: torch.nn.Module) -> None:
    with torch.no_grad():
        torch._foreach_copy_(list(target.parameters()), list(online.parameters()))


def _make_adam(params, lr: float) -> torch.optim.Adam:
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):  # fused kernels missing for this device/dtype
        return torch.optim.Adam(params, lr=lr)


class Learner:
    """Owns the online and target networks and the optimizer; counts gradient updates."""

    def __init__(self, config: Config, obs_dim: int, num_actions: int, device: str = "cpu"):
        self.config = config
        self.device = torch.device(device)
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self._gen = torch.Generator().manual_seed(config.run.seed)
        self.net = self._fresh_net().to(self.device)
        self.target = copy.deepcopy(self.net)
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.optimizer = _make_adam(self.net.parameters(), config.agent.lr)
        self.updates = 0
        self.target_updates = 0
        self.resets = 0
        self._loss_sum = torch.zeros((), device=self.device)
        self._loss_count = 0
        self.last_grad_norm = torch.zeros((), device=self.device)

    def _fresh_net(self) -> QNetwork:
        """A newly initialised network drawn from the learner's own seeded generator."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self._gen)))
            n = self.config.network
            return QNetwork(self.obs_dim, self.num_actions, n.hidden_sizes, n.layer_norm)

    def _to_tensors(self, batch: Batch):
        dev = self.device
        obs = torch.from_numpy(batch.obs).to(dev, non_blocking=True)
        next_obs = torch.from_numpy(batch.next_obs).to(dev, non_blocking=True)
        actions = torch.from_numpy(batch.actions).to(dev, non_blocking=True)
        rewards = torch.from_numpy(batch.rewards).to(dev, non_blocking=True)
        terminated = torch.from_numpy(batch.terminated).to(dev, non_blocking=True)
        return obs, actions, rewards, next_obs, terminated

    def update(self, batch: Batch, want_stats: bool = False) -> dict[str, float] | None:
        """One gradient step on ``batch``; then target update and reset on their schedules.

        Returns the Q statistics of this batch when ``want_stats`` (cheap otherwise: no host sync)."""
        a = self.config.agent
        obs, actions, rewards, next_obs, terminated = self._to_tensors(batch)
        with torch.no_grad():
            next_q_target = self.target(next_obs)
            next_q_online = self.net(next_obs) if a.double_dqn else None
            target = td_target(rewards, terminated, next_q_target, a.gamma, next_q_online)
        q_all = self.net(obs)
        q_sa = q_all.gather(1, actions.unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q_sa, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.last_grad_norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), a.max_grad_norm, foreach=True)
        self.optimizer.step()
        self.updates += 1
        self._loss_sum += loss.detach()
        self._loss_count += 1

        if a.target_update == "polyak":
            polyak_(self.target, self.net, a.tau)
            self.target_updates += 1
        elif self.updates % a.target_period == 0:
            hard_copy_(self.target, self.net)
            self.target_updates += 1
        if a.reset != "none" and self.updates % a.reset_every == 0:
            self.reset(a.reset)

        if not want_stats:
            return None
        stats = q_statistics(q_sa, q_all, target)
        stats["grad_norm"] = float(self.last_grad_norm)
        stats["td_loss_last"] = float(loss.detach())
        return stats

    def pop_mean_loss(self) -> float | None:
        """Mean TD (Huber) loss over the updates since the previous call; None if there were none."""
        if self._loss_count == 0:
            return None
        mean = float(self._loss_sum) / self._loss_count
        self._loss_sum.zero_()
        self._loss_count = 0
        return mean

    def param_norm(self) -> float:
        with torch.no_grad():
            return float(torch.sqrt(sum((p.double() ** 2).sum() for p in self.net.parameters())))

    def reset_parameters(self, mode: str) -> list[torch.nn.Parameter]:
        """The parameters a reset ``mode`` touches (head = the last linear layer)."""
        if mode == "head":
            return list(self.net.head.parameters())
        if mode in ("full", "shrink_perturb"):
            return list(self.net.parameters())
        raise ValueError(f"reset: got {mode!r}; allowed: 'head', 'full', 'shrink_perturb'")

    def reset(self, mode: str) -> None:
        """Re-initialise (``head``/``full``) or shrink-and-perturb the online parameters, clear their
        Adam state, and give the target the same values for those parameters (Nikishin et al. reset
        both). The replay buffer is untouched."""
        fresh = dict(self._fresh_net().to(self.device).named_parameters())
        touched = {id(p) for p in self.reset_parameters(mode)}
        alpha = self.config.agent.shrink_alpha
        with torch.no_grad():
            for (name, p), tp in zip(self.net.named_parameters(), self.target.parameters()):
                if id(p) not in touched:
                    continue
                if mode == "shrink_perturb":
                    p.mul_(alpha).add_(fresh[name], alpha=1.0 - alpha)
                else:
                    p.copy_(fresh[name])
                tp.copy_(p)
                self.optimizer.state.pop(p, None)
        self.resets += 1

    @torch.no_grad()
    def probe(self, obs: torch.Tensor):
        """Q-values and hidden activations of the online net on the fixed probe batch."""
        return self.net.forward_with_activations(obs.to(self.device))
