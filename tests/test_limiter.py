import itertools

import pytest

from dqnlab.engine.limiter import RateLimiter, realised_utd


def test_learner_waits_until_learning_starts():
    lim = RateLimiter(utd=1.0, learning_starts=100, slack=1.0, strict=True)
    assert not lim.learner_may_update(99, 0)
    assert lim.learner_may_update(100, 0)  # slack lets the first update run at E == L


def test_learner_rule_matches_formula_by_hand():
    lim = RateLimiter(utd=0.25, learning_starts=0, slack=1.0, strict=True)
    # update k allowed iff k <= 0.25 * E + 1
    assert lim.learner_may_update(0, 0)  # k=1 <= 1
    assert not lim.learner_may_update(0, 1)  # k=2 > 1
    assert lim.learner_may_update(4, 1)  # k=2 <= 2
    assert not lim.learner_may_update(7, 2)  # k=3 > 2.75


def test_actor_rule_strict_and_free():
    strict = RateLimiter(utd=4.0, learning_starts=0, slack=1.0, strict=True)
    free = RateLimiter(utd=4.0, learning_starts=0, slack=1.0, strict=False)
    assert strict.actor_may_claim(1, 3)  # d = 4 - 3 = 1 <= 1
    assert not strict.actor_may_claim(2, 3)  # d = 8 - 3 = 5 > 1
    assert free.actor_may_claim(10**6, 0)


@pytest.mark.parametrize("utd, slack, n", list(itertools.product([0.25, 1.0, 4.0, 16.0], [0.5, 1.0, 3.0], [1, 4])))
def test_lockstep_simulation_never_deadlocks_and_keeps_the_deficit_bound(utd, slack, n):
    lim = RateLimiter(utd=utd, learning_starts=8, slack=slack, strict=True)
    env_steps = updates = 0
    total = 400
    while env_steps < total:
        progressed = False
        while lim.learner_may_update(env_steps, updates):
            updates += 1
            progressed = True
            assert lim.deficit(env_steps, updates) >= -slack
        if lim.actor_may_claim(env_steps, updates):  # E counts the claims made so far
            env_steps += n
            progressed = True
        if env_steps >= 8:
            assert -slack <= lim.deficit(env_steps, updates) <= lim.max_deficit(n) + 1e-9
        assert progressed, f"deadlock at E={env_steps}, U={updates}"
    final = lim.final_updates(env_steps)
    assert abs(final - utd * (total - 8)) < 1


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("utd, slack", [(0.25, 0.5), (1.0, 1.0), (4.0, 3.0), (16.0, 0.5)])
def test_random_schedules_of_several_actors_with_claims_in_flight_keep_the_bound(utd, slack, seed):
    """Actors claim under the limiter (E counts claimed steps), then commit later; the learner sees
    only committed steps. Any interleaving keeps the stated bound and ends at the owed updates."""
    import random

    rng = random.Random(seed)
    n, actors, learning_starts, total = 2, 3, 8, 300
    lim = RateLimiter(utd=utd, learning_starts=learning_starts, slack=slack, strict=True).for_budget(total)
    claimed = inserted = updates = 0
    in_flight = [0] * actors  # steps claimed by each actor and not yet committed
    stalls = 0
    while inserted < total or updates < lim.max_updates:
        moves = []
        if lim.learner_may_update(inserted, updates):
            moves.append(("learn", None))
        for a in range(actors):
            if in_flight[a]:
                moves.append(("commit", a))
            elif claimed < total and lim.actor_may_claim(claimed, updates):
                moves.append(("claim", a))
        assert moves, f"deadlock: E={inserted} claimed={claimed} U={updates}"
        kind, a = rng.choice(moves)
        if kind == "learn":
            updates += 1
        elif kind == "claim":
            in_flight[a], claimed = n, claimed + n
        else:
            inserted, in_flight[a] = inserted + in_flight[a], 0
        if inserted >= learning_starts:
            d = lim.deficit(inserted, updates)
            assert -slack - 1e-9 <= d <= lim.max_deficit(n) + 1e-9, (kind, inserted, claimed, updates)
        stalls += 1
        assert stalls < 100_000
    assert updates == lim.final_updates(total) == int(utd * (total - learning_starts))


def test_realised_utd():
    assert realised_utd(500, 1500, 1000) == 1.0
    assert realised_utd(0, 10, 1000) != realised_utd(0, 10, 1000)  # NaN before learning starts
