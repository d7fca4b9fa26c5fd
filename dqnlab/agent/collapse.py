"""Collapse signs of each replica's online network and the divergence decisions the learner loop
takes from them (their own step: logging only reports them).

Two batches of states are measured: the fixed probe (drawn once when learning starts: the first
policies' data, the same states for the whole run) and a batch drawn afresh from the current replay
(the data the agent trains on now; where Kumar et al. 2021 measure srank and Sokar et al. 2023
dormant units). Soft divergence is max |Q| above what the env can pay plus a margin, ``q_limit``;
the textbook test, max |Q| above ``R_max / (1 - gamma)`` itself, is kept as ``q_above_bound``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from dqnlab.agent.diagnostics import dormant_fractions, q_bound, srank
from dqnlab.metrics import (
    DORMANT,
    DORMANT_CURRENT,
    DORMANT_FRAC,
    HARD_DIVERGENCE,
    PARAM_NORM,
    Q_ABOVE_BOUND,
    Q_ABS_MAX_CURRENT,
    Q_BOUND,
    Q_LIMIT,
    Q_PROBE_ABS_MAX,
    SOFT_DIVERGENCE,
    SRANK,
    SRANK_CURRENT,
)


@dataclass
class CollapseSigns:
    hard_divergence: bool
    """NaN/inf in a parameter or a Q-value: the network has no usable policy."""
    metrics: dict[str, float] = field(default_factory=dict)


def parameters_finite(flat: np.ndarray) -> bool:
    """Whether every parameter of a flat vector is finite (checked before any evaluation)."""
    return bool(np.isfinite(flat).all())


def q_limit(reward_bound: float, gamma: float, margin: float) -> float:
    """The soft-divergence threshold: ``(1 + margin) * R_max / (1 - gamma)``."""
    return (1.0 + margin) * q_bound(reward_bound, gamma)


def soft_divergence(q_abs_max: float, limit: float) -> bool:
    """Q far above what the env can pay: ``max |Q| > limit``, or not finite."""
    return not math.isfinite(q_abs_max) or q_abs_max > limit


def _largest(values: list[float]) -> float:
    """The largest of some max |Q| values; NaN if any is NaN (Python's ``max`` keeps a finite first
    value over a NaN after it, which would hide a NaN on one of the two batches)."""
    return float(np.max(values))


def _abs_max(q: torch.Tensor) -> float:
    return float(q.abs().max()) if q.numel() else 0.0


def q_abs_max(learner, obs: torch.Tensor | None) -> list[float]:
    """Per replica, max |Q| over every action on ``obs`` ``(K, N, obs_dim)`` (0 without a batch)."""
    if obs is None:
        return [0.0] * learner.replicas
    q, _ = learner.probe(obs)
    return [_abs_max(q[k]) for k in range(learner.replicas)]


def collapse_signs(learner, probe: torch.Tensor | None, current: torch.Tensor | None, reward_bounds: list[float],
                   gamma: float, margin: float) -> list[CollapseSigns]:  # fmt: skip
    """Per replica: parameter norm; on the probe and on the ``current`` batch (each ``(K, N, obs_dim)``,
    or None before learning starts) max |Q|, srank of the penultimate features and dormant fractions
    (skipped once the replica has hard-diverged: meaningless on NaN); ``q_bound``, ``q_limit`` and
    ``q_above_bound`` (``reward_bounds[k]`` is replica k's R_max); hard divergence."""
    norms = learner.param_norm()
    out = [CollapseSigns(not math.isfinite(n), {PARAM_NORM: n}) for n in norms]
    batches = [(probe, Q_PROBE_ABS_MAX, SRANK, DORMANT), (current, Q_ABS_MAX_CURRENT, SRANK_CURRENT, DORMANT_CURRENT)]
    for obs, q_name, srank_name, dormant_names in batches:
        if obs is None:
            continue
        q, acts = learner.probe(obs)
        for k, signs in enumerate(out):
            value = _abs_max(q[k])
            signs.metrics[q_name] = value
            signs.hard_divergence = signs.hard_divergence or not math.isfinite(value)
            if not signs.hard_divergence:
                signs.metrics[srank_name] = float(srank(acts[-1][k]))
                fractions = dormant_fractions([a[k] for a in acts])
                if dormant_names is DORMANT:  # per layer on the probe only
                    signs.metrics.update(fractions)
                    signs.metrics[DORMANT_FRAC] = fractions[DORMANT[0.1]]
                else:
                    signs.metrics.update({dormant_names[t]: fractions[DORMANT[t]] for t in dormant_names})
    for k, signs in enumerate(out):
        m = signs.metrics
        bound = q_bound(reward_bounds[k], gamma)
        m[Q_BOUND], m[Q_LIMIT] = bound, q_limit(reward_bounds[k], gamma, margin)
        seen = _largest([m.get(Q_PROBE_ABS_MAX, 0.0), m.get(Q_ABS_MAX_CURRENT, 0.0)])
        m[Q_ABOVE_BOUND] = float(not math.isfinite(seen) or seen > bound)
        m[HARD_DIVERGENCE] = float(signs.hard_divergence)
    return out


def divergence_check(learner, probe: torch.Tensor | None, current: torch.Tensor | None, reward_bounds: list[float],
                     gamma: float, margin: float) -> list[dict[str, float]]:  # fmt: skip
    """Per replica, the soft-divergence check the loop runs on a schedule in env steps (at every
    evaluation and at the end): max |Q| on the probe and current batches against ``q_limit``. Nothing
    before learning starts (no batch yet: nothing measured, nothing recorded)."""
    if probe is None and current is None:
        return [{} for _ in range(learner.replicas)]
    out = []
    for k, (p, c) in enumerate(zip(q_abs_max(learner, probe), q_abs_max(learner, current))):
        limit = q_limit(reward_bounds[k], gamma, margin)
        m = {Q_LIMIT: limit, SOFT_DIVERGENCE: float(soft_divergence(_largest([p, c]), limit))}
        if probe is not None:
            m[Q_PROBE_ABS_MAX] = p
        if current is not None:
            m[Q_ABS_MAX_CURRENT] = c
        out.append(m)
    return out
