"""Who writes the parameters: the single learner loses nothing; the naive setups are measured."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from small import small_config

from dqnlab.config import Config, ConfigError
from dqnlab.engine import train
from dqnlab.engine.naive import LineageBook, lost_updates
from dqnlab.metrics import LOST_UPDATE_FRAC, LOST_UPDATES, RACED_WRITE_FRAC, TARGET_UPDATES, UPDATES


def test_lost_updates_are_counted_exactly_on_a_deterministic_toy():
    shared = np.zeros(8, dtype=bool)  # update ids 0..7
    a, b = LineageBook(shared), LineageBook(shared)
    a.read()
    b.read()  # both copies start from the same (empty) vector
    for uid in (0, 1, 2):
        a.update(uid)
    assert a.write() == 0  # A writes first: nothing in the shared vector is lost
    b.update(3)
    b.update(4)
    assert b.write() == 3  # B's copy never saw A's 3 updates: its write replaces them
    assert lost_updates(shared, 5) == 3
    a.read()  # A syncs: it now builds on B's 2
    a.update(5)
    assert a.write() == 0 and lost_updates(shared, 6) == 3
    b.read()
    b.update(6)
    a.update(7)  # A updates its copy, which lacks B's 6
    assert b.write() == 0 and a.write() == 1  # A's write drops B's newest update
    assert lost_updates(shared, 8) == 4  # 0, 1, 2 and 6: the final vector holds 3, 4, 5, 7
    assert list(np.flatnonzero(shared)) == [3, 4, 5, 7]


def test_lost_updates_are_exact_when_updates_finish_out_of_order():
    # ids are claimed in order but finish in any order: update 1 may land before update 0
    shared = np.zeros(4, dtype=bool)
    a, b = LineageBook(shared), LineageBook(shared)
    a.read()
    b.read()
    b.update(1)
    assert b.write() == 0  # one update applied (id 1), id 0 still in flight
    assert lost_updates(shared, 1) == 0  # nothing is lost: the shared vector holds the one applied update
    a.update(0)
    assert a.write() == 1  # A's copy never saw update 1: its write replaces it
    assert lost_updates(shared, 2) == 1


def small(**overrides) -> Config:
    return small_config(**{**dict(log_every=100, eval_every_steps=500, eval_episodes=1, utd=1.0), **overrides})


def test_the_single_learner_reports_no_lost_update_and_no_raced_write(leak_guard):
    result = train(small())
    assert all(m[LOST_UPDATES] == 0 and m[RACED_WRITE_FRAC] == 0 for m in result.history if LOST_UPDATES in m)
    assert result.final[TARGET_UPDATES] == result.final[UPDATES] // 500  # a copy every target_period updates


@pytest.mark.parametrize("writers", ["hogwild", "local_copies"])
def test_the_naive_setups_take_exactly_the_owed_updates_and_measure_what_they_lose(leak_guard, writers):
    result = train(small(writers=writers))
    assert result.status in ("completed", "diverged")
    final = result.final
    if result.status == "completed":
        assert final[UPDATES] == 1000  # utd * (E - learning_starts), summed over the two workers
    if writers == "local_copies":  # how many are lost is the scheduler's (a deterministic case: the toy tests)
        assert 0 <= final[LOST_UPDATES] <= final[UPDATES]
        assert final[LOST_UPDATE_FRAC] == final[LOST_UPDATES] / final[UPDATES]
        assert f"lost_update_frac={final[LOST_UPDATE_FRAC]:.3f}" in result.summary()  # the figure the run is for
    else:
        assert final[LOST_UPDATES] == 0 and 0 <= final[RACED_WRITE_FRAC] <= 1
        assert f"raced_write_frac={final[RACED_WRITE_FRAC]:.3f}" in result.summary()
    # each worker copies its own target once per period of the global update count it passes (500 updates):
    # the worker whose update crosses a multiple copies then, so the copies summed are >= 2, and no worker
    # copies twice for one multiple, so each worker's are <= 2; reported as the mean over the 2 workers
    if result.status == "completed":
        assert 1 <= final[TARGET_UPDATES] <= 2
    alone = train(small(writers=writers, num_workers=1))
    assert alone.final[LOST_UPDATES] == 0 and alone.final[RACED_WRITE_FRAC] == 0  # one writer: nothing to lose
    assert alone.final[TARGET_UPDATES] == 1000 // 500  # one worker: exactly the single learner's count


def test_naive_setups_refuse_replicas_and_serial_mode():
    with pytest.raises(ConfigError, match="writers"):
        small(writers="hogwild", replicas=2)
    with pytest.raises(ConfigError, match="writers"):
        small(writers="local_copies", mode="serial")


def test_a_local_copy_with_no_transition_of_its_own_leaves_the_owed_updates_to_the_others():
    # at a high UTD with several workers, updates come due before some worker has committed anything:
    # that worker cannot train its copy on its own data (it used to crash sampling from nothing)
    from dqnlab.engine.build import build
    from dqnlab.engine.naive import WorkerUpdates

    config = small(writers="local_copies", utd=4.0, num_workers=2, learning_starts=32, probe_size=32)
    parts = build(config, 4, 2)
    replay, rng = parts.replay, np.random.default_rng(0)
    obs = rng.standard_normal((1, 40, 4)).astype(np.float32)
    flags = np.zeros((1, 40), bool)
    replay.claim(40)
    replay.commit(0, obs, np.zeros((1, 40), np.int64), np.ones((1, 40), np.float32), obs, flags, flags,
                  np.zeros((1, 40), np.int64), 0, [], claim_next=0)  # worker 0 alone has produced  # fmt: skip
    idle, busy = (WorkerUpdates(w, config, replay, parts.naive, parts.spec) for w in (1, 0))
    assert idle.run_owed() == 0  # nothing of its own: no claim, no crash
    assert busy.run_owed() == 4 * (40 - 32)  # the owed updates are all taken, by the worker with data
    parts.pool.stop()


def _naive_parts(writers: str):
    """A built naive run whose two workers have each committed 40 transitions (80 env steps, learning
    starts at 32: 48 updates owed at UTD 1); no process started."""
    from dqnlab.engine.build import build

    config = small(writers=writers, utd=1.0, num_workers=2, learning_starts=32, probe_size=32)
    parts = build(config, 4, 2)
    rng = np.random.default_rng(0)
    for worker in (0, 1):
        obs = rng.standard_normal((1, 40, 4)).astype(np.float32)
        flags = np.zeros((1, 40), bool)
        parts.replay.claim(40)
        parts.replay.commit(worker, obs, rng.integers(0, 2, (1, 40)), np.ones((1, 40), np.float32), obs, flags, flags,
                            np.zeros((1, 40), np.int64), 0, [], claim_next=0)  # fmt: skip
    return config, parts


def _take(worker, n: int) -> None:
    for _ in range(n):
        worker._update(worker._claim())


def test_a_failed_naive_runs_last_log_point_does_not_wait_on_a_lock_a_killed_worker_held():
    # a worker SIGKILLed (OOM, or the health check's kill of a hung one) while it held the naive lock never
    # releases it; the failure path's last log point reads the shared state after every worker is stopped,
    # and waited on that lock forever (the trial never ended, its heartbeat kept fresh)
    import threading

    from dqnlab.engine.naive_loop import NaiveLoop
    from dqnlab.tracking.callbacks import CallbackList

    _, parts = _naive_parts("local_copies")
    loop = NaiveLoop(parts, CallbackList([]))
    parts.pool.stop()
    assert parts.naive.lock.acquire(timeout=1)  # the dead worker's hold: nobody releases it
    read = []
    reader = threading.Thread(target=lambda: read.append((loop.writer_counts(), loop.read_shared_parameters())),
                              daemon=True)  # fmt: skip
    reader.start()
    reader.join(timeout=30)  # bounded: without the fix it never returns
    parts.naive.lock.release()
    assert read and read[0][0].lost_updates == 0 and read[0][0].target_updates == 0


def test_a_local_copy_that_synced_builds_on_the_shared_lineage_and_one_that_did_not_overwrites_it():
    from dqnlab.engine.naive import DONE, OVERWRITTEN, WorkerUpdates

    config, parts = _naive_parts("local_copies")
    a, b = (WorkerUpdates(w, config, parts.replay, parts.naive, parts.spec) for w in (0, 1))
    _take(a, 3)  # updates 0, 1, 2 in A's copy, written back after each
    b.sync()  # B takes the shared vector and what it contains
    _take(b, 2)  # 3, 4 build on A's: nothing is lost
    counters, lineage = parts.naive.counters, parts.naive.lineage
    assert counters[OVERWRITTEN] == 0 and lost_updates(lineage, int(counters[DONE])) == 0
    _take(a, 1)  # A never synced: its write (0, 1, 2, 5) replaces B's 3 and 4
    assert counters[OVERWRITTEN] == 2 and lost_updates(lineage, int(counters[DONE])) == 2
    assert list(np.flatnonzero(lineage)) == [0, 1, 2, 5]
    mine = np.empty_like(parts.naive.params)
    a.acting_params(mine)
    assert np.array_equal(parts.naive.params, mine)  # the last writer's whole vector is the shared one
    parts.pool.stop()


def test_hogwild_counts_a_write_that_overlaps_another_and_none_when_they_take_turns():
    from dqnlab.engine.naive import RACED, WRITES, WorkerUpdates

    config, parts = _naive_parts("hogwild")
    a, b = (WorkerUpdates(w, config, parts.replay, parts.naive, parts.spec) for w in (0, 1))
    counters = parts.naive.counters
    _take(a, 1)
    _take(b, 1)  # one after the other: no race
    assert counters[WRITES] == 2 and counters[RACED] == 0
    step = a.opt.step

    def overlapped(*args, **kwargs):  # B's whole update lands while A's optimizer step is in progress
        _take(b, 1)
        return step(*args, **kwargs)

    a.opt.step = overlapped
    _take(a, 1)
    assert counters[WRITES] == 4 and counters[RACED] == 2  # both writes of the overlapping pair raced
    parts.pool.stop()


def test_a3c_pushes_gradients_computed_on_a_stale_copy_and_measures_how_stale():
    from dqnlab.engine.naive import DONE, STALE_N, STALE_SUM, WRITES, WorkerUpdates

    config, parts = _naive_parts("a3c")
    a, b = (WorkerUpdates(w, config, parts.replay, parts.naive, parts.spec) for w in (0, 1))
    counters, shared = parts.naive.counters, parts.naive.params
    before = shared.copy()
    local = np.empty_like(shared)
    a.acting_params(local)
    _take(b, 3)  # B pushes 3 gradients; A's copy has seen none of them
    assert not np.array_equal(shared, before)  # pushed into the shared floats
    _take(a, 1)
    a.acting_params(local)
    assert np.array_equal(local, before)  # A's copy did not move: it pushes, it does not step itself
    assert counters[DONE] == 4 and counters[WRITES] == 4 and counters[STALE_N] == 4
    assert counters[STALE_SUM] == 0 + 1 + 2 + 3  # B's copy also fell behind its own pushes; A's by 3
    a.sync()
    _take(a, 1)
    assert counters[STALE_SUM] == 6  # just synced: age 0
    parts.pool.stop()


def test_each_a3c_push_is_the_gradient_of_its_own_batch_at_the_local_copy():
    # a push must carry its own batch's gradient alone: clearing the shared network's gradients but not
    # the local copy's made push i the sum of batches 0..i (norms 1.2, 2.3, 3.5, 4.7)
    import copy

    from dqnlab.agent.reference import dqn_loss
    from dqnlab.engine.naive import WorkerUpdates

    config, parts = _naive_parts("a3c")
    config = config.replace(max_grad_norm=1e9)  # unclipped: a sum of gradients cannot hide under the clip
    a = WorkerUpdates(0, config, parts.replay, parts.naive, parts.spec)
    batches, pushed = [], []
    sample, step = a._sample, a.opt.step
    a._sample = lambda: batches.append(sample()) or batches[-1]
    a.opt.step = lambda: pushed.append([p.grad.clone() for p in a.shared_net.parameters()]) or step()
    at_local = copy.deepcopy(a.net)  # no sync between the pushes: the local copy stays where it is
    _take(a, 2)
    for batch, grads in zip(batches, pushed):
        at_local.zero_grad()
        arrays = [torch.from_numpy(x[0]) for x in batch.learner_arrays()]
        dqn_loss(at_local, a.target, *arrays, config.agent)[0].backward()
        for own, push in zip(at_local.parameters(), grads):
            torch.testing.assert_close(push, own.grad)
    assert len(pushed) == 2
    parts.pool.stop()


def test_an_a3c_run_takes_exactly_the_owed_updates_and_reports_stale_gradients(leak_guard):
    from dqnlab.metrics import STALE_GRADIENT_AGE_MEAN

    result = train(small(writers="a3c"))
    final = result.final
    assert final[UPDATES] == 1000  # utd * (E - learning_starts), summed over the two workers' pushes
    assert 1 <= final[TARGET_UPDATES] <= 2  # each worker's own target copies, the mean over the 2 (as above)
    assert f"stale_gradient_age_mean={final[STALE_GRADIENT_AGE_MEAN]:.1f}" in result.summary()
