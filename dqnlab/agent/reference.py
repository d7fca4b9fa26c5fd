"""The DQN update written the readable way (CleanRL's shape): torch autograd on one ``nn.Module``.

It is the reference the stacked learner's hand-written gradient is tested against, and the update
the naive writers (:mod:`dqnlab.engine.naive`) take on their own copies. Every loss and target switch
of :class:`~dqnlab.config.AgentConfig` is here: Huber or MSE, double DQN, the importance-sampling
weights of prioritized replay, gradient-norm clipping; the target's hard copy or Polyak step is
:func:`update_target`. Bootstrapping stops on ``terminated`` only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dqnlab.config import AgentConfig


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
    return torch.add(rewards, next_v.masked_fill(terminated, 0.0), alpha=gamma)


def dqn_loss(net: nn.Module, target: nn.Module, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
             next_obs: torch.Tensor, terminated: torch.Tensor, agent: AgentConfig,
             weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The mean TD loss of one batch ``(B, ...)`` with its graph, and the TD errors ``Q(s, a) - y``
    ``(B,)`` (detached: prioritized replay's new priorities)."""
    with torch.no_grad():
        y = td_target(rewards, terminated, target(next_obs), agent.gamma, net(next_obs) if agent.double_dqn else None)
    q = net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
    per_element = (q - y).square() if agent.loss == "mse" else F.smooth_l1_loss(q, y, reduction="none")
    if weights is not None:
        per_element = per_element * weights
    return per_element.mean(), (q - y).detach()


def dqn_gradient(net: nn.Module, target: nn.Module, batch: tuple[torch.Tensor, ...], agent: AgentConfig,
                 weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Set ``net``'s ``.grad`` to the clipped gradient of this batch's loss alone (a gradient left from an
    earlier batch is cleared first); returns the loss, the TD errors and the gradient's norm before
    clipping. ``batch``: obs, actions, rewards, next_obs, terminated."""
    net.zero_grad(set_to_none=True)
    loss, td_errors = dqn_loss(net, target, *batch, agent, weights)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(net.parameters(), agent.max_grad_norm)
    return loss.detach(), td_errors, norm


def update_target(target: nn.Module, net: nn.Module, weight: float) -> None:
    """``theta' <- theta' + weight (theta - theta')``: a hard copy at weight 1, a Polyak step at ``tau``."""
    with torch.no_grad():
        for t, p in zip(target.parameters(), net.parameters()):
            t.copy_(p) if weight == 1.0 else t.lerp_(p, weight)
