"""Sweep machinery shared by every file in ``sweeps/``: grid -> Optuna study -> one trial = one
engine run -> objective value + one MLflow child run.

Claiming grid points. Every grid point is enqueued as a WAITING trial tagged with its key
(``user_attrs['grid_point']``); ``study.ask()`` pops WAITING trials atomically in Optuna's RDB
storage, so concurrent processes (``--jobs N`` or other machines) each get distinct trials. The
study's sampler is Optuna's GridSampler over the same space, but a trial that does not come from
the queue is pruned at once (the grid is exhausted). The queue may still hold one point twice (a
stale trial's retry and a top-up racing), so a trial runs its point only after claiming it in the
claims table (:mod:`dqnlab.claims`, one atomic statement); a trial whose point is held by a live
or completed trial is pruned as a duplicate, so no point is ever run or completed twice.

Running. Each trial runs in its own thread-free process (:mod:`dqnlab.trial_process`): actors are
never forked from this process, which runs Optuna's heartbeat thread.

Resuming. Trials of a dead process stop beating; ``fail_stale_trials`` (heartbeat + grace period)
fails them and ``RetryFailedTrialCallback`` re-enqueues their point; every invocation also
re-enqueues points with no COMPLETE, WAITING or RUNNING trial (e.g. a crashed run). A rerun of a
finished study adds nothing.

Objective (maximised, :mod:`dqnlab.objective`): ``eval`` = mean greedy eval return over the last
quarter of the run's evaluations; ``throughput`` = env steps/s over the whole run. A hard-diverged
run is a COMPLETE trial with ``status='diverged'`` and value -inf (it has no policy to score).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import math
import multiprocessing as mp
import os
import socket
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dqnlab.config import Config, ConfigError, field_types
from dqnlab.objective import OBJECTIVES, objective_value
from dqnlab.signals import sigterm_as_interrupt


class SweepError(ValueError):
    """A sweep argument is invalid; raised before anything is written."""


class SweepFailed(RuntimeError):
    """The sweep stopped part-way (a store failed, a worker process died); rerunning resumes it."""


@dataclass(frozen=True)
class SweepSpec:
    """What one study runs: ``base`` config fields for every trial and the ``grid`` axes."""

    sweep: str  # MLflow experiment name (one per sweep file)
    study_name: str  # Optuna study and MLflow parent run
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    objective: str = "eval"

    def points(self) -> list[dict[str, Any]]:
        axes = list(self.grid)
        return [dict(zip(axes, combo)) for combo in itertools.product(*(self.grid[a] for a in axes))]

    def config_for(self, point: dict[str, Any]) -> Config:
        return Config.from_flat({**self.base, **point})


@dataclass
class SweepLocations:
    results: Path
    storage: str
    tracking_uri: str
    artifacts: Path | None


# --- validation ------------------------------------------------------------------------------
def validate_spec(spec: SweepSpec) -> None:
    """Unknown or empty axes, bad values, unknown env ids: SweepError/ConfigError, nothing written."""
    known = set(Config.field_names())
    for axis, values in spec.grid.items():
        if axis not in known:
            raise SweepError(f"unknown sweep axis {axis!r}; allowed: {sorted(known)}")
        if not values:
            raise SweepError(f"sweep axis {axis!r} is empty; give at least one value")
    unknown = sorted(set(spec.base) - known)
    if unknown:
        raise SweepError(f"unknown config field(s) {unknown}; allowed: {sorted(known)}")
    if spec.objective not in OBJECTIVES:
        raise SweepError(f"objective: got {spec.objective!r}; allowed: {OBJECTIVES}")
    from dqnlab.run import inspect_env

    env_ids = set()
    for point in spec.points():
        env_ids.add(spec.config_for(point).env.env_id)  # raises ConfigError naming the field
    for env_id in env_ids:
        inspect_env(env_id)


def validate_storage_url(url: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise SweepError(f"--storage: {url!r} is not an SQLAlchemy URL ({exc}); e.g. sqlite:///results/optuna.db "
                         "or postgresql+psycopg2://user@host/db") from None  # fmt: skip
    try:
        parsed.get_dialect().import_dbapi()
    except Exception as exc:  # NoSuchModuleError, ImportError
        raise SweepError(f"--storage: no database driver for {parsed.drivername!r} ({exc}); for PostgreSQL use "
                         "postgresql+psycopg2://... after pip install -e '.[cluster]'") from None  # fmt: skip
    if parsed.drivername.startswith("sqlite") and parsed.database and parsed.database != ":memory:":
        parent = Path(parsed.database).expanduser().resolve().parent
        if parent.exists() and not os.access(parent, os.W_OK):
            raise SweepError(f"--storage: folder {parent} is not writable")


TRACKING_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")


def validate_tracking_uri(uri: str) -> None:
    scheme = uri.split(":", 1)[0].split("+", 1)[0] if ":" in uri else ""
    if scheme not in TRACKING_SCHEMES:
        raise SweepError(
            f"--tracking-uri: got {uri!r}; allowed: a database URI (sqlite:////abs/path/mlflow.db, "
            "postgresql://...) or a tracking server (http://host:port). The file store is refused by MLflow."
        )


def locations(results: str | Path, storage: str | None, tracking_uri: str | None) -> SweepLocations:
    root = Path(results).expanduser().resolve()
    loc = SweepLocations(
        results=root,
        storage=storage or f"sqlite:///{root / 'optuna.db'}",
        tracking_uri=tracking_uri or f"sqlite:///{root / 'mlflow.db'}",
        artifacts=root / "mlartifacts" if not (tracking_uri or "").startswith("http") else None,
    )
    validate_storage_url(loc.storage)
    validate_tracking_uri(loc.tracking_uri)
    return loc


# --- optuna plumbing -------------------------------------------------------------------------
def point_key(point: dict[str, Any]) -> str:
    return json.dumps({k: _encode(v) for k, v in sorted(point.items())}, sort_keys=True)


def _encode(value: Any) -> Any:
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


def _decode(axis: str, value: Any) -> Any:
    if axis == "hidden_sizes" and isinstance(value, str):
        return tuple(int(x) for x in value.split(","))
    return value


def make_storage(url: str, heartbeat_s: int, grace_s: int):
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna.storages.RDBStorage(
        url,
        heartbeat_interval=heartbeat_s,
        grace_period=grace_s,
        heartbeat_stale_trial_callback=_retry_callback(),
        engine_kwargs=_engine_kwargs(url),
    )


def _engine_kwargs(url: str) -> dict[str, Any] | None:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}  # seconds a writer waits for the file lock
    if url.startswith("postgresql+psycopg2") or url.startswith("postgresql://"):
        return {"connect_args": {"connect_timeout": 20}, "pool_pre_ping": True}
    return None


def claims_engine_for(url: str):
    """The grid-claims table's engine on the study's own database (:mod:`dqnlab.claims`)."""
    from dqnlab.claims import claims_engine

    return claims_engine(url, _engine_kwargs(url))


def _retry_callback():
    """Re-enqueue the point of a trial whose process stopped beating (Optuna's own callback)."""
    import optuna

    cls = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
    return cls(max_retry=3)


def open_study(spec: SweepSpec, storage):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=spec.study_name, storage=storage, sampler=grid_sampler(spec), direction="maximize", load_if_exists=True
    )


def top_up_queue(study, spec: SweepSpec) -> int:
    """Enqueue every grid point that has no COMPLETE, WAITING or RUNNING trial; returns how many."""
    from optuna.trial import TrialState

    live = {TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING}
    covered = {t.user_attrs.get("grid_point") for t in study.get_trials(deepcopy=False) if t.state in live}
    added = 0
    for point in spec.points():
        key = point_key(point)
        if key not in covered:
            study.enqueue_trial({a: _encode(v) for a, v in point.items()}, user_attrs={"grid_point": key})
            added += 1
    return added


def mark_killed_runs(study, client) -> None:
    """MLflow runs of FAIL trials still RUNNING there (their process died, or the tracking store
    was down when the trial failed) get their end state: KILLED, or FAILED with the trial's error."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        run_id = t.user_attrs.get("mlflow_run_id")
        if not run_id:
            continue
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


# --- running ---------------------------------------------------------------------------------
@dataclass
class WorkerArgs:
    spec: SweepSpec
    loc: SweepLocations
    experiment_id: str
    parent_run_id: str
    heartbeat_s: int
    grace_s: int
    quiet: bool
    total_points: int = 0
    started: float = field(default_factory=time.monotonic)


class TrialFailed(RuntimeError):
    """The trial's run crashed, its trial process died, or this machine refused its configuration; the
    trial is FAIL with the reason and the sweep goes on (the next invocation reruns the point)."""


def worker_loop(args: WorkerArgs) -> None:
    """Pop and run grid points until none is waiting. Safe to run in many processes at once.

    Each trial claims its point atomically (:mod:`dqnlab.claims`) and runs in its own thread-free
    process (:mod:`dqnlab.trial_process`); this process keeps the Optuna trial and its heartbeat."""
    import gymnasium as gym
    import optuna
    from optuna.trial import TrialState

    from dqnlab.claims import claim_grid_point
    from dqnlab.metrics import OBJECTIVE, display_key
    from dqnlab.tracking import MlflowClient, MlflowRunTracker, TrackingError, start_trial_run
    from dqnlab.trial_process import TrialRequest, run_trial

    spec = args.spec
    study = optuna.load_study(study_name=spec.study_name, storage=make_storage(args.loc.storage, args.heartbeat_s,
                              args.grace_s), sampler=grid_sampler(spec))  # fmt: skip
    claims = claims_engine_for(args.loc.storage)
    client = MlflowClient(args.loc.tracking_uri)
    worker = f"{socket.gethostname()}:{os.getpid()}"

    def state_of(number: int) -> str:
        return next((t.state.name for t in study.get_trials(deepcopy=False) if t.number == number), "FAIL")

    def objective(trial) -> float:
        key = trial.user_attrs.get("grid_point")
        if key is None:
            raise optuna.TrialPruned("not a queued grid point: the grid is exhausted")
        owner = claim_grid_point(claims, spec.study_name, key, trial.number, state_of)
        if owner is not None:
            trial.set_user_attr("duplicate_of", owner)
            raise optuna.TrialPruned(f"grid point already claimed by trial {owner}")
        point = {a: _decode(a, trial.suggest_categorical(a, [_encode(v) for v in vs])) for a, vs in spec.grid.items()}
        config = spec.config_for(point)
        trial.set_user_attr("worker", worker)
        trial.set_user_attr("status", "running")
        try:
            run_id = start_trial_run(
                client, args.experiment_id, args.parent_run_id, run_name=f"trial {trial.number}",
                tags={"trial_number": str(trial.number), "grid_point": key, "dqnlab.study": spec.study_name,
                      "dqnlab.worker": worker},
            )  # fmt: skip
        except TrackingError as exc:
            _record_failure(trial, str(exc))
            raise
        trial.set_user_attr("mlflow_run_id", run_id)
        tracker = MlflowRunTracker(client, run_id)
        try:
            outcome = run_trial(TrialRequest(config, args.quiet, gym.spec(config.env.env_id)), [tracker])
        except KeyboardInterrupt:
            trial.set_user_attr("status", "interrupted")
            tracker.close_unended("interrupted")
            raise
        if outcome.kind == "interrupted":
            trial.set_user_attr("status", "interrupted")
            tracker.close_unended("interrupted")
            raise KeyboardInterrupt(outcome.message)
        if outcome.kind == "tracking":  # every later trial would fail the same way
            _record_failure(trial, outcome.message)
            raise TrackingError(outcome.message) from tracker.broken
        if outcome.kind != "result":
            reason = outcome.message
            if outcome.kind == "config":
                reason = f"configuration refused on {socket.gethostname()}: {reason}"
            _record_failure(trial, reason)
            tracker.close_unended("failed", reason)  # the trial process could not close its run
            raise TrialFailed(reason)
        result = outcome.result
        value = objective_value(result, spec.objective)
        try:
            tracker.log_metric(display_key(OBJECTIVE), value if math.isfinite(value) else -1e30)
        except TrackingError as exc:
            _record_failure(trial, str(exc))
            raise
        trial.set_user_attr("status", result.status)
        return value

    with sigterm_as_interrupt():
        try:
            while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False)
                if not args.quiet:
                    _print_overall(study, args)
        except Exception as exc:
            cause = storage_failure(exc)
            if cause is None:
                raise
            raise SweepFailed(
                f"Optuna storage failed ({type(cause).__name__}: {str(cause).strip()[:300]}); the trial in progress "
                f"stays RUNNING in the study and is run again once its heartbeat is older than --grace-s"
            ) from exc
        finally:
            claims.dispose()


def storage_failure(exc: BaseException) -> BaseException | None:
    """The database error behind ``exc`` (Optuna may raise another error while handling it), or None."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, SQLAlchemyError | optuna.exceptions.StorageInternalError):
            inner = exc.__cause__
            return inner if isinstance(inner, SQLAlchemyError) else exc
        exc = exc.__cause__ or exc.__context__
    return None


def _record_failure(trial, error: str) -> None:
    trial.set_user_attr("status", "failed")
    trial.set_user_attr("error", error[:2000])


def grid_sampler(spec: SweepSpec):
    import optuna

    return optuna.samplers.GridSampler({a: [_encode(v) for v in vs] for a, vs in spec.grid.items()}, seed=0)


def _print_overall(study, args: WorkerArgs) -> None:
    from optuna.trial import TrialState

    done_keys = {t.user_attrs.get("grid_point") for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    done, total = len(done_keys), args.total_points
    elapsed = time.monotonic() - args.started
    # ETA weighs the remaining points by their estimated cost (a utd-4 trial costs ~4x a utd-1 one)
    cost = {point_key(p): estimate_trial_s(args.spec.config_for(p)) for p in args.spec.points()}
    spent = sum(c for k, c in cost.items() if k in done_keys)
    left = sum(c for k, c in cost.items() if k not in done_keys)
    eta = elapsed / spent * left if spent else float("nan")
    width = 30
    bar = "#" * (width * done // max(total, 1))
    print(f"[{bar:<{width}}] trials {done}/{total} elapsed {elapsed:5.0f}s eta {eta:5.0f}s", file=sys.stderr)


def run_sweep(
    spec: SweepSpec,
    loc: SweepLocations,
    jobs: int = 1,
    quiet: bool = False,
    heartbeat_s: int = 10,
    grace_s: int = 30,
) -> dict[str, Any]:
    """Create or resume the study, run every missing grid point, return the summary."""
    validate_spec(spec)
    if jobs < 1:
        raise SweepError(f"--jobs: got {jobs}; allowed: an int >= 1")
    warn_cpu_budget(spec, jobs)
    loc.results.mkdir(parents=True, exist_ok=True)
    import optuna

    from dqnlab.tracking import MlflowClient, get_or_create_experiment, get_or_create_parent, git_commit

    # Set-up is serialised between sweep processes (see _setup_lock): two of them creating the schemas
    # of a fresh SQLite file, or the study's grid queue, at the same time would clash or enqueue twice.
    with _setup_lock(loc):
        client = MlflowClient(loc.tracking_uri)
        try:  # first, so that an unreachable server writes nothing to the study
            experiment_id = get_or_create_experiment(client, spec.sweep, loc.artifacts)
        except Exception as exc:  # unreachable server, bad database
            raise SweepError(f"--tracking-uri: cannot reach MLflow at {loc.tracking_uri!r}: {exc}") from None
        try:
            storage = make_storage(loc.storage, heartbeat_s, grace_s)
            study = open_study(spec, storage)  # created once, before any trial process starts
        except Exception as exc:  # sqlalchemy OperationalError, missing driver, ...
            raise SweepError(f"--storage: cannot open Optuna storage {loc.storage!r}: {exc}") from None
        optuna.storages.fail_stale_trials(study)
        mark_killed_runs(study, client)
        top_up_queue(study, spec)
        parent = get_or_create_parent(client, experiment_id, spec.study_name, {"git_commit": git_commit()})
        grid_tag = json.dumps({a: [_encode(v) for v in vs] for a, vs in spec.grid.items()})[:5000]
        client.set_tag(parent, "grid", grid_tag)
    args = WorkerArgs(spec, loc, experiment_id, parent, heartbeat_s, grace_s, quiet, len(spec.points()))
    if jobs == 1:
        worker_loop(args)
    else:
        ctx = mp.get_context("spawn")  # a fresh interpreter each: no forked MLflow/SQLAlchemy state
        procs = [ctx.Process(target=worker_loop, args=(args,), name=f"dqnlab-sweep-{j}") for j in range(jobs)]
        for p in procs:
            p.start()
        try:
            for p in procs:
                p.join()
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
                    p.join(10)
        bad = [p.exitcode for p in procs if p.exitcode != 0]
        if bad:
            raise SweepFailed(f"sweep worker process(es) exited with {bad}; their errors are printed above")
    summary = summarise(study, spec)
    try:
        close_study_run(client, parent, study, summary)
    except Exception as exc:
        from dqnlab.tracking import TrackingError

        raise TrackingError(f"MLflow tracking store failed closing the study's parent run ({exc})") from exc
    return summary


def close_study_run(client, parent_run_id: str, study, summary: dict[str, Any]) -> None:
    """Log the per-cell summary on the study's parent run and end it once no trial is left to run
    here or elsewhere: FINISHED when every grid point is complete, FAILED when some failed (a rerun
    retries them and sets the run RUNNING again). With trials still running on other machines the
    parent stays RUNNING; the last sweep process to finish closes it."""
    from optuna.trial import TrialState

    from dqnlab.tracking import close_parent

    cells = [{**json.loads(c["cell"]), "iqm": c["iqm"], "n_seeds": c["n"], "values": c["values"]}
             for c in summary["cells"]]  # fmt: skip
    client.log_dict(parent_run_id, {"cells": cells, "states": summary["states"]}, "summary/cells.json")
    done = len(summary["rows"])
    client.log_metric(parent_run_id, "points_complete", done)
    client.log_metric(parent_run_id, "points_total", summary["grid_size"])
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)):
        return
    close_parent(client, parent_run_id, "FINISHED" if done == summary["grid_size"] else "FAILED")


SETUP_LOCK_KEY = 0x64716E6C6162  # "dqnlab": the PostgreSQL advisory lock that serialises sweep set-up


@contextlib.contextmanager
def _setup_lock(loc: SweepLocations):
    """Held while a sweep process creates or joins the study. On PostgreSQL it is an advisory lock in
    the study's database, so sweep processes on different machines queue for it (and a process that
    dies releases it with its connection); otherwise an flock on the results folder of this machine."""
    if not loc.storage.startswith("postgresql"):
        with open(loc.results / ".setup.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(loc.storage, poolclass=NullPool, **(_engine_kwargs(loc.storage) or {}))
    try:
        conn = engine.connect()
    except Exception as exc:
        raise SweepError(f"--storage: cannot open Optuna storage {loc.storage!r}: {exc}") from None
    try:
        conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SETUP_LOCK_KEY})
        conn.commit()
        yield
    finally:
        conn.close()  # ends the session, which releases the lock
        engine.dispose()


def warn_cpu_budget(spec: SweepSpec, jobs: int) -> None:
    workers = max(spec.config_for(p).env.num_workers for p in spec.points())
    cores = os.cpu_count() or 1
    if jobs * (workers + 1) > cores:
        print(f"warning: --jobs {jobs} x (num_workers {workers} + 1 learner) = {jobs * (workers + 1)} processes "
              f"on {cores} cores: they will compete and throughput figures will be lower", file=sys.stderr)  # fmt: skip


def summarise(study, spec: SweepSpec) -> dict[str, Any]:
    """Completed trials and, per cell (a grid point without its seed), the IQM of the objective over
    its seeds; runs without a final return (hard-diverged: -inf) are listed and left out of the IQM."""
    from optuna.trial import TrialState

    from dqnlab.statistics import iqm

    rows = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        rows.append({"trial": t.number, "point": json.loads(t.user_attrs["grid_point"]), "value": t.value,
                     "status": t.user_attrs.get("status"), "mlflow_run_id": t.user_attrs.get("mlflow_run_id")})  # fmt: skip
    by_cell: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        cell = {k: v for k, v in r["point"].items() if k != "seed"}
        by_cell[json.dumps(cell, sort_keys=True)].append(r["value"])
    cells = []
    for key, values in by_cell.items():
        finite = [v for v in values if math.isfinite(v)]
        cells.append({"cell": key, "iqm": iqm(finite), "n": len(values), "n_finite": len(finite), "values": values})
    cells.sort(key=lambda c: (-math.inf if math.isnan(c["iqm"]) else c["iqm"]), reverse=True)
    counts: dict[str, int] = defaultdict(int)
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] += 1
    return {"rows": sorted(rows, key=lambda r: r["trial"]), "cells": cells, "states": dict(counts),
            "grid_size": len(spec.points())}  # fmt: skip


def format_summary(summary: dict[str, Any], loc: SweepLocations, spec: SweepSpec) -> str:
    lines = [f"study {spec.study_name}: {len(summary['rows'])}/{summary['grid_size']} grid points complete; "
             f"trial states {summary['states']}"]  # fmt: skip
    for r in summary["rows"]:
        lines.append(f"  trial {r['trial']:>3} {r['status']:<10} objective {r['value']:9.2f}  {r['point']}")
    if summary["cells"]:
        lines.append("cells (IQM of the objective over seeds; runs without a return are counted, not averaged):")
        for c in summary["cells"]:
            lines.append(f"  IQM {c['iqm']:9.2f}  n {c['n_finite']}/{c['n']}  {c['cell']}")
    lines.append(f"results: {loc.results}")
    if loc.tracking_uri.startswith("http"):
        lines.append(f"browse runs:   {loc.tracking_uri}")
    else:
        lines.append(f"browse runs:   mlflow ui --backend-store-uri {loc.tracking_uri} --port 5000   (http://127.0.0.1:5000)")
    lines.append(f"browse study:  optuna-dashboard '{loc.storage}'   (pip install -e '.[cluster]')")
    return "\n".join(lines)


# --- command line shared by sweeps/*.py -------------------------------------------------------
def parse_assignment(text: str, flag: str) -> tuple[str, str]:
    if "=" not in text:
        raise SweepError(f"{flag}: expected NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    return name.strip(), value.strip()


def parse_field_value(name: str, text: str) -> Any:
    from dqnlab.train import _parser_for

    types_ = field_types()
    if name not in types_:
        raise SweepError(f"unknown config field or sweep axis {name!r}; allowed: {sorted(types_)}")
    kind, choices = _parser_for(types_[name])
    try:
        value = kind(text)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise SweepError(f"{name}: cannot read {text!r} ({exc})") from None
    if choices and value not in choices:
        raise SweepError(f"{name}: got {value!r}; allowed: {choices}")
    return value


def parse_axis(text: str) -> tuple[str, list[Any]]:
    name, values = parse_assignment(text, "--axis")
    if name == "hidden_sizes":
        parts = [v for v in values.split(";") if v.strip()]
    else:
        parts = [v for v in values.split(",") if v.strip()]
    if not parts:
        raise SweepError(f"--axis {name}: no values given")
    return name, [parse_field_value(name, p) for p in parts]


def build_parser(prog: str, presets: dict[str, Any], default_preset: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--preset", choices=sorted(presets), default=default_preset)
    p.add_argument("--env", dest="env_id", help="gymnasium id for every trial")
    p.add_argument("--total-steps", type=int, help="env steps per trial")
    p.add_argument("--seeds", type=int, help="seeds 0..N-1 (replaces the seed axis)")
    p.add_argument("--axis", action="append", default=[], metavar="NAME=V1,V2",
                   help="replace or add a grid axis (hidden_sizes: 64,64;128,128)")  # fmt: skip
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="fix a config field")
    p.add_argument("--results", default="results", help="results folder (default: ./results, git-ignored)")
    p.add_argument("--storage", help="Optuna storage, any SQLAlchemy URL (default: sqlite in --results)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite in --results)")
    p.add_argument("--study-name", help="default: <sweep>-<preset>")
    p.add_argument("--jobs", type=int, default=1, help="trial processes on this machine")
    p.add_argument("--heartbeat-s", type=int, default=10, help="Optuna heartbeat interval")
    p.add_argument("--grace-s", type=int, default=30, help="seconds without heartbeat before a trial is stale")
    p.add_argument("--dry-run", action="store_true", help="print the grid and an estimated time; run nothing")
    p.add_argument("--quiet", action="store_true", help="no progress lines (CI)")
    p.add_argument("--no-report", action="store_true", help="skip the analysis report at the end")
    return p


def spec_from_args(sweep: str, args: argparse.Namespace, presets: dict[str, Any], objective: str) -> SweepSpec:
    preset = presets[args.preset]
    base = dict(preset["base"])
    grid = {k: list(v) for k, v in preset["grid"].items()}
    if args.env_id:
        base["env_id"] = args.env_id
    if args.total_steps:
        base["total_env_steps"] = args.total_steps
    for text in args.set:
        name, value = parse_assignment(text, "--set")
        base[name] = parse_field_value(name, value)
    for text in args.axis:
        name, values = parse_axis(text)
        grid[name] = values
    if args.seeds is not None:
        if args.seeds < 1:
            raise SweepError(f"--seeds: got {args.seeds}; allowed: an int >= 1")
        grid["seed"] = list(range(args.seeds))
    fixed = {parse_assignment(t, "--set")[0] for t in args.set}
    clash = sorted(fixed & set(grid))
    if clash:
        raise SweepError(f"--set {clash[0]}: {clash[0]!r} is a grid axis of this preset; use --axis {clash[0]}=VALUE")
    for name in grid:
        base.pop(name, None)
    return SweepSpec(sweep, args.study_name or f"{sweep}-{args.preset}", base, grid, objective)


def estimate_trial_s(config: Config) -> float:
    """Rough seconds per trial on a 2-core machine (DESIGN.md figures: ~900 updates/s, ~20k steps/s
    per actor, ~2 s of start-up and evaluation)."""
    steps = config.run.total_env_steps
    learner = config.agent.utd * max(0, steps - config.run.learning_starts) / 900.0
    actors = steps / (20_000.0 * config.env.num_workers)
    return max(learner, actors) + 2.0


def sweep_main(sweep: str, presets: dict[str, Any], default_preset: str, objective: str, argv=None, report=None) -> int:
    """The command line of ``sweeps/<sweep>.py``; ``report(tracking_uri, experiment, study, out)`` runs at the end."""
    parser = build_parser(f"python sweeps/{sweep}.py", presets, default_preset)
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(sweep, args, presets, objective)
        validate_spec(spec)
        loc = locations(args.results, args.storage, args.tracking_uri)
    except (SweepError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    points = spec.points()
    if args.dry_run:
        total_s = sum(estimate_trial_s(spec.config_for(p)) for p in points) / args.jobs
        print(f"study {spec.study_name}: {len(points)} grid points over axes {list(spec.grid)}")
        for p in points:
            print(f"  {point_key(p)}")
        print(f"base: {spec.base}")
        print(f"estimated time: {total_s / 60:.1f} min with --jobs {args.jobs} (rough)")
        return 0
    from dqnlab.tracking import TrackingError

    try:
        with sigterm_as_interrupt():
            summary = run_sweep(spec, loc, jobs=args.jobs, quiet=args.quiet, heartbeat_s=args.heartbeat_s,
                                grace_s=args.grace_s)  # fmt: skip
    except (SweepError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (TrackingError, SweepFailed) as exc:
        what = "" if isinstance(exc, SweepFailed) else "\nthe trial in progress is marked FAIL with this reason;"
        print(f"error: {exc}{what}\nrerun the same command (once the store is back) to resume the study",
              file=sys.stderr)  # fmt: skip
        return 3
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume the study", file=sys.stderr)
        return 130
    print(format_summary(summary, loc, spec))
    if report is not None and not args.no_report:
        out = report(loc.tracking_uri, spec.sweep, spec.study_name, loc.results / f"report-{spec.study_name}")
        print(f"report:        {out / 'summary.md'} (also on the parent run in MLflow, under report/)")
    return 0
