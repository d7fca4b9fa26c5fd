"""The study's queue of grid points in Optuna: the study itself, the grid enqueued as WAITING trials
(topped up with the points that have no live trial), and the MLflow runs of trials that died."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dqnlab.study.spec import (
    VARIANT,
    SweepError,
    SweepSpec,
    check_seed_blocks,
    estimate_trial_s,
    point_from_key,
    point_key,
    study_terms,
    terms_conflicts,
)

TERMS = "dqnlab.terms"  # the study's user attribute holding its terms (:func:`study_terms`)


def open_study(spec: SweepSpec, storage, recorded_params: Callable[[Any], dict[str, str] | None] | None = None):
    """Create the study, or open it if it exists and ``spec`` keeps its terms (the same base config,
    axes, objective and variants; more values on an axis are welcome). SweepError names each field
    that departs, before anything is enqueued: one study never mixes two configurations of a cell.

    A study made before studies kept their terms is checked once against what its first completed trial
    ran (``recorded_params(trial)``: its first run's MLflow params), then keeps this command's terms.

    No sampler is ever asked: a trial's point is the key it was queued with (see ``top_up_queue``), so
    a grid may grow between invocations, which Optuna's categorical parameters would refuse."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=spec.study_name, storage=storage, sampler=queue_sampler(),
                                direction="maximize", load_if_exists=True)  # fmt: skip
    refuse_a_changed_study(study, spec, recorded_params)
    if TERMS not in study.user_attrs:  # a new study (or one made before studies kept their terms)
        study.set_user_attr(TERMS, study_terms(spec))
    return study


def refuse_a_changed_study(study, spec: SweepSpec, recorded_params=None) -> None:
    """SweepError if ``spec`` departs from the study's terms (or, for a study without stored terms, from
    what its first completed trial ran), or its seed blocks overlap those the study holds. Reads only."""
    stored = study.user_attrs.get(TERMS)
    if stored is not None:
        conflicts = terms_conflicts(stored, study_terms(spec))
    else:
        conflicts = legacy_conflicts(study, spec, recorded_params) if recorded_params else []
    if conflicts:
        raise SweepError(
            f"--study-name {spec.study_name!r}: this command changes what the study's trials share: "
            f"{'; '.join(conflicts)}. Allowed: the study's own base config, variants, axes and objective "
            f"(more values on an axis are fine); or a new --study-name for the new configuration"
        )
    # the blocks earlier commands queued, failed ones too (their command runs them again)
    check_seed_blocks(spec, [point_from_key(t.user_attrs["grid_point"]) for t in study.get_trials(deepcopy=False)
                             if "grid_point" in t.user_attrs])  # fmt: skip


def existing_study(spec: SweepSpec, storage_url: str):
    """The study if its store holds it, else None; creates no file, no table and no study (a dry run)."""
    import optuna

    if storage_url.startswith("sqlite:///") and not Path(storage_url.removeprefix("sqlite:///")).exists():
        return None
    if not _holds_optuna_tables(storage_url):  # Optuna's storage creates its tables as it opens a store
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=spec.study_name, storage=storage_url, sampler=queue_sampler())
    except KeyError:  # the store holds no such study
        return None


def _holds_optuna_tables(storage_url: str) -> bool:
    """Whether the database at ``storage_url`` has Optuna's tables (an empty PostgreSQL database or SQLite
    file has none); reads only. A store it cannot reach raises :class:`SweepError`."""
    import sqlalchemy

    from dqnlab.study.storage import without_password

    try:
        engine = sqlalchemy.create_engine(storage_url)
        try:
            return sqlalchemy.inspect(engine).has_table("studies")
        finally:
            engine.dispose()
    except Exception as exc:  # sqlalchemy OperationalError, missing driver, ...
        raise SweepError(f"--storage: cannot open Optuna storage {without_password(storage_url)!r}: {exc}") from None


def legacy_conflicts(study, spec: SweepSpec, recorded_params: Callable[[Any], dict[str, str] | None]) -> list[str]:
    """How this command departs from what a study without stored terms ran: its first completed trial's
    recorded config (seed and replicas aside) against this command's config for that trial's point."""
    from optuna.trial import TrialState

    from dqnlab.tracking.mlflow_runs import param_str

    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        point = point_from_key(trial.user_attrs.get("grid_point", "{}"))
        if sorted(point) != sorted(spec.grid):
            return [f"axes {sorted(spec.grid)} (the study's: {sorted(point)})"]
        if point.get(VARIANT, "") not in ("", *spec.variants):
            continue
        params = recorded_params(trial)
        if params:
            expected = spec.config_for(point).to_flat()
            return [f"{k} = {param_str(v)!r} (the study's trial {trial.number} ran {params[k]!r})"
                    for k, v in expected.items() if k not in ("seed", "replicas") and k in params
                    and params[k] != param_str(v)]  # fmt: skip
    return []


def queued_keys(study) -> set[str]:
    """The grid points the study holds a COMPLETE, WAITING or RUNNING trial of (whichever command queued them)."""
    from optuna.trial import TrialState

    live = {TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING}
    return {t.user_attrs["grid_point"] for t in study.get_trials(deepcopy=False) if t.state in live
            and "grid_point" in t.user_attrs}  # fmt: skip


def queue_sampler():
    """A study's sampler, never consulted (trials take their point from the queue)."""
    import optuna

    return optuna.samplers.RandomSampler(seed=0)


def top_up_queue(study, spec: SweepSpec) -> int:
    """Enqueue every grid point that has no COMPLETE, WAITING or RUNNING trial; returns how many.
    Costliest first (by :func:`estimate_trial_s`): trial processes pop the queue in order, and with
    the long trials started first the cheap ones fill the gaps at the end, so ``--jobs N`` keeps its
    N cores busy to the last trial instead of one long trial running alone."""
    covered = queued_keys(study)
    added = 0
    for point in sorted(spec.points(), key=lambda p: -estimate_trial_s(spec.config_for(p))):
        key = point_key(point)
        if key not in covered:
            study.enqueue_trial({}, user_attrs={"grid_point": key})
            added += 1
    return added


def mark_killed_runs(study, client, experiment_id: str, study_name: str) -> None:
    """MLflow runs of FAIL trials still RUNNING there (their process died, or the tracking store
    was down when the trial failed) get their end state: KILLED, or FAILED with the trial's error.

    A trial's runs are those its attributes list and those the store holds RUNNING with its number and
    study in their tags (written with the run itself: a process killed after MLflow made a run but before
    the trial recorded its id leaves a run only the tags name)."""
    from optuna.trial import TrialState

    failed = {t.number: t for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
    runs = {number: list(t.user_attrs.get("mlflow_run_ids", [])) for number, t in failed.items()}  # one per replica
    query = f"tags.`dqnlab.study` = '{study_name}' and tags.`dqnlab.role` = 'trial' and attributes.status = 'RUNNING'"
    try:
        open_runs = client.search_runs([experiment_id], query, max_results=50_000)
    except Exception:  # the store cannot say: the ids the trials recorded still get closed
        open_runs = []
    for run in open_runs:
        number = run.data.tags.get("trial_number", "")
        if number.isdigit() and int(number) in runs and run.info.run_id not in runs[int(number)]:
            runs[int(number)].append(run.info.run_id)
    for number, run_ids in runs.items():
        t = failed[number]
        for run_id in run_ids:
            try:
                if client.get_run(run_id).info.status != "RUNNING":
                    continue
                if t.user_attrs.get("status") == "failed":
                    client.set_tag(run_id, "status", "failed")
                    client.set_tag(run_id, "error", t.user_attrs.get("error", "")[:5000])
                    client.set_terminated(run_id, "FAILED")
                else:
                    client.set_tag(run_id, "status", "killed")
                    client.set_terminated(run_id, "KILLED")
            except Exception:  # a run we cannot read is left as it is
                continue
