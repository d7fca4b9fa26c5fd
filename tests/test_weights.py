"""Single writer, lock-free readers: a torn snapshot is never accepted."""

import multiprocessing as mp

import numpy as np
import pytest

from dqnlab.engine.shared import SharedArena
from dqnlab.engine.weights import TornReadError, WeightBroadcast, seqlock_is_safe

N_PARAMS = 100_000  # large enough that a copy takes tens of microseconds and can be torn


WRITES = 20_000


def _writer(weights: WeightBroadcast, done) -> None:
    buf = np.empty(N_PARAMS, dtype=np.float32)
    for version in range(1, WRITES + 1):
        buf.fill(version)  # checksum: every element equals the version
        weights.publish(buf, version)
    done.value = 1


def _reader(weights: WeightBroadcast, done, results, slot: int, raw_view: np.ndarray) -> None:
    out = np.empty(N_PARAMS, dtype=np.float32)
    last, reads, bad, raw_torn, monotone = -1, 0, 0, 0, True
    while True:  # at least one read, then until the writer is done
        finished = done.value
        version = weights.read_into(out)
        reads += 1
        if not (out[0] == version and out[-1] == version and (out == version).all()):
            bad += 1
        monotone &= version >= last
        last = version
        raw = raw_view.copy()  # the same copy without the protocol: how often it would have torn (printed)
        raw_torn += int((raw != raw[0]).any())
        if finished:
            break
    results[slot] = (reads, bad, raw_torn, int(monotone))


@pytest.mark.parametrize("lock_free", [True, False], ids=["seqlock", "locked (weakly ordered CPUs)"])
def test_readers_never_accept_a_torn_snapshot_and_see_monotone_versions(leak_guard, lock_free):
    """Two readers copy while one writer publishes 20,000 versions: no accepted copy is torn and the
    versions each reader sees never go back. How often reads overlapped writes is up to the scheduler
    (printed); that an overlap is caught and retried is proved deterministically below."""
    arena = SharedArena()
    weights = WeightBroadcast(arena, N_PARAMS, lock_free=lock_free)
    arena.add("results", (2, 4), np.int64)
    arrays = arena.allocate()
    ctx = mp.get_context("fork")
    done = ctx.Value("i", 0)
    procs = [ctx.Process(target=_writer, args=(weights, done))]
    procs += [
        ctx.Process(target=_reader, args=(weights, done, arrays["results"], i, arrays["weights.params"])) for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)  # a hang detector
    assert all(p.exitcode == 0 for p in procs)
    reads, bad, raw_torn, monotone = arrays["results"].sum(axis=0)
    print(f"reads={reads} unprotected torn copies={raw_torn}")
    assert reads >= 2 and bad == 0, f"{bad} torn snapshots accepted"
    assert monotone == 2


class _WriterMidCopy(np.ndarray):
    """A reader's buffer whose first copy is interrupted halfway by ``publish``: the first half holds the
    old snapshot, the second the new one (a torn copy, made on purpose)."""

    def __setitem__(self, key, value):
        if not self.interrupted:
            self.interrupted = True
            half = self.shape[0] // 2
            np.ndarray.__setitem__(self, slice(0, half), value[:half])
            self.writer()
            np.ndarray.__setitem__(self, slice(half, None), value[half:])
            return
        np.ndarray.__setitem__(self, key, value)


def test_a_copy_torn_by_a_write_is_retried_and_a_copy_during_a_write_waits():
    arena = SharedArena()
    weights = WeightBroadcast(arena, 8, lock_free=True)
    arena.allocate()
    weights.publish(np.full(8, 1.0, np.float32), version=1)
    out = np.zeros(8, np.float32).view(_WriterMidCopy)
    out.interrupted = False
    out.writer = lambda: weights.publish(np.full(8, 2.0, np.float32), version=2)
    assert weights.read_into(out) == 2  # the torn copy (1, 1, 1, 1, 2, 2, 2, 2) was refused and retried
    np.testing.assert_array_equal(np.asarray(out), np.full(8, 2.0))
    weights._seq[0] += 1  # a writer inside its write: the sequence is odd
    with pytest.raises(TornReadError):
        weights.read_into(np.zeros(8, np.float32), max_retries=200)  # never a copy while a write is in progress
    weights._seq[0] += 1
    assert weights.read_into(np.zeros(8, np.float32)) == 2


def test_version_is_published_with_the_parameters():
    arena = SharedArena()
    weights = WeightBroadcast(arena, 3)
    arena.allocate()
    weights.publish(np.array([1, 2, 3], dtype=np.float32), version=7)
    out = np.zeros(3, dtype=np.float32)
    assert weights.read_into(out) == 7
    np.testing.assert_array_equal(out, [1, 2, 3])


def test_the_lock_free_seqlock_is_used_only_on_cpus_with_total_store_order(monkeypatch):
    import threading

    assert seqlock_is_safe("x86_64") and seqlock_is_safe("AMD64")
    assert not seqlock_is_safe("aarch64") and not seqlock_is_safe("ppc64le")
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    arena = SharedArena()
    weights = WeightBroadcast(arena, 3)
    arena.allocate()
    assert not weights.lock_free
    weights.publish(np.ones(3, dtype=np.float32), version=1)
    got = []
    with weights._lock:  # a writer inside its critical section: the reader waits instead of racing it
        reader = threading.Thread(target=lambda: got.append(weights.read_into(np.zeros(3, dtype=np.float32))))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and not got
    reader.join(5)
    assert got == [1]
