"""Transition tags: one int64 a user keeps beside each transition in their own buffer, packing the
worker that produced it, the parameter version that chose its action, and a sequence number.

Layout (bits, high to low): 1 sign (0) | 11 worker (0-2047) | 28 version (0-268,435,455, kept modulo
2^28) | 24 sequence (per worker, modulo 2^24). A sampled batch's tags give, without any lookup, whose
transitions were drawn and how stale their acting policy was.
"""

from __future__ import annotations

import numpy as np

WORKER_BITS, VERSION_BITS, SEQ_BITS = 11, 28, 24
MAX_WORKERS = 1 << WORKER_BITS
VERSION_MOD = 1 << VERSION_BITS
_SEQ_MASK = (1 << SEQ_BITS) - 1
_VERSION_MASK = VERSION_MOD - 1


def pack(worker, version, seq) -> np.ndarray:
    """Tags of ``(worker, version, seq)`` (scalars or arrays, broadcast)."""
    w = np.asarray(worker, dtype=np.int64)
    v = np.asarray(version, dtype=np.int64) & _VERSION_MASK
    s = np.asarray(seq, dtype=np.int64) & _SEQ_MASK
    return (w << (VERSION_BITS + SEQ_BITS)) | (v << SEQ_BITS) | s


def worker_of(tags) -> np.ndarray:
    return np.asarray(tags, dtype=np.int64) >> (VERSION_BITS + SEQ_BITS)


def version_of(tags) -> np.ndarray:
    return (np.asarray(tags, dtype=np.int64) >> SEQ_BITS) & _VERSION_MASK


def lag(tags, version: int) -> np.ndarray:
    """Policy lag of each tagged transition at learner ``version``: ``version - acting version``, modulo
    2^28 (exact for lags below 268 million updates)."""
    return (int(version) - version_of(tags)) % VERSION_MOD
