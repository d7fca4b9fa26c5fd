"""The recorder a user adds to their own parallel DQN: a few calls where transitions are produced,
sampled and learned from, and where parameters are read and written. Every process that calls it
(forked, spawned, or started any other way) opens the same folder and appends its own event file;
:mod:`dqnlab.audit.report` merges them, in time order, into the measurements dqnlab's engine reports.

Hot path: numpy only, no lock, no inter-process traffic, no system call but the file's append (once a
second). Counts (transitions, episodes, draws, lags, updates) are kept in the process and recorded as
cumulative snapshots, TD losses as sums since the previous record, at the report's log points (every
``diag_every_updates`` updates); what needs an order across processes
(parameter reads and writes, and from a process's first read or write on, each of its updates) is one
48-byte record each (six float64: :data:`RECORD`). Records are buffered as a flat list of floats and
appended to the process's file at most every ``flush_every_s`` seconds, when a block fills, and on
:meth:`Audit.flush`. Timestamps are ``time.monotonic()``, one clock for every process of a Linux machine.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import multiprocessing.util
import numbers
import os
import random
import re
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from dqnlab.audit.events import (
    CONFIG,
    DIAG,
    DIAG_NAMES,
    LAG,
    LOSS,
    PRODUCED,
    RESIDENT,
    REWARD,
    SAMPLED,
    SUBSAMPLED,
    SYNC,
    UPDATE,
    UPDATES,
    WRITE,
    WRITE_BEGIN,
    WRITE_END,
)
from dqnlab.audit.folding import Lags, count_sampled, fold
from dqnlab.audit.tags import MAX_WORKERS, VERSION_BITS, VERSION_MOD, pack, worker_of

BLOCK = 4096
_NAN = math.nan
PENDING = 32768
"""Sampled tags held before they are counted (256 KiB; batches of 128: at the log points, every 250
updates by default, or every 256 batches)."""
_BASES = [w << VERSION_BITS for w in range(MAX_WORKERS)]
"""Worker w's tag for version 0 (its tags are ``_BASES[w] + version``)."""
_LIVE: weakref.WeakSet = weakref.WeakSet()
"""Every Audit of this process: in a forked child each reopens at once (``os.register_at_fork``), with
its own file and counters from zero, so no call checks which process it runs in."""


def _after_fork_in_child() -> None:
    for audit in list(_LIVE):
        audit._open()


os.register_at_fork(after_in_child=_after_fork_in_child)


def close_live(folder: str | Path | None = None) -> None:
    """Close (flush) every Audit of this process (writing into ``folder``, if given): what a process
    still buffers (up to ``flush_every_s`` of counts) is then in its file."""
    for audit in list(_LIVE):
        if audit._pid == os.getpid() and (folder is None or Path(folder).resolve() == audit.folder.resolve()):
            with contextlib.suppress(Exception):  # at exit: one failing file must not keep the others unwritten
                audit.close()


# A process's buffered events are written when it exits normally: the main process (and a spawned child)
# through atexit; a child forked by multiprocessing ends with os._exit, after its finalizers, so each such
# child registers one (multiprocessing clears the finalizers a child inherits before its after-fork hooks).
atexit.register(close_live)


_FILE_NAME = re.compile(r"events-(\d+)\.(\d+|x)-g(\d+)\.(\d+|x)-[0-9a-f]+\.bin")
"""An event file's name: its process (id.start time) and that process's group (id.its leader's start time),
then a random suffix. A start time (clock ticks since boot, ``/proc/<pid>/stat``; ``x`` where unknown) tells a
process from a later one given the same id."""


def _start_time(pid: int) -> str:
    """``pid``'s start time in clock ticks since boot, or ``x`` (no such process, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()  # field 22; the name before it may hold ")"
    except (OSError, IndexError):
        return "x"


def _file_name(pid: int) -> str:
    group = os.getpgid(0)
    return f"events-{pid}.{_start_time(pid)}-g{group}.{_start_time(group)}-{uuid.uuid4().hex[:8]}.bin"


def files_of_an_earlier_run(folder: Path) -> list[Path]:
    """The event files in ``folder`` if an earlier run left them, else []: files whose processes have all ended,
    none in this process's process group. A run's processes are alive while it records, or share the group of
    the process that started them (multiprocessing's and ``subprocess``'s children stay in their parent's
    group; an interactive shell gives each command line its own). Not told apart: runs one after the other
    from one script (they share its group) or in one container whose first process is the run (group 1),
    and runs at once. Refused although of one run: processes that each started a session of their own
    (torchrun's workers) once all have ended, e.g. a restart: give it a fresh folder. A file named otherwise
    (written before 2026-12-07) turns the check off."""
    files = sorted(folder.glob("events-*.bin"))
    group = os.getpgid(0)
    mine = (str(group), _start_time(group))
    for path in files:
        match = _FILE_NAME.fullmatch(path.name)
        if match is None or (match[3], match[4]) == mine or _alive(int(match[1]), match[2]):
            return []
    return files


def _alive(pid: int, started: str) -> bool:
    """Whether process ``pid``, started at ``started`` (``x``: unknown, any start), is still running."""
    now = _start_time(pid)
    if now != "x":
        return started in (now, "x")
    if os.path.exists("/proc/self/stat"):
        return False
    try:  # no /proc: the kernel says whether the id is taken
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


class _ExitFlushInForkedChildren:
    def __call__(self, _=None) -> None:
        multiprocessing.util.Finalize(None, close_live, exitpriority=100)


_EXIT_FLUSH = _ExitFlushInForkedChildren()
multiprocessing.util.register_after_fork(_EXIT_FLUSH, _ExitFlushInForkedChildren.__call__)


class Audit:
    """Record one training run's events into ``folder`` (created; every process of the run opens the
    same folder with the same arguments; one folder holds one run: the report reads every event file in
    it, and a folder an earlier run left is refused, see :func:`files_of_an_earlier_run`).

    - actors: ``tag = audit.produced(worker, version, episode_end)`` (or :meth:`produced_batch` for a
      vector of envs); keep ``tag`` beside the transition in your buffer;
    - learner: ``audit.sampled(batch_tags, version, obs=batch_obs, actions=batch_actions)`` when a batch is drawn,
      ``audit.updated(writer, td_loss)`` after each gradient update;
    - several writers: ``audit.synced(writer)`` after a copy takes the shared parameters,
      ``audit.wrote(writer)`` after it writes its whole copy back, or ``with audit.writing(writer):``
      around an in-place write (lock-free optimizer steps, pushed gradients);
    - now and then: ``audit.resident(tags_in_buffer)``.

    A process that never reads or writes the shared parameters (one learner) has its updates counted, not
    recorded one by one: where other processes write copies back, wrap each in-place step in
    :meth:`writing` so its order among their writes is exact (otherwise the report places those updates at
    their log points and says the lost count is approximate).

    ``q_fn(obs) -> (N, A)`` (and ``features_fn(obs) -> (N, d)``, the penultimate layer) turn on the Q
    statistics and collapse signs, measured every ``diag_every_updates`` updates on the latest
    sampled batch (current data). ``gamma``/``reward_bound`` set what the env can pay (soft
    divergence); ``learning_starts`` (env steps) is subtracted in the realised UTD, as dqnlab does.

    ``sampled_fraction`` (0 < f <= 1, default 1: every batch) counts each sampled batch with
    probability f, drawn independently per batch, for a loop where even the ~0.4 us of :meth:`sampled`
    shows: the sampled shares and the mean policy lag are then unbiased estimates, the max lag is the
    max over the counted batches, and the report says so. A batch is counted or not as a whole, so a
    share's standard error against the full count is at most sqrt(p (1 - p) (1 - f) / N) for N batches
    counted, whatever the replay draws (a sharded replay whose batches each come from one worker
    reaches it); only when the draws within a batch are independent (uniform replay) is it sqrt(B)
    times smaller for batches of B. The report prints the bound. Everything else (produced, resident,
    updates, UTD, lost updates, Q) stays exact."""

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
        earlier = files_of_an_earlier_run(self.folder)
        if earlier:
            raise ValueError(f"Audit({str(folder)!r}): the folder holds {len(earlier)} event file(s) of an earlier run "
                             "(events-*.bin: every process that wrote them has ended, none in this process's group); "
                             "the report reads every event file in a folder, so one folder holds one run: give a "
                             "fresh folder, or remove those files")  # fmt: skip
        self.q_fn, self.features_fn = q_fn, features_fn
        self.diag_every = max(1, int(diag_every_updates))
        self.flush_every_s = flush_every_s
        self._pid = None
        self._config = (gamma, np.nan if reward_bound is None else float(reward_bound), float(learning_starts))
        self._open()
        _LIVE.add(self)

    # --- per process ------------------------------------------------------------------------------
    def _open(self) -> None:
        """A file and counters of this process's own (a forked child reopens as it starts)."""
        self._pid = os.getpid()
        self._path = self.folder / _file_name(self._pid)
        self._rows: list[float] = []  # events not yet written, 6 floats each (extend: ~0.15 us; a numpy row ~5)
        self._file = None  # opened at the first block written (unbuffered: a forked child writes nothing twice)
        # per-worker counters as Python lists: a list item costs ~30 ns, a numpy scalar ~100 ns and more
        self._seq = [0] * MAX_WORKERS  # transitions this process produced per worker
        self._episodes = [0] * MAX_WORKERS
        self._workers: list[int] = []  # the workers this process produced for, in order of their first transition
        self._sampled = np.zeros(MAX_WORKERS, dtype=np.int64)
        self._lag_sum, self._lag_max, self._lag_n = 0, 0, 0
        self._batches = 0  # sampled batches counted (folded)
        # sampled batches' tags not counted yet, copied into one preallocated array (a copy into a slice
        # is ~0.5 us; a list of 64 arrays concatenated at the fold cost ~3 us a batch), with each batch's
        # end and learner version in two lists
        self._pending = np.empty(PENDING, dtype=np.int64)
        self._pending_view = memoryview(self._pending)  # a slice assignment into it: no numpy call, ~0.1 us
        self._scratch = np.empty(PENDING, dtype=np.int64)  # the fold's workers, then acting versions (no temporaries)
        self._pending_n = 0
        self._pending_ends: list[int] = []  # each pending batch's end in the pending array
        self._pending_versions: list[int] = []  # ... and the learner version it was drawn for
        self._updates: dict[int, int] = {}  # writer -> its updates in this process (the current one's: _count)
        self._log_points: dict[int, int] = {}  # writer -> its update count at its next log point
        self._writer, self._count, self._next_log = 0, 0, self.diag_every  # the current writer
        self._recorded: dict[int, int] = {}  # writer -> its updates the records already hold
        self._ordered = False  # this process read or wrote the parameters: each update is one record from now on
        self._loss_sum, self._loss_n = 0.0, 0  # TD losses given since the last LOSS record
        self._reward_max = 0.0
        self._last_flush = time.monotonic()
        self._calls = 0
        self._next_check = 64
        self._obs = self._actions = None
        # counted batches drawn by a per-process generator (seeded by the pid: a forked child draws its own)
        self._draw = random.Random(self._pid).random
        self._emit(CONFIG, -1, *self._config)
        if self.sampled_fraction < 1.0:
            self._emit(SUBSAMPLED, -1, self.sampled_fraction)

    def __getstate__(self) -> dict:
        """What a spawned process receives: the settings, not this process's counts or events."""
        return {"folder": self.folder, "q_fn": self.q_fn, "features_fn": self.features_fn,
                "diag_every": self.diag_every, "flush_every_s": self.flush_every_s, "_config": self._config,
                "sampled_fraction": self.sampled_fraction}  # fmt: skip

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()
        _LIVE.add(self)

    def _emit(self, kind: int, who: int, a: float = math.nan, b: float = math.nan, c: float = math.nan) -> None:
        self._rows += (time.monotonic(), kind, who, a, b, c)
        if len(self._rows) >= BLOCK * 6:
            self._write_block()

    def _write_block(self) -> None:
        if not self._rows:
            return
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
        # Only operations a training loop keeps hot itself (int add and compare, list items, attributes):
        # inside a loop, code the loop does not run is cold at every call (bit operations cost ~25 L1
        # instruction-cache misses a step, measured with cachegrind)
        seq = self._seq[worker]
        self._seq[worker] = seq + 1
        if seq == 0:
            self._workers.append(worker)
        if episode_end:
            self._episodes[worker] += 1
        if reward is not None and abs(reward) > self._reward_max:
            self._reward_max = abs(reward)
        calls = self._calls + 1
        self._calls = calls
        if calls >= self._next_check:  # every 64 calls: the clock is read
            self._tick(0)
        if 0 <= version < VERSION_MOD:  # tags.pack, in Python ints (numpy scalars would take ~10 us)
            return _BASES[worker] + version
        return _BASES[worker] + version % VERSION_MOD

    def produced_batch(self, worker: int, version: int, episode_ends, rewards=None) -> np.ndarray:
        """``len(episode_ends)`` transitions of one worker's vector of envs, one step each; their tags."""
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
    def sampled(self, tags, version: int, obs=None, actions=None) -> None:
        """A batch drawn for an update made by parameter ``version`` (its tags; ``obs``, its states, and
        ``actions``, its actions, are kept for the Q diagnostics: max |Q| needs the states, the statistics
        of Q(s,a) the actions too)."""
        if self.sampled_fraction < 1.0 and self._draw() >= self.sampled_fraction:  # not counted (see __init__)
            if obs is not None:
                self._obs, self._actions = obs, actions
            return
        # copied, then counted many batches at a time (one set of numpy calls per fold, :meth:`_fold`)
        start = self._pending_n
        try:  # a 1-D int64 array that fits: copied by the buffer protocol (any other input raises)
            end = start + len(tags)
            self._pending_view[start:end] = tags
        except (TypeError, ValueError):  # another dtype or shape, a list, or the pending array full
            self._sampled_any(tags, version)
        else:
            if end > start:
                self._pending_n = end
                self._pending_ends.append(end)
                self._pending_versions.append(version)
        if obs is not None:
            self._obs, self._actions = obs, actions
        self._calls += 1
        if self._calls >= self._next_check:
            self._tick(0)

    def _sampled_any(self, tags, version: int) -> None:
        """:meth:`sampled`'s tags of any array-like: as one int64 vector, folded first if they do not fit."""
        tags = np.asarray(tags, dtype=np.int64).ravel()
        start = self._pending_n
        end = start + tags.size
        if end > PENDING:
            self._fold()
            start, end = 0, tags.size
            if end > PENDING:  # a batch larger than the pending array: counted at once
                self._add_lags(count_sampled(tags, np.full(end, int(version), dtype=np.int64), self._sampled))
                self._batches += 1
                return
        if end > start:
            self._pending[start:end] = tags
            self._pending_n = end
            self._pending_ends.append(end)
            self._pending_versions.append(version)

    def _fold(self) -> None:
        """Count the pending sampled batches: per-worker draws, policy lags."""
        n = self._pending_n
        if not n:
            return
        self._add_lags(fold(self._pending[:n], self._pending_ends, self._pending_versions, self._sampled,
                            self._scratch[:n]))  # fmt: skip
        self._pending_n = 0
        self._batches += len(self._pending_ends)
        self._pending_ends, self._pending_versions = [], []

    def _add_lags(self, lags: Lags) -> None:
        self._lag_sum += lags.total
        self._lag_max = max(self._lag_max, lags.max)
        self._lag_n += lags.n

    def updated(self, writer: int = 0, td_loss: float | None = None) -> None:
        """``writer`` applied one gradient update (to its copy, or to the shared parameters in place).

        Counted, like transitions, until this process first reads or writes the parameters
        (:meth:`synced`, :meth:`wrote`, :meth:`writing`): one learner's updates need no order among
        other processes' writes. From then on each update is one record, in its order among the reads and
        writes (the lineage of lost updates is exact)."""
        if writer == self._writer:  # the writer of the previous call (one learner: always)
            count = self._count + 1
            self._count = count
        else:
            count = self._switch_writer(writer)
        if not self._ordered and td_loss is not None:
            loss = float(td_loss)
            if loss == loss:  # a NaN loss counts as not given, as in an UPDATE record
                self._loss_sum += loss
                self._loss_n += 1
        log_point = count >= self._next_log
        if log_point:  # Q on current data, then every count (recorded, not written), the updates last
            self._next_log = count + self.diag_every
            if self.q_fn is not None and self._obs is not None:
                self._diagnostics()
            self._record_counts()
        if self._ordered:
            self._recorded[writer] = count
            self._emit(UPDATE, writer, count, _NAN if td_loss is None else float(td_loss), 1.0 if log_point else _NAN)
        elif log_point:
            self._record_updates()
        calls = self._calls + 1
        self._calls = calls
        if calls >= self._next_check:
            self._tick(0)

    def _switch_writer(self, writer: int) -> int:
        """Park the current writer's count and log point, take ``writer``'s; its count after this update."""
        self._updates[self._writer] = self._count
        self._log_points[self._writer] = self._next_log
        self._writer = writer
        self._count = self._updates.get(writer, 0) + 1
        self._next_log = self._log_points.get(writer, self.diag_every)
        return self._count

    def _all_updates(self) -> dict[int, int]:
        """Each writer's updates in this process."""
        if self._count:
            self._updates[self._writer] = self._count
        return self._updates

    def _order(self) -> None:
        """This process reads or writes the parameters: its updates so far are recorded, each later one
        gets its own record."""
        if not self._ordered:
            self._snapshot()
            self._ordered = True

    def synced(self, writer: int) -> None:
        """``writer``'s copy now holds the shared parameters. Call it inside the critical section that
        reads them (under the same lock as the writes): the lineage is exact when the events' order is
        the reads' and writes' own order."""
        self._order()
        self._emit(SYNC, writer)

    def wrote(self, writer: int) -> None:
        """``writer``'s whole copy replaced the shared parameters. Call it inside the critical section that
        writes them (see :meth:`synced`)."""
        self._order()
        self._emit(WRITE, writer)

    @contextlib.contextmanager
    def writing(self, writer: int) -> Iterator[None]:
        """Around an in-place write into the shared parameters (a lock-free optimizer step, a pushed
        gradient): two writes whose spans overlap raced."""
        self._order()
        self._emit(WRITE_BEGIN, writer)
        try:
            yield
        finally:
            self._emit(WRITE_END, writer)

    def resident(self, tags) -> None:
        """The tags of every transition in the buffer now (its resident share per worker)."""
        counts = np.bincount(worker_of(np.asarray(tags, dtype=np.int64).ravel()), minlength=MAX_WORKERS)
        for w in np.flatnonzero(counts):
            self._emit(RESIDENT, int(w), float(counts[w]))
        self._emit(RESIDENT, -1, float(counts.sum()))  # marks the snapshot complete (workers not listed: 0)

    def _diagnostics(self) -> None:
        from dqnlab.agent.diagnostics import batch_statistics

        features = None if self.features_fn is None else self.features_fn(self._obs)
        for name, v in batch_statistics(self.q_fn(self._obs), features, self._actions).items():
            self._emit(DIAG, DIAG_NAMES.index(name), v)

    # --- writing out -------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write this process's cumulative counts and every buffered event to its file."""
        self._last_flush = time.monotonic()
        self._snapshot()
        self._write_block()

    def _snapshot(self) -> None:
        """Record this process's cumulative counts, its updates last (buffered; :meth:`flush` writes them)."""
        self._record_counts()
        self._record_updates()

    def _record_counts(self) -> None:
        """Record this process's cumulative counts but the updates: the report closes a timeline row at
        the update record that ends a snapshot, so these come first (else each row is one snapshot late)."""
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
        if self.sampled_fraction < 1.0:
            self._emit(SUBSAMPLED, -1, self.sampled_fraction, float(self._batches))

    def _record_updates(self) -> None:
        """Each writer's counted updates since its last record, and the TD losses given with them."""
        if self._loss_n:  # before the counts: the report closes a row at an UPDATES record
            self._emit(LOSS, -1, self._loss_sum, float(self._loss_n))
            self._loss_sum, self._loss_n = 0.0, 0
        recorded = self._recorded
        for w, count in self._all_updates().items():
            if recorded.get(w, 0) != count:
                recorded[w] = count
                self._emit(UPDATES, w, float(count))

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
