"""Counting sampled batches many at a time, from their packed tags (:mod:`dqnlab.audit.tags`): each
worker's draws and the policy lags. :class:`dqnlab.audit.recorder.Audit` copies each batch's tags into a
pending array and folds them here every few hundred batches: one set of numpy calls a fold, no
temporary of the pending size."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dqnlab.audit.tags import VERSION_BITS, VERSION_MASK

_LANES = np.arange(1 << 16, dtype=np.int64) & 7
"""Element i's lane, ``i % 8`` (:func:`count_workers`), for up to 65,536 elements a call."""


class Lags(NamedTuple):
    """Policy lags of counted transitions: their sum, their largest, how many."""

    total: int
    max: int
    n: int


def fold(tags: np.ndarray, ends: list[int], versions: list[int], sampled: np.ndarray,
         scratch: np.ndarray) -> Lags:  # fmt: skip
    """Count batches laid end to end in ``tags`` (batch i ends at ``ends[i]``, drawn for learner version
    ``versions[i]``): each worker's draws are added to ``sampled`` (in place); their lags are returned.
    ``scratch`` (as long as ``tags``) is overwritten."""
    n = tags.size
    ends_a = np.array(ends, dtype=np.int64)
    sizes = np.diff(ends_a, prepend=0)
    starts = ends_a - sizes
    learner = np.array(versions, dtype=np.int64) & VERSION_MASK
    # each batch's smallest and largest tag: with one worker, its oldest and newest acting version
    oldest, newest = np.minimum.reduceat(tags, starts), np.maximum.reduceat(tags, starts)
    worker = int(oldest.min()) >> VERSION_BITS
    if int(newest.max()) >> VERSION_BITS == worker:  # one worker: every tag is base + version (read-only)
        sampled[worker] += n
        base = worker << VERSION_BITS
        acting_sum = int(tags.sum()) - n * base
        oldest -= base
        newest -= base
    else:
        count_workers(np.right_shift(tags, VERSION_BITS, out=scratch), sampled)
        acting = np.bitwise_and(tags, VERSION_MASK, out=scratch)
        oldest, newest = np.minimum.reduceat(acting, starts), np.maximum.reduceat(acting, starts)
        acting_sum = int(acting.sum())
    if (newest <= learner).all():  # no version wrapped (2^28): lag = learner - acting, summed per batch
        return Lags(int(sizes @ learner) - acting_sum, int((learner - oldest).max()), n)
    return lags_of(tags, np.repeat(learner, sizes))


def count_workers(workers: np.ndarray, sampled: np.ndarray) -> None:
    """Add each worker's draws to ``sampled`` (``workers``: the worker of each drawn transition; overwritten).

    ``np.bincount`` adds one to one counter per element, so with one or two workers each addition
    waits for the previous one to the same counter (~5 ns an element, 80 us a fold of 16k): one
    worker is counted by its min and max, several by spreading each worker's count over 8 counters
    (element i adds to counter ``8 * worker + i % 8``) and summing them."""
    lo, hi = int(workers.min()), int(workers.max())
    if lo == hi:
        sampled[lo] += workers.size
        return
    np.left_shift(workers, 3, out=workers)
    np.bitwise_or(workers, _LANES[: workers.size], out=workers)
    sampled[: hi + 1] += np.bincount(workers, minlength=8 * (hi + 1)).reshape(-1, 8).sum(axis=1)


def count_sampled(tags: np.ndarray, versions: np.ndarray, sampled: np.ndarray) -> Lags:
    """Drawn transitions (their tags, and the learner version each was drawn for) of any number: each
    worker's draws added to ``sampled``; their lags returned."""
    workers = tags >> VERSION_BITS
    sampled[: int(workers.max()) + 1] += np.bincount(workers)
    return lags_of(tags, versions)


def lags_of(tags: np.ndarray, versions: np.ndarray) -> Lags:
    """The policy lags of transitions ``tags`` drawn for learner ``versions`` (modulo 2^28: a wrap is exact)."""
    lags = (versions - (tags & VERSION_MASK)) & VERSION_MASK
    return Lags(int(lags.sum()), int(lags.max()), tags.size)
