"""Transition tags: one int64 a user keeps beside each transition in their own buffer, packing the
worker that produced it and the parameter version that chose its action.

Layout (bits, high to low): 25 zero | 11 worker (0-2047) | 28 version (0-268,435,455, kept modulo
2^28). A sampled batch's tags give, without any lookup, whose transitions were drawn and how stale
their acting policy was. Worker 0's tags are the versions themselves, and any tag below 2^30 is a
one-digit Python int: the cheapest integer CPython has, for the per-step ``produced`` call.
"""

from __future__ import annotations

import numpy as np

WORKER_BITS, VERSION_BITS = 11, 28
MAX_WORKERS = 1 << WORKER_BITS
VERSION_MOD = 1 << VERSION_BITS
VERSION_MASK = VERSION_MOD - 1


def pack(worker, version) -> np.ndarray:
    """Tags of ``(worker, version)`` (scalars or arrays, broadcast)."""
    w = np.asarray(worker, dtype=np.int64)
    v = np.asarray(version, dtype=np.int64) & VERSION_MASK
    return (w << VERSION_BITS) | v


def worker_of(tags) -> np.ndarray:
    return np.asarray(tags, dtype=np.int64) >> VERSION_BITS


def version_of(tags) -> np.ndarray:
    return np.asarray(tags, dtype=np.int64) & VERSION_MASK


def lag(tags, version: int) -> np.ndarray:
    """Policy lag of each tagged transition at learner ``version``: ``version - acting version``, modulo
    2^28 (exact for lags below 268 million updates)."""
    return (int(version) - version_of(tags)) % VERSION_MOD
