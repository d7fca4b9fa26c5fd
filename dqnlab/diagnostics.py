"""Pure diagnostics maths (DESIGN.md terms): srank, dormant units, divergence, Q statistics,
overestimation. No process or I/O code here."""

from __future__ import annotations

import math

import numpy as np
import torch

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def srank(features: torch.Tensor | np.ndarray, delta: float = 0.01) -> int:
    """Effective rank of ``features`` (N, d): ``min k`` with ``sum_{i<=k} s_i / sum_i s_i >= 1 - delta``
    (Kumar et al. 2021). 0 for an all-zero matrix."""
    phi = torch.as_tensor(features, dtype=torch.float64)
    s = torch.linalg.svdvals(phi)
    total = float(s.sum())
    if total <= 0.0 or not math.isfinite(total):
        return 0
    cum = torch.cumsum(s, 0) / total
    return int(torch.searchsorted(cum, torch.tensor(1.0 - delta, dtype=torch.float64) - 1e-12).item()) + 1


def dormant_scores(activations: torch.Tensor | np.ndarray) -> np.ndarray:
    """Per-unit score ``E|h_i| / mean_k E|h_k|`` over the batch (Sokar et al. 2023); all-zero
    layer -> all scores 0."""
    h = torch.as_tensor(activations, dtype=torch.float64).abs().mean(0)
    mean = float(h.mean())
    if mean <= 0.0:
        return np.zeros(h.shape[0])
    return (h / mean).numpy()


def dormant_fractions(
    layers: list[torch.Tensor] | list[np.ndarray], taus: tuple[float, ...] = (0.0, 0.1)
) -> dict[str, float]:
    """Fraction of tau-dormant units (score <= tau) per layer and overall, for each tau.

    Keys: ``dormant_frac_tau{tau}`` (overall) and ``dormant_frac_tau{tau}_l{i}`` (layer i)."""
    scores = [dormant_scores(h) for h in layers]
    total = sum(len(s) for s in scores)
    out: dict[str, float] = {}
    for tau in taus:
        key = f"dormant_frac_tau{tau:g}"
        dormant = [(s <= tau).sum() for s in scores]
        out[key] = float(sum(dormant)) / total
        for i, (d, s) in enumerate(zip(dormant, scores)):
            out[f"{key}_l{i}"] = float(d) / len(s)
    return out


def q_bound(reward_bound: float, gamma: float) -> float:
    """The largest |Q| a bounded-reward MDP allows: ``R_max / (1 - gamma)``."""
    return reward_bound / (1.0 - gamma)


def divergence_flags(q_probe_abs_max: float, bound: float) -> tuple[bool, bool]:
    """``(soft, hard)``: soft when max |Q| on the probe exceeds ``bound``; hard when it is NaN/inf."""
    hard = not math.isfinite(q_probe_abs_max)
    soft = hard or q_probe_abs_max > bound
    return soft, hard


def q_statistics(q_sa: torch.Tensor, q_all: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """On one sampled batch: Q(s,a) mean/max/min and quantiles, max_a Q(s,.) mean/max/min, target mean."""
    q_sa = q_sa.detach().float().cpu()
    greedy = q_all.detach().float().max(dim=1).values.cpu()
    qs = torch.quantile(q_sa, torch.tensor(QUANTILES)).tolist()
    out = {
        "q_mean": float(q_sa.mean()),
        "q_max": float(q_sa.max()),
        "q_min": float(q_sa.min()),
        "q_greedy_mean": float(greedy.mean()),
        "q_greedy_max": float(greedy.max()),
        "q_greedy_min": float(greedy.min()),
        "target_mean": float(target.detach().float().mean()),
    }
    for q, v in zip(QUANTILES, qs):
        out[f"q_p{round(q * 100):02d}"] = float(v)
    return out


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = sum_k gamma^k r_{t+k}`` within one episode."""
    out = np.empty(len(rewards), dtype=np.float64)
    g = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def overestimation(q_greedy: np.ndarray, rewards: np.ndarray, gamma: float) -> float:
    """Mean over the steps of one episode of ``max_a Q(s_t,.) - G_t`` (G_t: the return obtained).

    A truncated episode's G_t misses the rewards after the cut, which biases this upward near the
    cut; we report it as measured."""
    return float(np.mean(np.asarray(q_greedy, dtype=np.float64) - discounted_returns(rewards, gamma)))
