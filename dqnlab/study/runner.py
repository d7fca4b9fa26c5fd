"""Running a study: every file in ``sweeps/`` comes here: grid -> Optuna study -> one trial = one
engine run -> objective value + one MLflow child run.

Claiming grid points. Every grid point is enqueued as a WAITING trial tagged with its key
(``user_attrs['grid_point']``); ``study.ask()`` pops WAITING trials atomically in Optuna's RDB
storage, so concurrent processes (``--jobs N`` or other machines) each get distinct trials. The
study's sampler is never asked: a trial that does not come from the queue is pruned at once (the grid
is exhausted). A point is its key, never an Optuna parameter, so a grid may grow between invocations (a
study keeps its terms: :func:`dqnlab.study.queue.open_study`). An invocation runs its own grid's points
only: one it pops from a wider grid (an earlier or another command's) goes back to the queue. The queue
may still hold one point twice (a stale trial's retry and a top-up racing), so a trial runs its point
only after claiming it in the claims table (:mod:`dqnlab.study.claims`, one atomic statement); a trial
whose point is held by a live or completed trial is pruned as a duplicate, so no point is ever run or
completed twice.

Running. Each trial runs in its own thread-free process (:mod:`dqnlab.engine.fresh_process`): actors are
never forked from this process, which runs Optuna's heartbeat thread.

Resuming. Trials of a dead process stop beating; ``fail_stale_trials`` (heartbeat + grace period)
fails them and ``RetryFailedTrialCallback`` re-enqueues their point; every invocation also
re-enqueues points with no COMPLETE, WAITING or RUNNING trial (e.g. a crashed run). A rerun of a
finished study adds nothing. A trial failed as stale though its process lived (its heartbeat stalled past
--grace-s: a suspended machine) may still end; Optuna cannot tell it, so its runs are closed as KILLED and
tagged ``superseded`` and its point's result is the retry's: a point is then run twice, counted once.

Objective (maximised, :mod:`dqnlab.objective`): ``eval`` = mean greedy eval return over the last
quarter of the run's evaluations; ``throughput`` = env steps/s over the whole run. A hard-diverged
run is a COMPLETE trial with ``status='diverged'`` and a missing score (:data:`dqnlab.objective.MISSING_SCORE`,
NaN; Optuna records it as -inf).
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import socket
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from dqnlab.config import Config
from dqnlab.objective import MISSING_SCORE, objective_value, optuna_value, replica_values
from dqnlab.signals import gated_interrupts
from dqnlab.study.progress import ProgressEvent, SweepDisplay
from dqnlab.study.queue import mark_killed_runs, open_study, queue_sampler, top_up_queue
from dqnlab.study.spec import (
    SweepError,
    SweepSpec,
    encode,
    estimate_trial_s,
    point_from_key,
    point_key,
    validate_spec,
    warn_cpu_budget,
)
from dqnlab.study.storage import (
    SweepFailed,
    SweepLocations,
    claims_engine_for,
    make_storage,
    readers_never_block_writers,
    setup_lock,
    storage_failure,
    without_password,
)


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
    job: int = 0
    """This trial process's index among ``--jobs N`` (its line in the display)."""
    events: Any = None
    """Where progress events go: a multiprocessing queue the parent's display reads (``--jobs N``), or
    None (one job: the display in this process, see :func:`run_sweep`)."""


class _TrialProgress:
    """Engine callback forwarding a trial's progress to the sweep display, at most once a second."""

    def __init__(self, report, job: int, trial: int):
        self.report, self.job, self.trial = report, job, trial
        self._evals: dict[int, float] = {}
        self._last = 0.0

    def on_log(self, replica: int, metrics: dict[str, float]) -> None:
        from dqnlab.metrics import EVAL_RETURN_MEAN

        if EVAL_RETURN_MEAN in metrics:
            self._evals[replica] = metrics[EVAL_RETURN_MEAN]

    def on_progress(self, env_steps: int, updates: int, total_env_steps: int, elapsed_s: float) -> None:
        now = time.monotonic()
        if now - self._last < 1.0:
            return
        self._last = now
        evals = list(self._evals.values())
        self.report(ProgressEvent("progress", self.job, self.trial, frac=env_steps / max(total_env_steps, 1),
                                  env_steps_per_s=env_steps / max(elapsed_s, 1e-9),
                                  eval_return=sum(evals) / len(evals) if evals else math.nan))  # fmt: skip


class TrialFailed(RuntimeError):
    """The trial's run crashed, its trial process died, or this machine refused its configuration; the
    trial is FAIL with the reason and the sweep goes on (the next invocation reruns the point)."""


def worker_loop(args: WorkerArgs, report=None) -> None:
    """Pop and run grid points until none is waiting. Safe to run in many processes at once.

    Each trial claims its point atomically (:mod:`dqnlab.study.claims`) and runs in its own thread-free
    process (:mod:`dqnlab.engine.fresh_process`), forked by this loop's trial server
    (:mod:`dqnlab.engine.trial_server`); this process keeps the Optuna trial and its heartbeat.
    ``report(event)`` receives the progress events (default: ``args.events.put``, or nothing when quiet)."""
    if report is None:
        report = args.events.put if args.events is not None and not args.quiet else (lambda event: None)
    import gymnasium as gym
    import optuna
    from optuna.trial import TrialState

    from dqnlab.engine.fresh_process import Outcome, TrialOutcome, TrialRequest, run_trial
    from dqnlab.engine.trial_server import TrialServer
    from dqnlab.metrics import OBJECTIVE, display_key
    from dqnlab.study.claims import claim_grid_point
    from dqnlab.tracking.mlflow_runs import (
        MlflowClient,
        MlflowRunTracker,
        ReplicaRuns,
        TrackingError,
        flush_interval_s,
        start_trial_run,
    )

    spec = args.spec
    study = optuna.load_study(study_name=spec.study_name, storage=make_storage(args.loc.storage, args.heartbeat_s,
                              args.grace_s), sampler=queue_sampler())  # fmt: skip
    claims = claims_engine_for(args.loc.storage)
    own_keys = {point_key(p) for p in spec.points()}  # a command runs its own grid's points only
    WAITING = (TrialState.WAITING,)
    client = MlflowClient(args.loc.tracking_uri)
    worker = f"{socket.gethostname()}:{os.getpid()}"

    def state_of(number: int) -> str:
        return next((t.state.name for t in study.get_trials(deepcopy=False) if t.number == number), "FAIL")

    ran: dict[str, Any] = {}  # the trial this loop runs now: its runs; "ended" once it ran to an end; "interrupted"

    def objective(trial) -> float:
        key = trial.user_attrs.get("grid_point")
        if key is not None and key not in own_keys:  # queued by another command on this study (a wider grid):
            study.enqueue_trial({}, user_attrs={"grid_point": key})  # back in the queue for it, signals held
            raise optuna.TrialPruned(f"grid point {key} is not in this command's grid; left waiting for one that has it")
        ran.update(trial=trial, run_ids=[], ended=False, interrupted=False)
        try:
            with gate.opened():  # an interrupt lands inside the trial, where it is recorded
                value = run_point(trial)
        except KeyboardInterrupt:
            ran["interrupted"] = True
            try:
                trial.set_user_attr("status", "interrupted")  # also one held since Optuna made the trial RUNNING
            except optuna.exceptions.UpdateFinishedTrialError:
                ran["ended"] = True  # failed as stale meanwhile: see superseded()
            raise
        except optuna.exceptions.UpdateFinishedTrialError:  # failed as stale while it ran: see superseded()
            ran["ended"] = True
            raise
        ran["ended"] = True
        return value

    def superseded() -> bool:
        """Whether the trial just run was failed as stale while it ran (its heartbeat stalled past --grace-s:
        a suspended laptop, a stopped process) and so could not be told. Only ``fail_stale_trials`` fails a
        RUNNING trial whose objective ran to its end; its point is rerun by a retry (or the next invocation).
        Its runs are closed as KILLED (tagged ``superseded``, metrics kept), so no seed counts twice and the
        point's result is the rerun's."""
        trial = ran.get("trial")
        if trial is None or not ran["ended"] or state_of(trial.number) != "FAIL":
            return False
        reason = (f"trial {trial.number} was failed as stale (no heartbeat for --grace-s {args.grace_s} s) while it "
                  f"ran; its point is rerun by another trial, whose result counts")  # fmt: skip
        try:
            for run_id in ran["run_ids"]:
                client.set_tag(run_id, "status", "superseded")
                client.set_tag(run_id, "error", reason)
                client.set_terminated(run_id, "KILLED")
        except Exception as exc:  # the store failed: every later trial would too
            raise TrackingError(f"MLflow tracking store failed closing superseded trial {trial.number}'s runs "
                                f"({type(exc).__name__}: {exc})") from exc  # fmt: skip
        print(f"dqnlab sweep: {reason}; its {len(ran['run_ids'])} MLflow run(s) closed as KILLED", flush=True)
        return True

    def run_point(trial) -> float:
        """One trial in its phases: claim the grid point, start its runs, run it, record the outcome."""
        key, point, config = claim(trial)
        trial.set_user_attr("worker", worker)
        trial.set_user_attr("status", "running")
        run_ids: list[str] = ran["run_ids"]  # the trial's MLflow runs, each added as soon as it exists
        tracker, outcome, started = None, None, False
        try:  # from here on, an interrupt anywhere is recorded and the trial's runs closed
            tracker = start_runs(trial, key, config, run_ids)
            label = ", ".join(f"{a}={encode(v)}" for a, v in point.items())
            report(ProgressEvent("start", args.job, trial.number, label=label, cost_s=estimate_trial_s(config)))
            started = True
            progress = _TrialProgress(report, args.job, trial.number)
            gate.check()  # an interrupt swallowed while the runs were created stops the trial before it starts
            # quiet: the trial process prints nothing; the sweep's display shows its progress
            outcome = run_trial(TrialRequest(config, True, gym.spec(config.env.env_id)), [tracker, progress], server)
        except KeyboardInterrupt:
            outcome = TrialOutcome(Outcome.INTERRUPTED, None, "interrupted (SIGINT/SIGTERM)")
            if tracker is None:  # cut short while its runs were created: one may exist whose id never came back
                run_ids += [r for r in created_runs(trial.number) if r not in run_ids]
        except TrackingError as exc:  # the trial's runs could not be created
            outcome = TrialOutcome(Outcome.TRACKING, None, str(exc), exc)
        finally:
            if started:  # on every path: the display never keeps a trial that ended
                status = "failed" if outcome is None else (
                    outcome.result.status if outcome.kind is Outcome.RESULT else outcome.kind.value)  # fmt: skip
                report(ProgressEvent("end", args.job, trial.number, status=status))
        # the trackers that saw the run's events (they know which runs ended); or, cut short while the runs
        # were being created, trackers of those that exist
        return record(trial, config, tracker if tracker is not None else _runs(run_ids), outcome)

    def claim(trial) -> tuple[str, dict, Config]:
        """The grid point this trial runs, claimed for it (pruned: the grid is exhausted, or another trial
        holds the point): its key, its values and its config."""
        key = trial.user_attrs.get("grid_point")
        if key is None:
            raise optuna.TrialPruned("not a queued grid point: the grid is exhausted")
        point = point_from_key(key)
        owner = claim_grid_point(claims, spec.study_name, key, trial.number, state_of)
        if owner is not None:
            trial.set_user_attr("duplicate_of", owner)
            raise optuna.TrialPruned(f"grid point already claimed by trial {owner}")
        return key, point, spec.config_for(point)

    def start_runs(trial, key: str, config: Config, run_ids: list[str]) -> ReplicaRuns:
        """One MLflow child run per replica (a replica is a run, with its own seed), under the study's run;
        each id goes into ``run_ids`` (and the trial's attributes) as soon as its run exists, so one that an
        interrupt or a failure cuts short is closed, or found as killed by the next sweep."""
        for k, seed in enumerate(_seeds(config)):
            run_ids.append(start_trial_run(
                client, args.experiment_id, args.parent_run_id, run_name=f"trial {trial.number} seed {seed}",
                tags={"trial_number": str(trial.number), "grid_point": key, "dqnlab.study": spec.study_name,
                      "dqnlab.worker": worker, "replica": str(k)}, config=config.replace(seed=seed, replicas=1),
            ))  # fmt: skip
            trial.set_user_attr("mlflow_run_ids", list(run_ids))
        return _runs(run_ids)

    def created_runs(number: int) -> list[str]:
        """The ids of this trial's runs the store holds RUNNING ([] if the store cannot say)."""
        query = (f"tags.trial_number = '{number}' and tags.`dqnlab.study` = '{spec.study_name}' "
                 "and attributes.status = 'RUNNING'")  # fmt: skip
        try:
            return [r.info.run_id for r in client.search_runs([args.experiment_id], query)]
        except Exception:  # the store failed: the next sweep marks such a run killed
            return []

    def _runs(run_ids: list[str]) -> ReplicaRuns | None:
        if not run_ids:
            return None
        every_s = flush_interval_s(len(run_ids))
        return ReplicaRuns([MlflowRunTracker(client, r, flush_every_s=every_s, params_logged=True) for r in run_ids])

    def record(trial, config: Config, tracker: ReplicaRuns | None, outcome: TrialOutcome) -> float:
        """The one place a trial's status is written: the outcome recorded, what it left open closed, and
        the objective returned, or the exception that ends this trial (TrialFailed) or the sweep."""
        if outcome.kind is Outcome.RESULT:
            result = outcome.result
            values = replica_values(result, spec.objective)
            try:
                for run, v in zip(tracker.trackers, values):
                    run.log_metric(display_key(OBJECTIVE), v)  # MISSING_SCORE (NaN) stays NaN
            except TrackingError as exc:
                outcome = TrialOutcome(Outcome.TRACKING, result, str(exc), exc)
            else:
                trial.set_user_attr("status", result.status)
                trial.set_user_attr("seed_values", {str(s): v for s, v in zip(_seeds(config), values)})
                trial.set_user_attr("seed_status", {str(r.seed): r.status for r in result.replicas})
                return optuna_value(objective_value(result, spec.objective))
        # the runs' buffered metrics are flushed before the study's record is written: a store error or a
        # second Ctrl-C in that write (the gate is open here) then loses no metric
        if outcome.kind is Outcome.INTERRUPTED:
            ran["interrupted"] = True  # kept, should the trial turn out failed as stale: see superseded()
            try:
                if tracker is not None:
                    tracker.close_unended("interrupted")
            finally:
                trial.set_user_attr("status", "interrupted")
            raise KeyboardInterrupt(outcome.message)
        reason = outcome.message
        if outcome.kind is Outcome.CONFIG:
            reason = f"configuration refused on {socket.gethostname()}: {reason}"
        if outcome.kind is Outcome.TRACKING:  # every later trial would fail the same way: the sweep stops
            if tracker is not None:
                try:
                    tracker.close_unended("failed", reason)
                except TrackingError:  # the store itself failed: the next sweep marks the runs killed
                    pass
            _record_failure(trial, reason)
            raise TrackingError(outcome.message) from outcome.exception
        try:
            if tracker is not None:
                tracker.close_unended("failed", reason)  # the trial process could not close its runs
        finally:
            _record_failure(trial, reason)
        raise TrialFailed(reason)

    with gated_interrupts() as gate, TrialServer() as server:  # one engine import for all of this loop's trials
        try:
            while own_keys & {t.user_attrs.get("grid_point") for t in study.get_trials(deepcopy=False, states=WAITING)}:
                ran.clear()
                try:
                    with gate.closed():  # Optuna makes the trial RUNNING and tells its end with signals held
                        study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False)
                except Exception:
                    if not superseded():  # Optuna refuses to tell a trial failed as stale: the sweep goes on
                        raise
                    if ran["interrupted"]:  # unless it was interrupted: the sweep stops as Ctrl-C asked
                        raise KeyboardInterrupt("interrupted (SIGINT/SIGTERM)") from None
                gate.check()  # one swallowed after the trial ran (its record is kept) stops the sweep here
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


def _seeds(config: Config) -> list[int]:
    """The seeds of a trial's replicas."""
    return [config.run.seed + k for k in range(config.run.replicas)]


def first_run_params(client, trial) -> dict[str, str] | None:
    """The config a trial's first run recorded (its MLflow params), or None if it has none to read."""
    ids = trial.user_attrs.get("mlflow_run_ids") or []
    try:
        return client.get_run(ids[0]).data.params if ids else None
    except Exception:  # a run the store no longer holds: nothing to check against
        return None


def _record_failure(trial, error: str) -> None:
    trial.set_user_attr("status", "failed")
    trial.set_user_attr("error", error[:2000])


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

    from dqnlab.study.claims import forget_claims
    from dqnlab.tracking.mlflow_runs import MlflowClient, get_or_create_experiment, get_or_create_parent, git_commit
    from dqnlab.tracking.ui import save_study_view

    # Set-up is serialised between sweep processes (see setup_lock): two of them creating the schemas
    # of a fresh SQLite file, or the study's grid queue, at the same time would clash or enqueue twice.
    with setup_lock(loc):
        client = MlflowClient(loc.tracking_uri)
        try:  # first, so that an unreachable server writes nothing to the study
            experiment_id = get_or_create_experiment(client, spec.sweep, loc.artifacts)
        except Exception as exc:  # unreachable server, bad database
            raise SweepError(f"--tracking-uri: cannot reach MLflow at {loc.tracking_uri!r}: {exc}") from None
        for url in (loc.tracking_uri, loc.storage):
            readers_never_block_writers(url)
        try:
            storage = make_storage(loc.storage, heartbeat_s, grace_s)
            study = open_study(spec, storage, lambda t: first_run_params(client, t))  # before any trial process starts
        except SweepError:  # the study exists with other terms
            raise
        except Exception as exc:  # sqlalchemy OperationalError, missing driver, ...
            raise SweepError(f"--storage: cannot open Optuna storage {without_password(loc.storage)!r}: {exc}") from None
        claims = claims_engine_for(loc.storage, create=True)  # before any worker process claims
        if not study.get_trials(deepcopy=False):  # a new study: a deleted one of its name may have left claims
            forget_claims(claims, spec.study_name)
        claims.dispose()
        optuna.storages.fail_stale_trials(study)
        mark_killed_runs(study, client, experiment_id, spec.study_name)
        top_up_queue(study, spec)
        parent = get_or_create_parent(client, experiment_id, spec.study_name, {"git_commit": git_commit()})
        grid_tag = json.dumps({a: [encode(v) for v in vs] for a, vs in spec.grid.items()})[:5000]
        client.set_tag(parent, "grid", grid_tag)
        save_study_view(client, experiment_id, spec.study_name, spec.swept_fields())
    args = WorkerArgs(spec, loc, experiment_id, parent, heartbeat_s, grace_s, quiet, len(spec.points()))
    display = None if quiet else _display(study, spec)
    try:  # the live display is closed on every exit path (it hides the cursor while it runs)
        if jobs == 1:
            worker_loop(args, report=display.handle if display else None)
        else:
            ctx = mp.get_context("spawn")  # a fresh interpreter each: no forked MLflow/SQLAlchemy state
            events = ctx.Queue() if display else None
            procs = [ctx.Process(target=worker_loop, args=(replace(args, job=j, events=events),), name=f"dqnlab-sweep-{j}")
                     for j in range(jobs)]  # fmt: skip
            for p in procs:
                p.start()
            try:
                while any(p.is_alive() for p in procs):
                    _drain(events, display, timeout_s=0.5)
                    for p in procs:
                        p.join(0 if events else None)
                _drain(events, display, timeout_s=0.0)
            finally:
                for p in procs:
                    if p.is_alive():
                        p.terminate()
                        p.join(10)
            bad = [p.exitcode for p in procs if p.exitcode != 0]
            if bad:
                raise SweepFailed(f"sweep worker process(es) exited with {bad}; their errors are printed above")
    finally:
        if display is not None:
            display.close()
    summary = summarise(study, spec)
    summary["experiment_id"] = experiment_id
    try:
        close_study_run(client, parent, study, summary)
    except Exception as exc:
        from dqnlab.tracking.mlflow_runs import TrackingError

        raise TrackingError(f"MLflow tracking store failed closing the study's parent run ({exc})") from exc
    return summary


def _display(study, spec: SweepSpec) -> SweepDisplay:
    """The sweep's live display, knowing which grid points are complete already and what the rest cost."""
    from optuna.trial import TrialState

    done = {t.user_attrs.get("grid_point") for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    left = sum(estimate_trial_s(spec.config_for(p)) for p in spec.points() if point_key(p) not in done)
    return SweepDisplay(spec.study_name, len(spec.points()), len(done & {point_key(p) for p in spec.points()}), left)


def _drain(events, display: SweepDisplay | None, timeout_s: float) -> None:
    """Hand the display every event waiting in ``events`` (the first one waited for up to ``timeout_s``)."""
    if events is None or display is None:
        return
    import queue

    try:
        event = events.get(timeout=timeout_s) if timeout_s else events.get_nowait()
        while True:
            display.handle(event)
            event = events.get_nowait()
    except queue.Empty:
        pass


def close_study_run(client, parent_run_id: str, study, summary: dict[str, Any]) -> None:
    """Log the per-cell summary on the study's parent run and end it once no trial is left to run
    here or elsewhere: FINISHED when every grid point is complete, FAILED when some failed (a rerun
    retries them and sets the run RUNNING again). With trials still running on other machines the
    parent stays RUNNING; the last sweep process to finish closes it."""
    from optuna.trial import TrialState

    from dqnlab.tracking.mlflow_runs import close_parent

    cells = [{**json.loads(c["cell"]), "iqm": c["iqm"], "n_seeds": c["n"], "values": c["values"]}
             for c in summary["cells"]]  # fmt: skip
    client.log_dict(parent_run_id, {"cells": cells, "states": summary["states"]}, "summary/cells.json")
    done, total = summary["study_points_complete"], summary["study_points"]  # every command's grid
    client.log_metric(parent_run_id, "points_complete", done)
    client.log_metric(parent_run_id, "points_total", total)
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)):
        return
    close_parent(client, parent_run_id, "FINISHED" if done == total else "FAILED")


def summarise(study, spec: SweepSpec) -> dict[str, Any]:
    """This command's completed grid points (``rows``, out of ``grid_size``; the whole study's: ``study_points``
    and ``study_points_complete``) and, per cell of the whole study
    (a grid point without its seed, whichever command ran it), the IQM of the objective over its seeds
    (every replica of every trial of the cell); seeds without a final return (hard-diverged) are counted
    and left out of the IQM."""
    from optuna.trial import TrialState

    from dqnlab.statistics import iqm

    rows = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        value = t.value if math.isfinite(t.value) else MISSING_SCORE
        rows.append({"trial": t.number, "point": json.loads(t.user_attrs["grid_point"]), "value": value,
                     "status": t.user_attrs.get("status"), "seed_values": t.user_attrs.get("seed_values", {}),
                     "mlflow_run_ids": t.user_attrs.get("mlflow_run_ids", [])})  # fmt: skip
    own = {point_key(p) for p in spec.points()}
    by_cell: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        cell = {k: v for k, v in r["point"].items() if k != "seed"}
        # studies from before MISSING_SCORE stored a missing seed's score as None
        per_seed = [MISSING_SCORE if v is None else v for v in r["seed_values"].values()] or [r["value"]]
        by_cell[json.dumps(cell, sort_keys=True)].extend(per_seed)
    cells = []
    for key, values in by_cell.items():
        finite = [v for v in values if math.isfinite(v)]
        cells.append({"cell": key, "iqm": iqm(finite), "n": len(values), "n_finite": len(finite), "values": values})
    cells.sort(key=lambda c: -math.inf if math.isnan(c["iqm"]) else c["iqm"], reverse=True)
    counts: dict[str, int] = defaultdict(int)
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] += 1
    keys = own | {t.user_attrs["grid_point"] for t in study.get_trials(deepcopy=False) if "grid_point" in t.user_attrs}
    complete = {t.user_attrs["grid_point"] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    rows = [r for r in rows if point_key(r["point"]) in own]
    return {"rows": sorted(rows, key=lambda r: r["trial"]), "cells": cells, "states": dict(counts),
            "grid_size": len(spec.points()), "study_points": len(keys),
            "study_points_complete": len(complete & keys)}  # fmt: skip
