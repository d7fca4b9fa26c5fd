"""Collapse signs of each replica's online network, measured on its fixed probe batch, and the
divergence decision the learner loop takes from them (its own step: logging only reports it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from dqnlab.agent.diagnostics import divergence_flags, dormant_fractions, q_bound, srank
from dqnlab.metrics import (
    DORMANT,
    DORMANT_FRAC,
    HARD_DIVERGENCE,
    PARAM_NORM,
    Q_BOUND,
    Q_PROBE_ABS_MAX,
    SOFT_DIVERGENCE,
    SRANK,
)


@dataclass
class CollapseSigns:
    hard_divergence: bool
    """NaN/inf in a parameter or a probe Q-value: the network has no usable policy."""
    metrics: dict[str, float] = field(default_factory=dict)


def parameters_finite(flat: np.ndarray) -> bool:
    """Whether every parameter of a flat vector is finite (checked before any evaluation)."""
    return bool(np.isfinite(flat).all())


def collapse_signs(learner, probe: torch.Tensor | None, reward_bounds: list[float], gamma: float) -> list[CollapseSigns]:
    """Per replica: parameter norm, probe max |Q| against ``R_max / (1 - gamma)`` (``reward_bounds[k]``
    is replica k's R_max), divergence flags, srank of the penultimate features and dormant fractions
    (skipped once the replica has hard-diverged: they are meaningless on NaN). ``probe``:
    ``(K, P, obs_dim)``."""
    norms = learner.param_norm()
    out = [CollapseSigns(not math.isfinite(n), {PARAM_NORM: n}) for n in norms]
    if probe is None:
        for signs in out:
            signs.metrics[HARD_DIVERGENCE] = float(signs.hard_divergence)
        return out
    q, acts = learner.probe(probe)
    for k, signs in enumerate(out):
        bound = q_bound(reward_bounds[k], gamma)
        q_abs_max = float(q[k].abs().max())
        soft, hard_q = divergence_flags(q_abs_max, bound)
        signs.hard_divergence = signs.hard_divergence or hard_q
        m = signs.metrics
        m.update({Q_PROBE_ABS_MAX: q_abs_max, Q_BOUND: bound, SOFT_DIVERGENCE: float(soft)})
        if not signs.hard_divergence:
            m[SRANK] = float(srank(acts[-1][k]))
            m.update(dormant_fractions([a[k] for a in acts]))
            m[DORMANT_FRAC] = m[DORMANT[0.1]]
        m[HARD_DIVERGENCE] = float(signs.hard_divergence)
    return out
