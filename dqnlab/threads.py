"""Explicit thread counts, so that ``workers + 1`` processes never oversubscribe the cores."""

from __future__ import annotations

import os

_BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def default_blas_threads() -> None:
    """Set BLAS/OpenMP thread variables to 1 unless the user set them (effective for libraries
    loaded afterwards; :mod:`dqnlab` calls it on import, before numpy and torch)."""
    for var in _BLAS_VARS:
        os.environ.setdefault(var, "1")


def set_threads(n: int) -> int:
    """Set torch's intra-op threads for this process; returns the previous count."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    return previous
