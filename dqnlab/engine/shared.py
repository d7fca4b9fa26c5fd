"""Anonymous shared memory for numpy arrays, inherited by forked actor processes.

Blocks are ``mmap(-1, n)`` (MAP_SHARED | MAP_ANONYMOUS): they have no name, never appear in
/dev/shm, and the kernel frees them when the last process holding them exits, whatever the exit
path (normal end, exception, SIGKILL). Nothing can leak, so there is nothing to unlink. The price is
that actors must be started with the ``fork`` method, which :mod:`dqnlab.engine.workers` does.
"""

from __future__ import annotations

import mmap

import numpy as np

_ALIGN = 64  # one cache line: counters written by different processes do not share a line


class SharedArena:
    """Carves named numpy arrays out of one anonymous shared mapping.

    Declare every array with :meth:`add`, then call :meth:`allocate` once, before forking.
    """

    def __init__(self) -> None:
        self._specs: list[tuple[str, tuple[int, ...], np.dtype]] = []
        self.arrays: dict[str, np.ndarray] = {}
        self._mmap: mmap.mmap | None = None

    def add(self, name: str, shape: tuple[int, ...] | int, dtype: type | np.dtype) -> None:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self._specs.append((name, shape, np.dtype(dtype)))

    def allocate(self) -> dict[str, np.ndarray]:
        offsets, pos = [], 0
        for _, shape, dtype in self._specs:
            offsets.append(pos)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            pos += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        self._mmap = mmap.mmap(-1, max(pos, _ALIGN))
        for (name, shape, dtype), off in zip(self._specs, offsets):
            count = int(np.prod(shape, dtype=np.int64))
            self.arrays[name] = np.frombuffer(self._mmap, dtype=dtype, count=count, offset=off).reshape(shape)
        return self.arrays

    @property
    def nbytes(self) -> int:
        return 0 if self._mmap is None else len(self._mmap)
