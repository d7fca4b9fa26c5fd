"""Versioned weight broadcast: one writer (the learner), many lock-free readers (the actors).

A seqlock over one shared float32 vector. The writer makes the sequence number odd, writes the
parameters and their version, then makes it even again. A reader copies the vector between two
reads of the sequence number and accepts the copy only if both reads are equal and even; otherwise
the copy may be torn and is retried, never used. Readers never block the writer, and a reader that
dies cannot block anyone. (x86-TSO keeps stores and loads in program order, which is what the
protocol needs; numpy copies are whole ``memcpy`` calls between the sequence reads.)
"""

from __future__ import annotations

import time

import numpy as np

from dqnlab.engine.shared import SharedArena


class TornReadError(RuntimeError):
    """No consistent snapshot could be read within the retry budget (a writer that never finishes)."""


class WeightBroadcast:
    """Shared, versioned parameter snapshot. ``version`` counts learner updates at publication."""

    def __init__(self, arena: SharedArena, num_params: int, prefix: str = "weights"):
        self._prefix = prefix
        self.num_params = num_params
        arena.add(f"{prefix}.seq", 1, np.int64)
        arena.add(f"{prefix}.version", 1, np.int64)
        arena.add(f"{prefix}.params", num_params, np.float32)
        self._arena = arena

    def _bind(self) -> None:
        a = self._arena.arrays
        self._seq = a[f"{self._prefix}.seq"]
        self._version = a[f"{self._prefix}.version"]
        self._params = a[f"{self._prefix}.params"]

    def publish(self, params: np.ndarray, version: int) -> None:
        """Writer side (learner only)."""
        if not hasattr(self, "_seq"):
            self._bind()
        self._seq[0] += 1  # odd: write in progress
        self._params[:] = params
        self._version[0] = version
        self._seq[0] += 1  # even: consistent

    def read_into(self, out: np.ndarray, max_retries: int = 100_000) -> int:
        """Copy a consistent snapshot into ``out``; return its version. Retries torn reads."""
        if not hasattr(self, "_seq"):
            self._bind()
        for attempt in range(max_retries):
            s1 = int(self._seq[0])
            if s1 & 1 == 0:
                out[:] = self._params
                version = int(self._version[0])
                if int(self._seq[0]) == s1:
                    return version
            if attempt > 100:
                time.sleep(1e-6)
        raise TornReadError(f"no consistent weight snapshot after {max_retries} attempts")

    @property
    def version(self) -> int:
        if not hasattr(self, "_seq"):
            self._bind()
        return int(self._version[0])
