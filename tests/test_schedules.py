"""Schedules counted in gradient updates or in env steps: how many target copies and resets a run
makes at each UTD and worker count (DESIGN: schedule unit)."""

from __future__ import annotations

import math

import pytest

from dqnlab.agent.schedules import Periodic, PolyakClock
from dqnlab.engine.limiter import RateLimiter


def _updates_at(utd: float, workers: int, envs: int, learning_starts: int, total: int) -> list[tuple[int, int]]:
    """``(updates, env_steps)`` after every update of a strict run: the workers step ``envs`` envs each in
    turn, and the learner takes every update the limiter allows before the next actor step."""
    limiter = RateLimiter(utd, learning_starts, 1.0, True).for_budget(total)
    env_steps, updates, out = 0, 0, []
    while env_steps < total or updates < limiter.max_updates:
        while limiter.learner_may_update(env_steps, updates):
            updates += 1
            out.append((updates, env_steps))
        if env_steps < total:
            for _ in range(workers):
                if env_steps < total and limiter.actor_may_claim(env_steps, updates):
                    env_steps += envs
    return out


@pytest.mark.parametrize("workers, envs", [(1, 1), (2, 1), (3, 4)])
@pytest.mark.parametrize("utd", [0.25, 1.0, 4.0, 16.0])
def test_a_period_in_env_steps_copies_as_often_at_every_utd_and_one_in_updates_utd_times_more(utd, workers, envs):
    learning_starts, total, period = 1000, 11_000, 500
    trace = _updates_at(utd, workers, envs, learning_starts, total)
    updates_unit = Periodic(period, "updates", learning_starts)
    steps_unit = Periodic(period, "env_steps", learning_starts)
    copies_u = sum(updates_unit.due(u, e) for u, e in trace)
    copies_e = sum(steps_unit.due(u, e) for u, e in trace)
    owed = math.floor(utd * (total - learning_starts))
    assert trace[-1][0] == owed
    assert copies_u == owed // period  # 5, 20, 80, 320: utd times more copies per env step
    # every multiple of 500 env steps after learning starts, seen at the first update after it: the last
    # one (11,000) only if an update comes after the last env step
    last_env_steps = trace[-1][1]
    assert copies_e == last_env_steps // period - learning_starts // period
    assert copies_e in ((total - learning_starts) // period - 1, (total - learning_starts) // period)


def test_multiples_passed_between_two_updates_copy_once_and_none_before_learning_starts():
    s = Periodic(100, "env_steps", learning_starts=250)
    assert not s.due(1, 299)  # 100 and 200 passed before learning started: the target equals the net
    assert s.due(2, 300)
    assert not s.due(3, 399)
    assert s.due(4, 750)  # 400 .. 700 passed since: one copy
    assert not s.due(5, 780) and s.fired == 2


def test_no_reset_after_the_guard_in_either_unit():
    steps = Periodic(1000, "env_steps", learning_starts=0, stop_after_steps=2500)
    fired = [e for e in range(1, 5001) if steps.due(e, e)]  # one update per env step
    assert fired == [1000, 2000]  # 3000 and 4000 would land in the last half of the run
    updates = Periodic(250, "updates", learning_starts=0, stop_after_steps=2500)
    fired = [u for u in range(1, 1251) if updates.due(u, 4 * u)]  # UTD 0.25: 4 env steps per update
    assert fired == [250, 500]  # updates 750+ come after env step 2,500


@pytest.mark.parametrize("utd", [0.25, 1.0, 4.0])
def test_polyak_per_env_step_moves_the_target_as_much_per_env_step_at_every_utd(utd):
    tau = 0.01
    clock = PolyakClock(tau, "env_steps", learning_starts=0)
    kept = 1.0  # the weight the target keeps on its starting value after 1,000 env steps
    for u in range(1, int(1000 * utd) + 1):
        kept *= 1.0 - clock.weight(math.ceil(u / utd))
    assert kept == pytest.approx((1.0 - tau) ** 1000, rel=1e-9)
    per_update = PolyakClock(tau, "updates", learning_starts=0)
    assert per_update.weight(7) == tau and per_update.weight(7) == tau
