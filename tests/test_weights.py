"""Single writer, lock-free readers: a torn snapshot is never accepted."""

import multiprocessing as mp
import time

import numpy as np
import pytest

from dqnlab.engine.shared import SharedArena
from dqnlab.engine.weights import WeightBroadcast, seqlock_is_safe

N_PARAMS = 100_000  # large enough that a copy takes tens of microseconds and can be torn


def _writer(weights: WeightBroadcast, stop) -> None:
    buf = np.empty(N_PARAMS, dtype=np.float32)
    version = 0
    while not stop.value:
        version += 1
        buf.fill(version)  # checksum: every element equals the version
        weights.publish(buf, version)
        if version % 2 == 0:
            # every other write, a pause: back-to-back writes keep tearing reads, and the pauses leave
            # consistent windows, so the readers get enough accepted copies to mean something even
            # when 3 processes share 2 cores (without them one CI run accepted only 9 copies in 1.5 s)
            time.sleep(5e-5)


def _reader(weights: WeightBroadcast, stop, results, slot: int, raw_view: np.ndarray) -> None:
    out = np.empty(N_PARAMS, dtype=np.float32)
    last, reads, bad, raw_torn, monotone = -1, 0, 0, 0, True
    while not stop.value:
        version = weights.read_into(out)
        reads += 1
        if not (out[0] == version and out[-1] == version and (out == version).all()):
            bad += 1
        monotone &= version >= last
        last = version
        raw = raw_view.copy()  # the same copy without the protocol, to show the stress can tear
        raw_torn += int((raw != raw[0]).any())
        results[slot] = (reads, bad, raw_torn, int(monotone))  # progress, read by the test as it runs


@pytest.mark.parametrize("lock_free", [True, False], ids=["seqlock", "locked (weakly ordered CPUs)"])
def test_readers_never_accept_a_torn_snapshot_and_see_monotone_versions(leak_guard, lock_free):
    arena = SharedArena()
    weights = WeightBroadcast(arena, N_PARAMS, lock_free=lock_free)
    arena.add("results", (2, 4), np.int64)
    arrays = arena.allocate()
    ctx = mp.get_context("fork")
    stop = ctx.Value("i", 0)
    procs = [ctx.Process(target=_writer, args=(weights, stop))]
    procs += [
        ctx.Process(target=_reader, args=(weights, stop, arrays["results"], i, arrays["weights.params"])) for i in range(2)
    ]
    for p in procs:
        p.start()
    # run at least 1.5 s, then until the unprotected copy has torn (proof that reads overlapped writes)
    # and enough reads were made, within a bound: on a loaded 2-core machine the overlap can take longer
    start = time.monotonic()
    while time.monotonic() - start < 30:
        time.sleep(0.1)
        progress = arrays["results"].sum(axis=0)
        if time.monotonic() - start > 1.5 and progress[0] > 100 and progress[2] > 0:
            break
    stop.value = 1
    for p in procs:
        p.join(30)
    assert all(p.exitcode == 0 for p in procs)
    reads, bad, raw_torn, monotone = arrays["results"].sum(axis=0)
    assert reads > 100
    assert bad == 0, f"{bad} torn snapshots accepted"
    assert monotone == 2
    print(f"reads={reads} unprotected torn copies={raw_torn}")
    # proof that reads and writes overlapped in this very run: the same copy without the protocol tore
    assert raw_torn > 0, "no unprotected copy tore: the stress did not overlap reads with writes"


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
