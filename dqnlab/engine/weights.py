"""Versioned weight broadcast: one writer (the learner), many lock-free readers (the actors).

A seqlock over one shared float32 vector. The writer makes the sequence number odd, writes the
parameters and their version, then makes it even again. A reader copies the vector between two
reads of the sequence number and accepts the copy only if both reads are equal and even; otherwise
the copy may be torn and is retried, never used. Readers never block the writer, and a reader that
dies cannot block anyone.

Memory order. The protocol needs stores seen in program order and loads made in program order:
x86-TSO gives both (numpy copies are whole ``memcpy`` calls between the sequence reads), so on x86
the broadcast is lock-free. Python has no memory fences to issue, and a weakly ordered CPU (ARM,
POWER) may reorder a reader's loads around the sequence reads and accept a torn copy; there, reads
and writes take a process-shared lock instead (:func:`seqlock_is_safe` decides; correct everywhere,
slower). Nothing else in the engine relies on the memory order: every other shared write happens
under the replay's lock.
"""

from __future__ import annotations

import multiprocessing as mp
import platform
import time

import numpy as np

from dqnlab.engine.shared import SharedArena

TOTAL_STORE_ORDER = ("x86_64", "amd64", "i386", "i686", "x86")


def seqlock_is_safe(machine: str | None = None) -> bool:
    """Whether this CPU keeps loads and stores in program order (x86-TSO), as the lock-free seqlock needs."""
    return (machine if machine is not None else platform.machine()).lower() in TOTAL_STORE_ORDER


class TornReadError(RuntimeError):
    """No consistent snapshot could be read within the retry budget (a writer that never finishes)."""


class WeightBroadcast:
    """Shared, versioned parameter snapshot. ``version`` counts learner updates at publication."""

    def __init__(self, arena: SharedArena, num_params: int, prefix: str = "weights", lock_free: bool | None = None):
        """``lock_free``: the seqlock alone (default: where :func:`seqlock_is_safe`), else under a lock."""
        self._prefix = prefix
        self.num_params = num_params
        self.lock_free = seqlock_is_safe() if lock_free is None else lock_free
        self._lock = None if self.lock_free else mp.get_context("fork").Lock()
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
        if self._lock is not None:
            with self._lock:
                self._write(params, version)
        else:
            self._write(params, version)

    def _write(self, params: np.ndarray, version: int) -> None:
        self._seq[0] += 1  # odd: write in progress
        self._params[:] = params
        self._version[0] = version
        self._seq[0] += 1  # even: consistent

    def read_into(self, out: np.ndarray, max_retries: int = 100_000) -> int:
        """Copy a consistent snapshot into ``out``; return its version. Retries torn reads."""
        if not hasattr(self, "_seq"):
            self._bind()
        if self._lock is not None:
            with self._lock:
                return self._read(out, max_retries)
        return self._read(out, max_retries)

    def _read(self, out: np.ndarray, max_retries: int) -> int:
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
