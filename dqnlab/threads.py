"""Explicit thread counts, so that ``workers + 1`` processes never oversubscribe the cores, and the
learner's floating-point mode."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def learner_cpu(threads: int) -> Iterator[None]:
    """While the learner runs: ``threads`` torch intra-op threads, and denormal floats flushed to zero.
    Adam's first moments of a dead unit decay by 0.9 a step into the float32 denormal range
    (|x| < 1.2e-38), where arithmetic is ~100x slower: measured, a quarter of the moments of a
    CartPole learner were denormal after 1,000 updates, costing ~10% of each update; a moment that
    small moves nothing. Restores the thread count and torch's default (no flushing) on exit."""
    import torch

    previous = set_threads(threads)
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
        set_threads(previous)
