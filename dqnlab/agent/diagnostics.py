"""Pure diagnostics maths (design terms): srank, dormant units, divergence, Q statistics,
overestimation. No process or I/O code here.

Device contract: every function accepts tensors on any device (the learner's may be on a GPU) or
numpy arrays, and first moves its input to the host (:func:`to_host`); results are Python floats
or numpy arrays.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dqnlab.metrics import (
    DORMANT,
    DORMANT_TAUS,
    Q_GREEDY_MAX,
    Q_GREEDY_MEAN,
    Q_GREEDY_MIN,
    Q_MAX,
    Q_MEAN,
    Q_MIN,
    Q_P,
    TARGET_MEAN,
    dormant_layer,
)
from dqnlab.metrics import Q_QUANTILES as QUANTILES


def to_host(x: torch.Tensor | np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``x`` as a detached CPU tensor of ``dtype`` (a no-op copy for CPU input)."""
    return torch.as_tensor(x).detach().to("cpu", dtype)


def srank(features: torch.Tensor | np.ndarray, delta: float = 0.01) -> int:
    """Effective rank of ``features`` (N, d): ``min k`` with ``sum_{i<=k} s_i / sum_i s_i >= 1 - delta``
    (Kumar et al. 2021). 0 for an all-zero matrix."""
    phi = to_host(features)
    s = torch.linalg.svdvals(phi)
    total = float(s.sum())
    if total <= 0.0 or not math.isfinite(total):
        return 0
    cum = torch.cumsum(s, 0) / total
    return int(torch.searchsorted(cum, torch.tensor(1.0 - delta, dtype=torch.float64) - 1e-12).item()) + 1


def dormant_scores(activations: torch.Tensor | np.ndarray) -> np.ndarray:
    """Per-unit score ``E|h_i| / mean_k E|h_k|`` over the batch (Sokar et al. 2023); all-zero
    layer -> all scores 0."""
    h = to_host(activations).abs().mean(0)
    mean = float(h.mean())
    if mean <= 0.0:
        return np.zeros(h.shape[0])
    return (h / mean).numpy()


def dormant_fractions(
    layers: list[torch.Tensor] | list[np.ndarray], taus: tuple[float, ...] = DORMANT_TAUS
) -> dict[str, float]:
    """Fraction of tau-dormant units (score <= tau) per layer and overall, for each tau.

    Keys: ``dormant_frac_tau{tau}`` (overall) and ``dormant_frac_tau{tau}_l{i}`` (layer i)."""
    scores = [dormant_scores(h) for h in layers]
    total = sum(len(s) for s in scores)
    out: dict[str, float] = {}
    for tau in taus:
        dormant = [(s <= tau).sum() for s in scores]
        out[DORMANT[tau]] = float(sum(dormant)) / total
        for i, (d, s) in enumerate(zip(dormant, scores)):
            out[dormant_layer(tau, i)] = float(d) / len(s)
    return out


def q_bound(reward_bound: float, gamma: float) -> float:
    """The largest |Q| a bounded-reward MDP allows: ``R_max / (1 - gamma)``."""
    return reward_bound / (1.0 - gamma)


def q_statistics(q_sa: torch.Tensor, q_all: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """On one sampled batch: Q(s,a) mean/max/min and quantiles, max_a Q(s,.) mean/max/min, target mean."""
    q_sa = to_host(q_sa, torch.float32)
    greedy = to_host(q_all, torch.float32).max(dim=1).values
    qs = torch.quantile(q_sa, torch.tensor(QUANTILES)).tolist()
    out = {
        Q_MEAN: float(q_sa.mean()),
        Q_MAX: float(q_sa.max()),
        Q_MIN: float(q_sa.min()),
        Q_GREEDY_MEAN: float(greedy.mean()),
        Q_GREEDY_MAX: float(greedy.max()),
        Q_GREEDY_MIN: float(greedy.min()),
        TARGET_MEAN: float(to_host(target).mean()),
    }
    for q, v in zip(QUANTILES, qs):
        out[Q_P[q]] = float(v)
    return out


def discounted_returns(rewards: np.ndarray, gamma: float, bootstrap: float = 0.0) -> np.ndarray:
    """``G_t = sum_{k < T-t} gamma^k r_{t+k} + gamma^(T-t) * bootstrap`` for the ``T`` steps of one
    episode; ``bootstrap`` is the value of the state after the last step (0 when it terminated)."""
    out = np.empty(len(rewards), dtype=np.float64)
    g = float(bootstrap)
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def overestimation(q_greedy: np.ndarray, rewards: np.ndarray, gamma: float, bootstrap: float = 0.0) -> float:
    """Mean over the steps of one episode of ``max_a Q(s_t,.) - G_t``.

    Estimator: ``G_t`` is the discounted return obtained from ``s_t`` to the end of the episode plus,
    when the episode was cut by a time limit (truncated, not terminated), ``gamma^(T-t)`` times
    ``bootstrap = max_a Q(s_T,.)`` at the cut state. Q bootstraps through truncations in the TD
    target, so without that tail a perfect value function would read ``+gamma^(T-t) V(s_T)`` near
    the cut (about +20 on CartPole's 500-step limit); with it, a perfect value function reads 0.
    Pass ``bootstrap=0`` for a terminated episode."""
    g = discounted_returns(rewards, gamma, bootstrap)
    return float(np.mean(np.asarray(q_greedy, dtype=np.float64) - g))


def batch_statistics(q, features=None, actions=None) -> dict[str, float]:
    """Statistics of one batch's Q-values ``q`` (N, A): max |Q| over every action; with the batch's
    ``actions`` (N,) the mean, max, min and 5/50/95% quantiles of Q(s,a) at them (the metrics' definition:
    over every action they would be other numbers); with the penultimate layer's ``features`` (N, d) its
    srank and dormant fractions (tau 0 and 0.1). Keys are the audit's diagnostic names
    (:data:`dqnlab.audit.events.DIAG_NAMES`)."""
    q = np.asarray(q, dtype=np.float64)
    values = {"q_abs_max_current": np.abs(q).max()}
    if actions is not None:
        q_sa = q[np.arange(len(q)), np.asarray(actions, dtype=np.int64).ravel()]
        values.update({"q_mean": q_sa.mean(), "q_max": q_sa.max(), "q_min": q_sa.min()})
        values.update(zip(("q_p05", "q_p50", "q_p95"), np.quantile(q_sa, [0.05, 0.5, 0.95])))
    if features is not None:
        phi = np.asarray(features, dtype=np.float64)
        values["srank_current"] = srank(phi)
        fractions = dormant_fractions([phi])
        values["dormant_frac_tau0_current"] = fractions["dormant_frac_tau0"]
        values["dormant_frac_tau0.1_current"] = fractions["dormant_frac_tau0.1"]
    return {name: float(v) for name, v in values.items()}
