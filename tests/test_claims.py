"""Grid points are claimed atomically: the queue may hold a point twice, but only one trial runs it."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from dqnlab.study.claims import claim_grid_point, claims_engine


@pytest.fixture
def engine(tmp_path):
    eng = claims_engine(f"sqlite:///{tmp_path / 'claims.db'}", {"connect_args": {"timeout": 60}}, create=True)
    yield eng
    eng.dispose()


def test_a_point_is_held_by_its_live_or_completed_owner_and_released_by_a_failed_one(engine):
    states = {3: "RUNNING"}

    def state_of(n):
        return states.get(n, "RUNNING")

    assert claim_grid_point(engine, "s", "P", 3, state_of) is None  # first claim: ours
    assert claim_grid_point(engine, "s", "P", 3, state_of) is None  # idempotent for the owner
    assert claim_grid_point(engine, "s", "P", 5, state_of) == 3  # owner running: 5 is a duplicate
    states[3] = "COMPLETE"
    assert claim_grid_point(engine, "s", "P", 5, state_of) == 3  # owner completed: still a duplicate
    states[3] = "FAIL"
    assert claim_grid_point(engine, "s", "P", 5, state_of) is None  # owner failed: taken over
    assert claim_grid_point(engine, "s", "P", 3, state_of) == 5
    assert claim_grid_point(engine, "s", "Q", 3, state_of) is None  # points are independent
    assert claim_grid_point(engine, "other-study", "P", 9, state_of) is None  # and studies


def _contend(url: str, number: int, barrier, results) -> None:
    eng = claims_engine(url, {"connect_args": {"timeout": 60}})
    barrier.wait()
    owner = claim_grid_point(eng, "s", "P", number, lambda n: "FAIL" if n < 100 else "RUNNING")
    results[number - 100] = 1 if owner is None else 0
    eng.dispose()


@pytest.mark.parametrize("round_", range(3))
def test_simultaneous_claims_from_many_processes_grant_exactly_one(leak_guard, tmp_path, round_):
    url = f"sqlite:///{tmp_path / 'claims.db'}"
    eng = claims_engine(url, create=True)
    if round_:  # a failed earlier owner: every contender tries the takeover UPDATE at once
        claim_grid_point(eng, "s", "P", 7, lambda n: "RUNNING")
    eng.dispose()
    ctx = mp.get_context("fork")
    n = 6
    barrier, results = ctx.Barrier(n), ctx.Array("i", n)
    procs = [ctx.Process(target=_contend, args=(url, 100 + i, barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * n
    assert sum(results) == 1, list(results)


def _one_point_study(tmp_path, grace_s: int, **config):
    """A queued one-point study (UTD 1, a tiny serial CartPole run): its spec, locations, storage, study."""
    from dqnlab.study.queue import open_study, top_up_queue
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations, make_storage

    base = dict(total_env_steps=600, learning_starts=200, batch_size=32, probe_size=32, hidden_sizes=(16,),
                eval_every_steps=0, num_workers=1, mode="serial")  # fmt: skip
    spec = SweepSpec("claims", "claims-test", {**base, **config}, {"utd": [1.0]})
    loc = locations(tmp_path, None, None)
    storage = make_storage(loc.storage, heartbeat_s=1, grace_s=grace_s)
    study = open_study(spec, storage)
    top_up_queue(study, spec)
    return spec, loc, storage, study


def _worker_args(spec, loc):
    """A worker's arguments for ``spec`` (grace 60 s: no trial of the test turns stale by itself) and its
    MLflow client."""
    from dqnlab.study.runner import WorkerArgs
    from dqnlab.tracking.mlflow_runs import MlflowClient, get_or_create_experiment, get_or_create_parent

    client = MlflowClient(loc.tracking_uri)
    experiment = get_or_create_experiment(client, spec.sweep, loc.artifacts)
    parent = get_or_create_parent(client, experiment, spec.study_name, {})
    return WorkerArgs(spec, loc, experiment, parent, heartbeat_s=1, grace_s=60, quiet=True, total_points=1), client


def test_a_point_queued_twice_by_the_stale_retry_race_runs_once(tmp_path, monkeypatch):
    """The race of the issue, forced: a stale trial is failed, another process tops up the queue before
    Optuna's retry callback re-enqueues the point, so the point waits twice; the copy that is popped
    second (here the lower-numbered one, while the other runs) must not run it again."""
    import optuna
    from optuna.trial import TrialState

    from dqnlab.study.queue import top_up_queue
    from dqnlab.study.runner import worker_loop
    from dqnlab.study.storage import claims_engine_for

    spec, loc, storage, study = _one_point_study(tmp_path, grace_s=1)
    stale = study.ask()  # popped by a process that then dies: RUNNING, heartbeat recorded once
    storage.record_heartbeat(stale._trial_id)
    time.sleep(2.5)
    retry = storage.get_heartbeat_stale_trial_callback()

    def retry_after_a_top_up(study_, trial):
        top_up_queue(study_, spec)  # another process, between the FAIL and the re-enqueue
        retry(study_, trial)

    monkeypatch.setattr(storage, "get_heartbeat_stale_trial_callback", lambda: retry_after_a_top_up)
    optuna.storages.fail_stale_trials(study)
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert len(waiting) == 2 and len({t.user_attrs["grid_point"] for t in waiting}) == 1  # the window is real

    # process B pops the higher-numbered copy first and is running it (it claimed the point)
    second = max(waiting, key=lambda t: t.number)
    storage.set_trial_state_values(second._trial_id, TrialState.RUNNING)
    eng = claims_engine_for(loc.storage, create=True)
    assert claim_grid_point(eng, spec.study_name, second.user_attrs["grid_point"], second.number,
                            lambda n: study.get_trials(deepcopy=False)[n].state.name) is None  # fmt: skip
    eng.dispose()

    # this process now pops the other copy: it must be pruned as a duplicate, and run nothing
    args, client = _worker_args(spec, loc)
    worker_loop(args)
    first = study.get_trials(deepcopy=False)[min(waiting, key=lambda t: t.number).number]
    assert first.state == TrialState.PRUNED and first.user_attrs["duplicate_of"] == second.number
    trial_runs = client.search_runs([args.experiment_id], filter_string="tags.`dqnlab.role` = 'trial'")
    assert trial_runs == []  # nothing ran the point a second time


def _sweep_whose_first_trial_is_failed_as_stale(tmp_path, monkeypatch, interrupted: bool):
    """A one-point study (2 replicas) whose first trial another process fails as stale while it runs (its
    heartbeat stalled past --grace-s, e.g. a suspended laptop: Optuna's own ``fail_stale_trials``, which
    re-enqueues the point), then ends: normally, or interrupted by Ctrl-C (not run). Returns what
    ``worker_loop`` raised (or None), the study, the stale trial's number, the MLflow client and locations."""
    import optuna
    from optuna.trial import TrialState

    import dqnlab.engine.fresh_process as fresh_process
    from dqnlab.study.runner import worker_loop
    from dqnlab.study.storage import claims_engine_for

    spec, loc, storage, study = _one_point_study(tmp_path, grace_s=60, replicas=2, eval_every_steps=300)
    claims_engine_for(loc.storage, create=True).dispose()
    real_run_trial, stalled = fresh_process.run_trial, []

    def run_then_found_stale(request, callbacks, server):
        if stalled:  # the retry runs as usual
            return real_run_trial(request, callbacks, server)
        outcome = (fresh_process.TrialOutcome(fresh_process.Outcome.INTERRUPTED, None, "interrupted (SIGINT/SIGTERM)")
                   if interrupted else real_run_trial(request, callbacks, server))  # fmt: skip
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        stalled.extend(t.number for t in running)
        with monkeypatch.context() as m:  # its heartbeat read as stale by another process
            m.setattr(storage, "_get_stale_trial_ids", lambda study_id: [t._trial_id for t in running])
            optuna.storages.fail_stale_trials(study)
        return outcome

    monkeypatch.setattr(fresh_process, "run_trial", run_then_found_stale)
    args, client = _worker_args(spec, loc)
    raised = None
    try:
        worker_loop(args)
    except BaseException as exc:  # noqa: BLE001 - the test asserts which one
        raised = exc
    assert len(stalled) == 1
    return raised, study, stalled[0], client, loc, spec


def test_a_trial_failed_as_stale_while_it_ran_is_superseded_by_its_retry_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """When the stale trial wakes and ends, Optuna refuses to tell it: the sweep goes on, the stale trial's
    runs are closed as KILLED (metrics kept, tagged), the retry runs the point, and each seed counts once,
    from the retry."""
    from optuna.trial import TrialState

    from analysis.load import load_runs

    raised, study, stale_number, client, loc, spec = _sweep_whose_first_trial_is_failed_as_stale(
        tmp_path, monkeypatch, interrupted=False)  # fmt: skip
    assert raised is None
    trials = study.get_trials(deepcopy=False)
    stale, retry = trials[stale_number], next(t for t in trials if t.state == TrialState.COMPLETE)
    assert stale.state == TrialState.FAIL and retry.user_attrs["grid_point"] == stale.user_attrs["grid_point"]
    assert [t.state for t in trials].count(TrialState.COMPLETE) == 1
    for run_id in stale.user_attrs["mlflow_run_ids"]:  # closed, its metrics kept, and said why
        run = client.get_run(run_id)
        assert run.info.status == "KILLED" and run.data.tags["status"] == "superseded" and run.data.metrics
    runs = load_runs(loc.tracking_uri, spec.sweep, spec.study_name)
    counted = runs[runs["outcome"] != "failed"]
    assert sorted(counted["seed"]) == [0, 1]  # each seed once, from the retry's runs
    assert set(counted["run_id"]) == set(retry.user_attrs["mlflow_run_ids"])


def test_a_trial_failed_as_stale_and_then_interrupted_stops_the_sweep_as_ctrl_c_asks(tmp_path, monkeypatch):
    """Ctrl-C during a trial already failed as stale: Optuna cannot record the interrupt on the trial, but
    the sweep still stops with KeyboardInterrupt (exit 130), the retry not started, the runs closed."""
    from optuna.trial import TrialState

    raised, study, stale_number, client, _, _ = _sweep_whose_first_trial_is_failed_as_stale(
        tmp_path, monkeypatch, interrupted=True)  # fmt: skip
    assert isinstance(raised, KeyboardInterrupt), repr(raised)
    trials = study.get_trials(deepcopy=False)
    assert trials[stale_number].state == TrialState.FAIL
    assert [t.state for t in trials if t.number != stale_number] == [TrialState.WAITING]  # the retry, not run
    for run_id in trials[stale_number].user_attrs["mlflow_run_ids"]:
        assert client.get_run(run_id).info.status == "KILLED"


def test_the_queue_holds_the_costliest_grid_points_first(tmp_path):
    # --jobs N pops the queue in order: long trials first, so the cheap ones fill the last gaps
    import json

    from optuna.trial import TrialState

    from dqnlab.study.queue import open_study, top_up_queue
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations, make_storage

    spec = SweepSpec("queue", "queue-test", dict(total_env_steps=20_000, learning_starts=1000, replicas=8),
                     {"utd": [0.25, 4.0, 1.0], "layer_norm": [False, True]})  # fmt: skip
    loc = locations(tmp_path, None, None)
    study = open_study(spec, make_storage(loc.storage, heartbeat_s=10, grace_s=30))
    assert top_up_queue(study, spec) == 6
    waiting = sorted(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)), key=lambda t: t.number)
    order = [json.loads(t.user_attrs["grid_point"]) for t in waiting]
    assert [(p["utd"], p["layer_norm"]) for p in order] == [
        (4.0, True), (4.0, False), (1.0, True), (1.0, False), (0.25, True), (0.25, False)]


def test_a_sqlite_study_transaction_holds_the_write_lock_from_its_first_read(tmp_path):
    """Optuna pops a WAITING trial by reading it, then writing RUNNING; on SQLite its row lock is a no-op, so
    two processes could both read WAITING. The study's storage begins every transaction IMMEDIATE: while one
    transaction has only read, another writer is refused (without it a read takes no write lock)."""
    import sqlite3

    from sqlalchemy import text

    from dqnlab.study.storage import make_storage

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    storage = make_storage(url, heartbeat_s=60, grace_s=120)
    with storage.engine.connect() as conn, conn.begin():
        conn.execute(text("SELECT count(*) FROM trials")).scalar()
        other = sqlite3.connect(tmp_path / "optuna.db", timeout=0.1)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        other.close()
    storage.engine.dispose()


def test_a_run_whose_trial_died_before_recording_its_id_is_still_marked_killed(tmp_path):
    """SIGKILL can land after MLflow made a trial's run (RUNNING, tagged with the trial) but before the
    trial recorded the run's id in Optuna (CI under load hit it). The next sweep's clean-up finds such a
    run by its tags: KILLED; a run of a live trial, or of another study, is left open."""
    import optuna
    from optuna.trial import TrialState

    from dqnlab.study.queue import mark_killed_runs
    from dqnlab.tracking.mlflow_runs import MlflowClient, get_or_create_experiment, start_trial_run

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    dead, live = study.ask(), study.ask()
    dead.set_user_attr("mlflow_run_ids", [])  # the SIGKILL came before the id was recorded
    study.tell(dead, state=TrialState.FAIL)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = get_or_create_experiment(client, "utd", tmp_path / "artifacts")

    def run_of(number: int, study_name: str = "s") -> str:
        return start_trial_run(client, experiment, None, f"trial {number}",
                               tags={"trial_number": str(number), "dqnlab.study": study_name})  # fmt: skip

    orphan, running, elsewhere = run_of(dead.number), run_of(live.number), run_of(dead.number, "other")
    mark_killed_runs(study, client, experiment, "s")
    status = {r: client.get_run(r).info.status for r in (orphan, running, elsewhere)}
    assert status == {orphan: "KILLED", running: "RUNNING", elsewhere: "RUNNING"}


def _queued(tmp_path, spec):
    """Open (or create) ``spec``'s study in ``tmp_path`` and queue its grid, as a sweep command does first."""
    from dqnlab.study.queue import open_study, top_up_queue
    from dqnlab.study.storage import locations, make_storage

    study = open_study(spec, make_storage(locations(tmp_path, None, None).storage, heartbeat_s=10, grace_s=30))
    top_up_queue(study, spec)
    return study


def test_a_study_refuses_a_command_that_changes_a_field_one_variant_shares_or_overlaps_its_seed_blocks(tmp_path):
    """The terms are kept per variant: a base field a variant does not set is the study's for that variant
    (one field set by another variant hid it from the terms once); seed blocks may not overlap those an
    earlier command queued (each command alone is fine)."""
    import re

    from dqnlab.study.spec import SweepError, SweepSpec

    base = dict(total_env_steps=2000, learning_starts=200, probe_size=64, replicas=10)
    variants = {"plain": {}, "LayerNorm": {"layer_norm": True}}
    _queued(tmp_path, SweepSpec("s", "terms", base, {"variant": ["plain", "LayerNorm"], "seed": [0, 10]}, variants=variants))
    with pytest.raises(SweepError, match=re.escape("variant 'plain': layer_norm = True (the study's: False)")):
        _queued(tmp_path, SweepSpec("s", "terms", dict(base, layer_norm=True), {"variant": ["plain"], "seed": [20]},
                                    variants=variants))  # fmt: skip
    with pytest.raises(SweepError, match=re.escape("seed: blocks 0..9 and 5.. overlap")):
        _queued(tmp_path, SweepSpec("s", "terms", base, {"variant": ["plain"], "seed": [5]}, variants=variants))
    study = _queued(tmp_path, SweepSpec("s", "terms", base, {"variant": ["LayerNorm"], "seed": [20, 30]}, variants=variants))
    assert len(study.get_trials(deepcopy=False)) == 6  # the refused commands queued nothing; the grown grid did


def test_a_study_deleted_and_created_again_runs_every_grid_point(leak_guard, tmp_path):
    """Claims are kept by study name and trial number, and a study created again under a deleted one's name
    numbers its trials from 0 again: the old claims made a new trial the duplicate of a trial that had not
    run its point (pruned; its point then lost for good, exit 0 with the grid incomplete)."""
    import dataclasses

    import optuna
    from optuna.trial import TrialState

    from dqnlab.study.runner import run_sweep
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations

    spec = SweepSpec("claims", "claims-again", dict(total_env_steps=600, learning_starts=200, batch_size=32,
                     probe_size=32, hidden_sizes=(16,), eval_every_steps=0, num_workers=1, mode="serial"),
                     {"utd": [1.0, 2.0]})  # fmt: skip
    loc = locations(tmp_path, None, None)
    run_sweep(dataclasses.replace(spec, grid={"utd": [1.0]}), loc, quiet=True)  # trial 0 claims UTD 1
    optuna.delete_study(study_name=spec.study_name, storage=loc.storage)
    run_sweep(spec, loc, quiet=True)  # costliest first: trial 0 is UTD 2 now, trial 1 UTD 1
    trials = optuna.load_study(study_name=spec.study_name, storage=loc.storage).get_trials(deepcopy=False)
    assert sorted(t.state.name for t in trials) == ["COMPLETE", "COMPLETE"]
    assert {t.user_attrs["grid_point"] for t in trials if t.state == TrialState.COMPLETE} == {
        t.user_attrs["grid_point"] for t in trials}
