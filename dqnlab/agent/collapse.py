"""Collapse signs of the online network, measured on the fixed probe batch, and the divergence
decision the learner loop takes from them (its own step: logging only reports it)."""

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


def collapse_signs(learner, probe: torch.Tensor | None, reward_bound: float, gamma: float) -> CollapseSigns:
    """Parameter norm, probe max |Q| against ``R_max / (1 - gamma)``, divergence flags, srank of the
    penultimate features and dormant fractions. srank and dormant units are skipped once the network
    has hard-diverged (they are meaningless on NaN)."""
    m: dict[str, float] = {PARAM_NORM: learner.param_norm()}
    hard = not math.isfinite(m[PARAM_NORM])
    if probe is not None:
        q, acts = learner.probe(probe)
        q_abs_max = float(q.abs().max())
        bound = q_bound(reward_bound, gamma)
        soft, hard_q = divergence_flags(q_abs_max, bound)
        hard = hard or hard_q
        m.update({Q_PROBE_ABS_MAX: q_abs_max, Q_BOUND: bound, SOFT_DIVERGENCE: float(soft)})
        if not hard:
            m[SRANK] = float(srank(acts[-1]))
            m.update(dormant_fractions(acts))
            m[DORMANT_FRAC] = m[DORMANT[0.1]]
    m[HARD_DIVERGENCE] = float(hard)
    return CollapseSigns(hard, m)
