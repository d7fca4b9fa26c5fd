"""Sum trees for prioritized replay (Schaul et al. 2016), K at once: one ``(K, 2C)`` float64 array whose
row k is replica k's binary tree over ``C`` leaves (``C`` a power of two >= the replay capacity; leaf
``i`` at index ``C + i``, the root at index 1, node ``j``'s children at ``2j`` and ``2j + 1``).

Pure numpy over arrays the caller owns (the shared replay keeps them in shared memory, under its
lock). Every update recomputes the touched parents from their children, so sums never drift.
Costs, with ``d = log2 C`` levels: setting ``n`` leaves is ``d`` vectorised passes over ``n`` nodes;
drawing ``B`` samples is ``d`` passes over ``B`` nodes (measured in ``python -m dqnlab.bench``).
"""

from __future__ import annotations

import numpy as np


def leaves_for(capacity: int) -> int:
    """``C``: the power of two the tree needs for ``capacity`` leaves."""
    return 1 << max(0, (int(capacity) - 1).bit_length())


def depth(tree: np.ndarray) -> int:
    return (tree.shape[1] // 2).bit_length() - 1


def set_leaves(tree: np.ndarray, rows: np.ndarray, leaves: np.ndarray, values: np.ndarray) -> None:
    """Set leaf ``leaves[i]`` of replica ``rows[i]`` to ``values[i]`` (1-d arrays of one length) and
    recompute every ancestor from its children."""
    width = tree.shape[1]
    flat = tree.reshape(-1)  # one flat index per node (row * width + node): a 1-d gather is ~2x a 2-d one
    base = np.asarray(rows, dtype=np.int64) * width
    nodes = np.asarray(leaves, dtype=np.int64) + width // 2
    flat[base + nodes] = values
    for _ in range(depth(tree)):
        nodes >>= 1
        left = base + 2 * nodes
        flat[base + nodes] = flat[left] + flat[left + 1]


def total(tree: np.ndarray) -> np.ndarray:
    """Per replica, the sum of its leaves ``(K,)``."""
    return tree[:, 1]


def find(tree: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """Per replica row k and target ``mass[k, j]`` in ``[0, total[k])``: the leaf ``i`` whose prefix sum
    interval ``[sum_{l<i} p_l, sum_{l<=i} p_l)`` holds it; ``(K, B)`` leaf indices."""
    width = tree.shape[1]
    flat = tree.reshape(-1)
    mass = np.array(mass, dtype=np.float64, copy=True)
    base = np.arange(tree.shape[0])[:, None] * width  # row k's nodes start at k * width in the flat array
    nodes = np.ones(mass.shape, dtype=np.int64)  # the roots
    for _ in range(depth(tree)):
        nodes <<= 1  # the left child
        left = flat[base + nodes]
        right = mass >= left
        np.subtract(mass, left, out=mass, where=right)
        nodes += right
    return nodes - width // 2
