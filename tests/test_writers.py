"""Who writes the parameters: the single learner loses nothing; the naive setups are measured."""

from __future__ import annotations

import numpy as np
import pytest

from dqnlab.config import Config, ConfigError
from dqnlab.engine import train
from dqnlab.engine.naive import LineageBook, lost_updates
from dqnlab.metrics import LOST_UPDATE_FRAC, LOST_UPDATES, RACED_WRITE_FRAC, UPDATES


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


def small(**overrides) -> Config:
    base = dict(total_env_steps=1500, learning_starts=500, batch_size=32, buffer_capacity=10_000, probe_size=64,
                hidden_sizes=(32, 32), log_every=100, eval_every_steps=500, eval_episodes=1, num_workers=2,
                sync_every=50, utd=1.0)  # fmt: skip
    return Config.from_flat({**base, **overrides})


def test_the_single_learner_reports_no_lost_update_and_no_raced_write(leak_guard):
    result = train(small())
    assert all(m[LOST_UPDATES] == 0 and m[RACED_WRITE_FRAC] == 0 for m in result.history if LOST_UPDATES in m)


@pytest.mark.parametrize("writers", ["hogwild", "local_copies"])
def test_the_naive_setups_take_exactly_the_owed_updates_and_measure_what_they_lose(leak_guard, writers):
    result = train(small(writers=writers))
    assert result.status in ("completed", "diverged")
    final = result.final
    if result.status == "completed":
        assert final[UPDATES] == 1000  # utd * (E - learning_starts), summed over the two workers
    if writers == "local_copies":
        assert final[LOST_UPDATES] > 0  # two copies written back in turn overwrite each other
        assert 0 < final[LOST_UPDATE_FRAC] <= 1
    else:
        assert final[LOST_UPDATES] == 0 and 0 <= final[RACED_WRITE_FRAC] <= 1
    alone = train(small(writers=writers, num_workers=1))
    assert alone.final[LOST_UPDATES] == 0 and alone.final[RACED_WRITE_FRAC] == 0  # one writer: nothing to lose


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
    idle, busy = (WorkerUpdates(w, config, replay, parts.naive, parts.layout, 4, 2) for w in (1, 0))
    assert idle.run_owed() == 0  # nothing of its own: no claim, no crash
    assert busy.run_owed() == 4 * (40 - 32)  # the owed updates are all taken, by the worker with data
    parts.pool.stop()
