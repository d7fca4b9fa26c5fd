import math

import numpy as np
import pytest
import torch

from dqnlab.diagnostics import (
    discounted_returns,
    divergence_flags,
    dormant_fractions,
    overestimation,
    q_bound,
    q_statistics,
    srank,
)


@pytest.mark.parametrize("rank", [1, 3, 8])
def test_srank_of_matrices_of_known_rank(rank):
    rng = np.random.default_rng(rank)
    # equal singular values: all `rank` of them are needed to reach 99%
    u, _ = np.linalg.qr(rng.standard_normal((64, rank)))
    v, _ = np.linalg.qr(rng.standard_normal((16, rank)))
    assert srank(u @ v.T) == rank


def test_srank_ignores_the_smallest_one_percent_of_the_spectrum():
    s = np.array([50.0, 49.0, 0.5, 0.4])  # the last two hold 0.9% of the mass
    assert srank(np.diag(s)) == 2
    assert srank(np.zeros((5, 3))) == 0


def test_dormant_fraction_of_known_activations():
    h = np.ones((4, 10))
    h[:, 0] = 0.0  # dead unit: tau 0 and tau 0.1 dormant
    h[:, 1] = 0.05  # score 0.05/((8+0.05)/10) ~ 0.062 <= 0.1: tau 0.1 dormant only
    out = dormant_fractions([h, np.ones((3, 4))])
    assert out["dormant_frac_tau0_l0"] == pytest.approx(0.1)
    assert out["dormant_frac_tau0.1_l0"] == pytest.approx(0.2)
    assert out["dormant_frac_tau0.1_l1"] == 0.0
    assert out["dormant_frac_tau0.1"] == pytest.approx(2 / 14)
    assert out["dormant_frac_tau0"] == pytest.approx(1 / 14)


def test_all_dead_layer_is_fully_dormant():
    out = dormant_fractions([np.zeros((3, 5))])
    assert out["dormant_frac_tau0"] == 1.0


def test_divergence_flags():
    bound = q_bound(1.0, 0.99)
    assert bound == pytest.approx(100.0)
    assert divergence_flags(99.0, bound) == (False, False)
    assert divergence_flags(101.0, bound) == (True, False)
    assert divergence_flags(math.nan, bound) == (True, True)
    assert divergence_flags(math.inf, bound) == (True, True)


def test_discounted_returns_and_overestimation_by_hand():
    g = discounted_returns(np.array([1.0, 1.0, 1.0]), 0.5)
    np.testing.assert_allclose(g, [1.75, 1.5, 1.0])
    assert overestimation(np.array([2.75, 2.5, 2.0]), np.array([1.0, 1.0, 1.0]), 0.5) == pytest.approx(1.0)


def test_q_statistics():
    q_all = torch.tensor([[1.0, 3.0], [2.0, 0.0], [5.0, 4.0]])
    q_sa = torch.tensor([1.0, 2.0, 4.0])
    stats = q_statistics(q_sa, q_all, torch.tensor([0.0, 1.0, 2.0]))
    assert stats["q_mean"] == pytest.approx(7 / 3)
    assert (stats["q_max"], stats["q_min"]) == (4.0, 1.0)
    assert stats["q_greedy_mean"] == pytest.approx(10 / 3)
    assert stats["q_p50"] == 2.0
    assert stats["target_mean"] == 1.0
