"""Atomic claims of grid points: at most one live trial runs a point, whatever the interleaving.

Why a table of our own. Optuna's queue gives each WAITING trial to one process, but the queue can
hold a point twice: ``fail_stale_trials`` (run by any worker before each trial) fails a dead trial
and only then re-enqueues its point, and a sweep process that tops up the queue in between sees the
point uncovered and enqueues it as well. Checking "is another trial of my point RUNNING?" before
running cannot close that window (the other copy may not be popped yet). A primary key can: the
table ``dqnlab_grid_claims (study_name, grid_point) -> trial_number`` lives in the study's own
database, and a trial runs its point only after it has inserted that row, or has taken it over from
an owner that can no longer finish it (FAIL or PRUNED) with a compare-and-swap ``UPDATE``.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Column, Integer, MetaData, String, Table, and_, create_engine, delete, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

_META = MetaData()
CLAIMS = Table(
    "dqnlab_grid_claims",
    _META,
    Column("study_name", String(512), primary_key=True),
    Column("grid_point", String(2048), primary_key=True),
    Column("trial_number", Integer, nullable=False),
)

# Trial states (Optuna's names) whose owner can no longer complete its point: the claim may move on.
RELEASED_STATES = ("FAIL", "PRUNED")


def claims_engine(storage_url: str, engine_kwargs: dict | None = None, create: bool = False) -> Engine:
    """An engine on the study's database; ``create`` makes the claims table if it is missing. Only the
    sweep's serialised set-up creates it: two processes creating it at once both see it missing and
    the second fails ("table already exists"), which killed one of the ``--jobs`` workers of a fresh
    study."""
    engine = create_engine(storage_url, **(engine_kwargs or {}))
    if create:
        _META.create_all(engine, checkfirst=True)
    return engine


def claim_grid_point(
    engine: Engine, study_name: str, grid_point: str, trial_number: int, state_of: Callable[[int], str]
) -> int | None:
    """Claim ``grid_point`` for ``trial_number``. Returns None when the claim is ours (run the point),
    else the number of the trial that holds it (COMPLETE, RUNNING or WAITING: ours is a duplicate).

    ``state_of(number)`` gives a trial's Optuna state name. Every step is one atomic statement: the
    INSERT fails on the primary key if anyone holds the point, and a takeover ``UPDATE`` only
    succeeds if the owner it read is still the owner."""
    key = and_(CLAIMS.c.study_name == study_name, CLAIMS.c.grid_point == grid_point)
    while True:
        try:
            with engine.begin() as conn:
                conn.execute(CLAIMS.insert().values(study_name=study_name, grid_point=grid_point,
                                                    trial_number=trial_number))  # fmt: skip
            return None
        except IntegrityError:
            pass
        with engine.begin() as conn:
            owner = conn.execute(select(CLAIMS.c.trial_number).where(key)).scalar()
        if owner is None:  # released between our two statements: try the insert again
            continue
        if owner == trial_number:
            return None
        if state_of(owner) not in RELEASED_STATES:
            return owner
        with engine.begin() as conn:
            moved = conn.execute(update(CLAIMS).where(and_(key, CLAIMS.c.trial_number == owner))
                                 .values(trial_number=trial_number)).rowcount  # fmt: skip
        if moved == 1:
            return None
        # another trial took it over first: read the new owner and decide again


def forget_claims(engine: Engine, study_name: str) -> int:
    """Drop every claim under ``study_name``; returns how many. For the set-up of a study that has no trial
    yet: claims under its name were left by a deleted study of that name, whose trial numbers the new
    study reuses from 0, so they would make its trials duplicates of trials that never ran their points."""
    with engine.begin() as conn:
        return conn.execute(delete(CLAIMS).where(CLAIMS.c.study_name == study_name)).rowcount
