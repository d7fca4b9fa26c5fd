"""The recorder a user adds to their own parallel DQN: a few calls where transitions are produced,
sampled and learned from, and where parameters are read and written. Every process that calls it
(forked, spawned, or started any other way) opens the same folder and appends its own event file;
:mod:`dqnlab.audit.report` merges them, in time order, into the measurements dqnlab's engine reports.

Hot path: numpy only, no lock, no inter-process traffic. Counts are kept in the process and written
as cumulative snapshots at most every ``flush_every_s`` seconds (and at the report's log points);
what needs an order across processes (updates, parameter reads and writes) is one 48-byte record
each (six float64: :data:`RECORD`), buffered as a flat list of floats and appended to the process's
file in blocks. Timestamps are ``time.monotonic()``, one clock for every process of a Linux machine.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from time import monotonic

import numpy as np

from dqnlab.audit.tags import MAX_WORKERS, VERSION_BITS, VERSION_MASK, pack, worker_of

_WORKER_SHIFT = VERSION_BITS
_VERSION_MASK = VERSION_MASK

EVENT = np.dtype([("t", "f8"), ("kind", "i4"), ("who", "i4"), ("a", "f8"), ("b", "f8"), ("c", "f8")])
"""One event as :func:`read_events` returns it: its time, kind, the worker or writer it concerns, and up
to three numbers."""
RECORD = np.dtype([(name, "f8") for name in EVENT.names])
"""One event as written: six float64 (kind and who are small integers, exact as floats). A flat list of
floats turns into these records ~5x faster than a list of tuples into :data:`EVENT`."""
# kinds; for each: who, a, b, c
PRODUCED = 1  # worker; env steps it produced (cumulative, this process); episodes it finished (cumulative)
SAMPLED = 2  # worker; batch elements drawn from it (cumulative, this process)
LAG = 3  # -1; sum of policy lags (cumulative); max lag (so far); batch elements (cumulative)
RESIDENT = 4  # worker; its transitions resident in the buffer now (a snapshot from one call)
UPDATE = 5  # writer; its updates (cumulative, this process); TD loss of this update (NaN if not given)
SYNC = 6  # writer: its copy took the shared parameters
WRITE = 7  # writer: its whole copy replaced the shared parameters (last writer wins)
WRITE_BEGIN = 8  # writer: a write into the shared parameters starts (in place: hogwild, pushed gradients)
WRITE_END = 9  # writer: it ends
DIAG = 10  # diagnostic id (DIAG_NAMES); its value
CONFIG = 11  # -1; gamma; reward bound (NaN: from the rewards); learning starts (env steps)
REWARD = 12  # -1; largest |reward| seen by this process so far
SUBSAMPLED = 13  # -1; the fraction of sampled batches counted (only written when below 1)
DIAG_NAMES = ("q_mean", "q_max", "q_min", "q_p05", "q_p50", "q_p95", "q_abs_max_current", "srank_current",
              "dormant_frac_tau0_current", "dormant_frac_tau0.1_current")  # fmt: skip
BLOCK = 4096
_BLOCK_FLOATS = BLOCK * 6
_NAN = math.nan
_INT64 = np.dtype(np.int64)
PENDING = 16384
"""Sampled tags held before they are counted (a batch of 128: every 128 batches)."""
_LANES = np.arange(PENDING, dtype=np.int64) & 7
"""Element i's lane, ``i % 8`` (:meth:`Audit._count_workers`)."""
_generation = 0
"""Bumped in a forked child (``os.register_at_fork``): an Audit opened before the fork reopens its own
file there (a flag read per call, not a ``getpid`` system call)."""


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


class Audit:
    """Record one training run's events into ``folder`` (created; every process of the run opens the
    same folder with the same arguments; one folder holds one run: the report reads every event file in
    it).

    - actors: ``tag = audit.produced(worker, version, episode_end)`` (or :meth:`produced_batch` for a
      vector of envs); keep ``tag`` beside the transition in your buffer;
    - learner: ``audit.sampled(batch_tags, version, obs=batch_obs)`` when a batch is drawn,
      ``audit.updated(writer, td_loss)`` after each gradient update;
    - several writers: ``audit.synced(writer)`` after a copy takes the shared parameters,
      ``audit.wrote(writer)`` after it writes its whole copy back, or ``with audit.writing(writer):``
      around an in-place write (lock-free optimizer steps, pushed gradients);
    - now and then: ``audit.resident(tags_in_buffer)``.

    ``q_fn(obs) -> (N, A)`` (and ``features_fn(obs) -> (N, d)``, the penultimate layer) turn on the Q
    statistics and collapse signs, measured every ``diag_every_updates`` updates on the latest
    sampled batch (current data). ``gamma``/``reward_bound`` set what the env can pay (soft
    divergence); ``learning_starts`` (env steps) is subtracted in the realised UTD, as dqnlab does.

    ``sampled_fraction`` (0 < f <= 1, default 1: every batch) counts each sampled batch with
    probability f, drawn independently per batch, for a loop where even the ~2 us of :meth:`sampled`
    shows: the sampled shares and the mean policy lag are then unbiased estimates (a share's standard
    error is sqrt(p(1 - p) / (f * elements drawn)), under 0.003 for 1,000 batches of 128 at f = 0.25),
    the max lag is the max over the counted batches, and the report says so. Everything else (produced,
    resident, updates, UTD, lost updates, Q) stays exact."""

    def __init__(self, folder: str | Path, *, gamma: float = 0.99, reward_bound: float | None = None,
                 learning_starts: int = 0, q_fn: Callable | None = None, features_fn: Callable | None = None,
                 diag_every_updates: int = 250, flush_every_s: float = 1.0,
                 sampled_fraction: float = 1.0):  # fmt: skip
        real = isinstance(sampled_fraction, numbers.Real) and not isinstance(sampled_fraction, bool)
        if not (real and 0 < sampled_fraction <= 1):
            raise ValueError(f"Audit(sampled_fraction={sampled_fraction!r}): must be a number in (0, 1] "
                             "(the fraction of sampled batches counted; 1 counts every batch)")  # fmt: skip
        self.sampled_fraction = float(sampled_fraction)
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.q_fn, self.features_fn = q_fn, features_fn
        self.diag_every = max(1, int(diag_every_updates))
        self.flush_every_s = flush_every_s
        self._pid = None
        self._config = (gamma, np.nan if reward_bound is None else float(reward_bound), float(learning_starts))
        self._open()

    # --- per process ------------------------------------------------------------------------------
    def _open(self) -> None:
        """A file and counters of this process's own (a forked child reopens at its first call)."""
        self._pid = os.getpid()
        self._generation = _generation
        self._path = self.folder / f"events-{self._pid}-{uuid.uuid4().hex[:8]}.bin"
        self._rows: list[float] = []  # events not yet written, 6 floats each (extend: ~0.15 us; a numpy row ~5)
        self._file = None  # opened at the first block written (unbuffered: a forked child writes nothing twice)
        # per-worker counters as Python lists: a list item costs ~30 ns, a numpy scalar ~100 ns and more
        self._seq = [0] * MAX_WORKERS  # transitions this process produced per worker
        self._episodes = [0] * MAX_WORKERS
        self._workers: list[int] = []  # the workers this process produced for, in order of their first transition
        self._sampled = np.zeros(MAX_WORKERS, dtype=np.int64)
        self._lag_sum, self._lag_max, self._lag_n = 0, 0, 0
        # sampled batches' tags not counted yet, copied into one preallocated array (a copy into a slice
        # is ~0.5 us; a list of 64 arrays concatenated at the fold cost ~3 us a batch), with each batch's
        # end and learner version in two lists
        self._pending = np.empty(PENDING, dtype=np.int64)
        self._scratch = np.empty(PENDING, dtype=np.int64)  # the fold's workers, then acting versions (no temporaries)
        self._pending_n = 0
        self._pending_ends: list[int] = []  # each pending batch's end in the pending array
        self._pending_versions: list[int] = []  # ... and the learner version it was drawn for
        self._updates: dict[int, int] = {}
        self._reward_max = 0.0
        self._last_flush = time.monotonic()
        self._calls = 0
        self._next_check = 64
        self._obs = None
        # counted batches drawn by a per-process generator (seeded by the pid: a forked child draws its own)
        self._draw = random.Random(self._pid).random
        self._emit(CONFIG, -1, *self._config)
        if self.sampled_fraction < 1.0:
            self._emit(SUBSAMPLED, -1, self.sampled_fraction)

    def _check_process(self) -> None:
        if self._generation != _generation:  # a forked child: its own file, counters from zero
            self._open()

    def __getstate__(self) -> dict:
        """What a spawned process receives: the settings, not this process's counts or events."""
        return {"folder": self.folder, "q_fn": self.q_fn, "features_fn": self.features_fn,
                "diag_every": self.diag_every, "flush_every_s": self.flush_every_s, "_config": self._config,
                "sampled_fraction": self.sampled_fraction}  # fmt: skip

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()

    def _emit(self, kind: int, who: int, a: float = math.nan, b: float = math.nan, c: float = math.nan) -> None:
        self._rows += (time.monotonic(), kind, who, a, b, c)
        if len(self._rows) >= BLOCK * 6:
            self._write_block()

    def _write_block(self) -> None:
        if self._file is None:
            self._file = open(self._path, "ab", buffering=0)  # noqa: SIM115 (kept open; closed by close())
        self._file.write(np.array(self._rows, dtype=np.float64).tobytes())
        self._rows = []

    def _tick(self, calls: int = 1) -> None:
        """Write the cumulative counts now and then (the clock is read every 64 calls)."""
        self._calls += calls
        if self._calls >= self._next_check:
            self._next_check = self._calls + 64
            if time.monotonic() - self._last_flush >= self.flush_every_s:
                self.flush()

    # --- actors ----------------------------------------------------------------------------------
    def produced(self, worker: int, version: int, episode_end: bool = False, reward: float | None = None) -> int:
        """One transition produced by ``worker`` with an action chosen by parameter ``version``; returns its
        tag (keep it with the transition)."""
        if self._generation != _generation:
            self._open()
        seq = self._seq[worker]
        self._seq[worker] = seq + 1
        if episode_end:
            self._episodes[worker] += 1
        if reward is not None and abs(reward) > self._reward_max:
            self._reward_max = abs(reward)
        if not seq & 63:  # this worker's first transition, and every 64th: the clock is read
            self._every_64th(worker, seq)
        # tags.pack, in Python ints (~30 ns; numpy scalars would take ~10 us)
        return (worker << _WORKER_SHIFT) | (version & _VERSION_MASK)

    def _every_64th(self, worker: int, seq: int) -> None:
        if not seq:
            self._workers.append(worker)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def produced_batch(self, worker: int, version: int, episode_ends, rewards=None) -> np.ndarray:
        """``len(episode_ends)`` transitions of one worker's vector of envs, one step each; their tags."""
        self._check_process()
        ends = np.asarray(episode_ends, dtype=bool)
        n = ends.size
        seq = self._seq[worker]
        self._seq[worker] = seq + n
        if not seq and n:
            self._workers.append(worker)
        self._episodes[worker] += int(ends.sum())
        if rewards is not None:
            self._reward_max = max(self._reward_max, float(np.abs(rewards).max(initial=0.0)))
        self._tick()
        return np.full(n, pack(worker, version), dtype=np.int64)

    # --- learner ---------------------------------------------------------------------------------
    def sampled(self, tags, version: int, obs=None) -> None:
        """A batch drawn for an update made by parameter ``version`` (its tags; ``obs``, its states, are
        kept for the Q diagnostics)."""
        if self._generation != _generation:
            self._open()
        if self.sampled_fraction < 1.0 and self._draw() >= self.sampled_fraction:  # not counted (see __init__)
            if obs is not None:
                self._obs = obs
            return
        # copied and folded many batches at a time: one set of numpy calls per ~PENDING elements
        if type(tags) is not np.ndarray or tags.dtype is not _INT64 or tags.ndim != 1:
            tags = np.asarray(tags, dtype=np.int64).ravel()
        start = self._pending_n
        end = start + tags.size
        if end > PENDING:
            self._fold()
            start, end = 0, tags.size
            if end > PENDING:  # a batch larger than the pending array: counted at once
                self._count_sampled(tags, np.full(end, int(version), dtype=np.int64))
                end = 0
        if end > start:
            self._pending[start:end] = tags
            self._pending_n = end
            self._pending_ends.append(end)
            self._pending_versions.append(version)
        if obs is not None:
            self._obs = obs
        self._calls += 1
        if self._calls >= self._next_check:
            self._tick(0)

    def _fold(self) -> None:
        """Count the pending sampled batches: per-worker draws, policy lags."""
        n = self._pending_n
        if not n:
            return
        ends = np.array(self._pending_ends, dtype=np.int64)
        tags = self._pending[:n]
        scratch = self._scratch[:n]  # reused: a fold allocates no array of the pending size
        self._count_workers(np.right_shift(tags, _WORKER_SHIFT, out=scratch))
        acting = np.bitwise_and(tags, _VERSION_MASK, out=scratch)
        sizes = np.diff(ends, prepend=0)
        starts = ends - sizes
        learner = np.array(self._pending_versions, dtype=np.int64) & _VERSION_MASK
        oldest, newest = np.minimum.reduceat(acting, starts), np.maximum.reduceat(acting, starts)
        if (newest <= learner).all():  # no version wrapped (2^28): lag = learner - acting, summed per batch
            self._lag_sum += int(sizes @ learner) - int(acting.sum())
            self._lag_max = max(self._lag_max, int((learner - oldest).max()))
            self._lag_n += n
        else:
            self._count_lags(tags, np.repeat(learner, sizes))
        self._pending_n = 0
        self._pending_ends, self._pending_versions = [], []

    def _count_workers(self, workers: np.ndarray) -> None:
        """Add each worker's draws (``workers``: the worker of each drawn transition; overwritten).

        ``np.bincount`` adds one to one counter per element, so with one or two workers each addition
        waits for the previous one to the same counter (~5 ns an element, 80 us a fold of 16k): one
        worker is counted by its min and max, several by spreading each worker's count over 8 counters
        (element i adds to counter ``8 * worker + i % 8``) and summing them."""
        lo, hi = int(workers.min()), int(workers.max())
        if lo == hi:
            self._sampled[lo] += workers.size
            return
        np.left_shift(workers, 3, out=workers)
        np.bitwise_or(workers, _LANES[: workers.size], out=workers)
        counts = np.bincount(workers, minlength=8 * (hi + 1)).reshape(-1, 8).sum(axis=1)
        self._sampled[: hi + 1] += counts

    def _count_sampled(self, tags: np.ndarray, versions: np.ndarray) -> None:
        """Add drawn transitions (their tags, and the learner version each was drawn for) to the per-worker
        draws and the policy lags."""
        workers = tags >> _WORKER_SHIFT
        self._sampled[: int(workers.max()) + 1] += np.bincount(workers)
        self._count_lags(tags, versions)

    def _count_lags(self, tags: np.ndarray, versions: np.ndarray) -> None:
        lags = (versions - (tags & _VERSION_MASK)) & _VERSION_MASK  # modulo 2^28
        self._lag_sum += int(lags.sum())
        self._lag_max = max(self._lag_max, int(lags.max()))
        self._lag_n += tags.size

    def updated(self, writer: int = 0, td_loss: float | None = None) -> None:
        """``writer`` applied one gradient update (to its copy, or to the shared parameters in place)."""
        if self._generation != _generation:
            self._open()
        updates = self._updates
        count = updates.get(writer, 0) + 1
        updates[writer] = count
        rows = self._rows  # _emit, inlined: this runs once per update
        rows += (monotonic(), UPDATE, writer, count, _NAN if td_loss is None else float(td_loss), _NAN)
        if len(rows) >= _BLOCK_FLOATS:
            self._write_block()
        if not count % self.diag_every:
            if self.q_fn is not None and self._obs is not None:
                self._diagnostics()
            self.flush()  # this process's counts, fresh at the report's log points
        self._calls += 1
        if self._calls >= self._next_check:
            self._tick(0)

    def synced(self, writer: int) -> None:
        """``writer``'s copy now holds the shared parameters. Call it inside the critical section that
        reads them (under the same lock as the writes): the lineage is exact when the events' order is
        the reads' and writes' own order."""
        self._check_process()
        self._emit(SYNC, writer)

    def wrote(self, writer: int) -> None:
        """``writer``'s whole copy replaced the shared parameters. Call it inside the critical section that
        writes them (see :meth:`synced`)."""
        self._check_process()
        self._emit(WRITE, writer)

    @contextlib.contextmanager
    def writing(self, writer: int) -> Iterator[None]:
        """Around an in-place write into the shared parameters (a lock-free optimizer step, a pushed
        gradient): two writes whose spans overlap raced."""
        self._check_process()
        self._emit(WRITE_BEGIN, writer)
        try:
            yield
        finally:
            self._emit(WRITE_END, writer)

    def resident(self, tags) -> None:
        """The tags of every transition in the buffer now (its resident share per worker)."""
        self._check_process()
        counts = np.bincount(worker_of(np.asarray(tags, dtype=np.int64).ravel()), minlength=MAX_WORKERS)
        for w in np.flatnonzero(counts):
            self._emit(RESIDENT, int(w), float(counts[w]))
        self._emit(RESIDENT, -1, float(counts.sum()))  # marks the snapshot complete (workers not listed: 0)

    def _diagnostics(self) -> None:
        from dqnlab.agent.diagnostics import dormant_fractions, srank

        q = np.asarray(self.q_fn(self._obs), dtype=np.float64)
        values = {"q_mean": q.mean(), "q_max": q.max(), "q_min": q.min(), "q_abs_max_current": np.abs(q).max()}
        values.update(zip(("q_p05", "q_p50", "q_p95"), np.quantile(q, [0.05, 0.5, 0.95])))
        if self.features_fn is not None:
            phi = np.asarray(self.features_fn(self._obs), dtype=np.float64)
            values["srank_current"] = srank(phi)
            fractions = dormant_fractions([phi])
            values["dormant_frac_tau0_current"] = fractions["dormant_frac_tau0"]
            values["dormant_frac_tau0.1_current"] = fractions["dormant_frac_tau0.1"]
        for name, v in values.items():
            self._emit(DIAG, DIAG_NAMES.index(name), float(v))

    # --- writing out -------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write this process's cumulative counts and every buffered event to its file."""
        self._check_process()
        self._last_flush = time.monotonic()
        self._fold()
        # cumulative snapshots: the report keeps each process's latest, so one repeated changes nothing
        for w in self._workers:
            self._emit(PRODUCED, w, float(self._seq[w]), float(self._episodes[w]))
        for w in np.flatnonzero(self._sampled):
            self._emit(SAMPLED, int(w), float(self._sampled[w]))
        if self._lag_n:
            self._emit(LAG, -1, float(self._lag_sum), float(self._lag_max), float(self._lag_n))
        if self._reward_max:
            self._emit(REWARD, -1, self._reward_max)
        if self._rows:
            self._write_block()

    def close(self) -> None:
        """Flush, and close this process's file (a later event reopens it)."""
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Audit:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_events(folder: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Every event of every process of a run in time order (ties: file, then file order), and the index
    of the file (the process) each came from."""
    files = sorted(Path(folder).glob("events-*.bin"))
    parts = [_as_events(np.fromfile(f, dtype=RECORD)) for f in files]
    if not parts or not sum(p.size for p in parts):
        raise FileNotFoundError(f"{folder}: no audit events (events-*.bin); did the run call Audit(...).flush()?")
    events = np.concatenate(parts)
    source = np.concatenate([np.full(p.size, i) for i, p in enumerate(parts)])
    order = np.lexsort((np.arange(events.size), source, events["t"]))
    return events[order], source[order]


def _as_events(records: np.ndarray) -> np.ndarray:
    """Written records (:data:`RECORD`) as :data:`EVENT` rows."""
    events = np.empty(records.size, dtype=EVENT)
    for name in EVENT.names:
        events[name] = records[name]
    return events
