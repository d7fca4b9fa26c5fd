"""The shared ring: nothing lost or duplicated under concurrent writers; accounting is exact."""

import multiprocessing as mp

import numpy as np

from dqnlab.engine.limiter import RateLimiter
from dqnlab.engine.replay import GO, STOP, WAIT, SharedReplay
from dqnlab.engine.shared import SharedArena


def _make(capacity: int, workers: int, total: int, utd: float = 1.0, strict: bool = False,
          replicas: int = 1) -> SharedReplay:  # fmt: skip
    arena = SharedArena()
    limiter = RateLimiter(utd=utd, learning_starts=0, slack=1.0, strict=strict)
    replay = SharedReplay(arena, mp.get_context("fork").Lock(), capacity, 2, workers, limiter, total, replicas)
    arena.allocate()
    replay.bind()
    return replay


def _resident(replay: SharedReplay, column: str) -> np.ndarray:
    """A column of the resident transitions (read after the writers are done: no lock needed)."""
    return replay._a[column][: replay.size].copy()


def _commit(replay: SharedReplay, worker: int, n: int, version: int = 0) -> int:
    """One actor step of ``n`` envs per replica; replica k's observations hold (worker, k), its actions
    the transitions' sequence numbers (which slot a sampled row came from)."""
    k = replay.replicas
    obs = np.empty((k, n, 2), dtype=np.float32)
    obs[..., 0] = worker
    obs[..., 1] = np.arange(k)[:, None]
    z = np.zeros((k, n), dtype=bool)
    seq = np.broadcast_to(replay.env_steps + np.arange(n), (k, n))
    return replay.commit(worker, obs, seq, np.ones((k, n), np.float32), obs, z, z,
                         np.zeros((k, n), np.int64), version, [], claim_next=n)  # fmt: skip


def _writer(replay: SharedReplay, worker: int, n: int) -> None:
    code = replay.claim(n)
    while code == GO:
        code = _commit(replay, worker, n)
    assert code == STOP


def _run_writers(replay: SharedReplay, workers: int, n: int) -> None:
    """``workers`` forked writers committing ``n`` steps at a time until the budget is spent."""
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(replay, w, n)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0] * workers


def test_concurrent_writers_lose_and_duplicate_nothing(leak_guard):
    total, workers = 6000, 3
    replay = _make(capacity=10_000, workers=workers, total=total)
    _run_writers(replay, workers, 2)
    assert replay.env_steps == total
    np.testing.assert_array_equal(np.sort(_resident(replay, "seq")), np.arange(total))
    produced = replay.produced()
    assert produced.sum() == total
    np.testing.assert_array_equal(produced, replay.resident())
    # each slot's payload belongs to the worker recorded for it
    workers_col = _resident(replay, "worker")
    np.testing.assert_array_equal(_resident(replay, "obs")[:, 0, 0], workers_col)
    np.testing.assert_array_equal(np.bincount(workers_col, minlength=workers), produced)


def test_concurrent_writers_while_the_ring_wraps_keep_the_newest_and_exact_counts(leak_guard):
    total, workers, capacity = 9000, 3, 1000  # the ring wraps 9 times under three writers, two replicas
    replay = _make(capacity=capacity, workers=workers, total=total, replicas=2)
    _run_writers(replay, workers, 3)
    assert replay.env_steps == total and replay.produced().sum() == total
    # exactly the newest `capacity` transitions are resident, each once, in slot seq % capacity
    seqs = _resident(replay, "seq")
    np.testing.assert_array_equal(np.sort(seqs), np.arange(total - capacity, total))
    np.testing.assert_array_equal(seqs % capacity, np.arange(capacity))
    workers_col = _resident(replay, "worker")
    np.testing.assert_array_equal(replay.resident(), np.bincount(workers_col, minlength=workers))
    obs = _resident(replay, "obs")
    for k in range(2):  # no torn payload: every replica's row holds its own (worker, replica)
        np.testing.assert_array_equal(obs[:, k, 0], workers_col)
        np.testing.assert_array_equal(obs[:, k, 1], k)
    assert (replay.resident() >= 0).all()


def test_ring_overwrites_oldest_and_keeps_resident_counts():
    replay = _make(capacity=10, workers=2, total=100)
    for step in range(8):
        replay.claim(3)
        _commit(replay, step % 2, 3)
    assert replay.env_steps == 24 and replay.size == 10
    np.testing.assert_array_equal(np.sort(_resident(replay, "seq")), np.arange(14, 24))
    resident = replay.resident()
    assert resident.sum() == 10
    np.testing.assert_array_equal(resident, np.bincount(_resident(replay, "worker"), minlength=2))
    np.testing.assert_array_equal(replay.produced(), [12, 12])


def test_budget_is_claimed_exactly_and_then_stops():
    replay = _make(capacity=100, workers=1, total=6)
    assert replay.claim(3) == GO and _commit(replay, 0, 3) == GO
    assert _commit(replay, 0, 3) == STOP
    assert replay.env_steps == 6 and replay.claim(3) == STOP


def test_strict_limiter_makes_actors_wait_until_the_learner_catches_up():
    replay = _make(capacity=100, workers=1, total=100, utd=1.0, strict=True)
    assert replay.claim(1) == GO
    assert _commit(replay, 0, 1) == GO  # d = 1 - 0 <= slack at claim time
    assert _commit(replay, 0, 1) == WAIT  # d = 2 > slack
    replay.set_updates(1)
    assert replay.claim(1) == GO


def test_uniform_sampling_counts_draws_per_worker():
    replay = _make(capacity=1000, workers=2, total=1000)
    replay.claim(300)
    _commit(replay, 0, 300)
    replay.claim(100)
    _commit(replay, 1, 100)
    rngs = [np.random.default_rng(0)]
    for _ in range(200):
        replay.sample(rngs, 64)
    share = replay.sampled[0] / replay.sampled[0].sum()
    assert abs(share[0] - 0.75) < 0.02


def test_each_replica_samples_its_own_transitions_with_its_own_generator():
    replay = _make(capacity=1000, workers=2, total=1000, replicas=3)
    for w in (0, 1):
        replay.claim(200)
        _commit(replay, w, 200)
    rngs = [np.random.default_rng(k) for k in range(3)]
    batch = replay.sample(rngs, 64)
    assert batch.obs.shape == (3, 64, 2) and batch.worker.shape == (3, 64)
    np.testing.assert_array_equal(batch.obs[..., 1], np.arange(3)[:, None].repeat(64, 1))  # replica k's own rows
    np.testing.assert_array_equal(batch.obs[..., 0], batch.worker)  # tags match the rows drawn
    again = _make(capacity=1000, workers=2, total=1000, replicas=1)
    for w in (0, 1):
        again.claim(200)
        _commit(again, w, 200)
    alone = again.sample([np.random.default_rng(2)], 64)  # replica 2's generator, in a one-replica replay
    np.testing.assert_array_equal(alone.actions[0], batch.actions[2])  # the same draws (actions hold seq)
    assert replay.sampled.shape == (3, 2) and (replay.sampled.sum(axis=1) == 64).all()


def test_wait_backoff_stays_bounded_for_long_waits():
    from dqnlab.engine.replay import wait_backoff

    assert wait_backoff(10**6) <= 1e-3


def test_episodes_beyond_the_log_ring_are_counted_and_never_silently_dropped():
    from dqnlab.engine.replay import EPISODE_LOG_CAPACITY

    replay = _make(capacity=100, workers=2, total=10**9, replicas=2)
    z = np.zeros((2, 1), dtype=bool)
    obs = np.zeros((2, 1, 2), np.float32)
    finished = 0
    for step in range(EPISODE_LOG_CAPACITY + 1000):  # worker 1 finishes one episode per replica a step
        worker = 1 if step % 4 else 0
        replay.claim(1)
        replay.commit(worker, obs, np.zeros((2, 1), np.int64), np.ones((2, 1), np.float32), obs, z, z,
                      np.zeros((2, 1), np.int64), 0, [(0, float(step), 7), (1, 1.0, 3)], claim_next=0)  # fmt: skip
        finished += 2
    read = replay.new_episodes()
    assert len(read) == EPISODE_LOG_CAPACITY  # the ring's records, the newest ones
    assert read[-2][2] == float(EPISODE_LOG_CAPACITY + 999)  # replica 0 of the last step (replica 1 comes after)
    assert replay.episodes_unread == finished - EPISODE_LOG_CAPACITY
    counts = replay.episodes_finished()
    assert counts.sum() == finished  # exact, per replica and worker
    np.testing.assert_array_equal(counts[:, 0], [(EPISODE_LOG_CAPACITY + 1000) // 4] * 2)
    assert replay.new_episodes() == [] and replay.episodes_unread == finished - EPISODE_LOG_CAPACITY
