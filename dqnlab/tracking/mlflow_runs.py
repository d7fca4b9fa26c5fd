"""MLflow tracking: one parent run per study, one child run per seed (a trial of K replicas makes K; our own
small tracker).

:class:`MlflowRunTracker` is an engine callback: it buffers every log point and sends them with
``log_batch`` (per-call logging is ~100x slower), logs every config field as a param, tags the run
(trial number, grid point, status, git commit), writes the config and the full metric history as
artifacts, and ends the run FINISHED (completed/diverged), FAILED (crash) or KILLED (interrupt).
Metric keys are ``<section>/<name>`` (:func:`dqnlab.metrics.display_key`), so the MLflow UI groups
the charts (``eval/``, ``q/``, ``collapse/``, ``throughput/``, ``workers/``, ...); the history
artifact keeps the bare names that analysis reads. Experiments are tagged as model training
(``mlflow.experimentKind``), not GenAI. Telemetry is off unless the user turned it on.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# An unreachable tracking server should fail a sweep in seconds, not after MLflow's minutes of retries.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # our summary says where to look

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from dqnlab.metrics import ENV_STEPS, display_key  # noqa: E402

METRICS_PER_BATCH = 1000  # MLflow's log_batch limit
CONFIG_ARTIFACT = "config.json"  # the run's config, flat and typed (Config.to_flat; tuples as JSON lists)
HISTORY_ARTIFACT = "history.json"  # every log point and evaluation record, bare metric names
PARAMS_PER_BATCH = 100
STATUS_TO_MLFLOW = {"completed": "FINISHED", "diverged": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
TAG_STUDY = "dqnlab.study"
TAG_ROLE = "dqnlab.role"
PARENT_TAG = "mlflow.parentRunId"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # the MLflow UI then opens runs and charts, not GenAI traces


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)  # fmt: skip
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def get_or_create_experiment(client: MlflowClient, name: str, artifact_root: Path | None) -> str:
    """The experiment ``name`` (created if missing), tagged as model training for the MLflow UI."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            location = artifact_root.resolve().as_uri() if artifact_root is not None else None
            experiment_id = client.create_experiment(name, artifact_location=location,
                                                     tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})  # fmt: skip
            return experiment_id
        except Exception:  # another process created it first
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return exp.experiment_id


def get_or_create_parent(client: MlflowClient, experiment_id: str, study_name: str, tags: dict[str, str]) -> str:
    """The study's parent run, found again by tag when a study resumes, and RUNNING again: a sweep
    that starts is adding trials to it (:func:`close_parent` ends it when the grid is complete)."""
    flt = f"tags.`{TAG_STUDY}` = '{study_name}' and tags.`{TAG_ROLE}` = 'parent'"
    runs = client.search_runs([experiment_id], filter_string=flt, max_results=1, order_by=["attributes.start_time ASC"])
    if runs:
        if runs[0].info.status != "RUNNING":
            client.update_run(runs[0].info.run_id, status="RUNNING")
        return runs[0].info.run_id
    run = client.create_run(experiment_id, run_name=study_name, tags={TAG_STUDY: study_name, TAG_ROLE: "parent", **tags})
    return run.info.run_id


def close_parent(client: MlflowClient, parent_run_id: str, status: str) -> None:
    """End the study's parent run (``FINISHED``: every grid point complete; ``FAILED``: the sweep
    stopped with points that failed), so the UI shows its duration; a rerun sets it RUNNING again."""
    client.set_terminated(parent_run_id, status)


def start_trial_run(client: MlflowClient, experiment_id: str, parent_run_id: str | None, run_name: str,
                    tags: dict[str, str] | None = None, config: Any = None) -> str:  # fmt: skip
    """Create a trial's child run (RUNNING) and return its id; TrackingError if the store fails.
    With ``config``, its fields are logged at once as params (for the UI) and as ``config.json`` (typed,
    for analysis), so that a run cut off before its engine started still says which configuration and
    seed it was."""
    all_tags = {TAG_ROLE: "trial", "git_commit": git_commit(), **(tags or {})}
    if parent_run_id:
        all_tags[PARENT_TAG] = parent_run_id
    try:
        run_id = client.create_run(experiment_id, run_name=run_name, tags=all_tags).info.run_id
        if config is not None:
            log_params(client, run_id, config)
            client.log_dict(run_id, config.to_flat(), CONFIG_ARTIFACT)  # the typed config analysis reads
        return run_id
    except Exception as exc:
        raise TrackingError(f"MLflow tracking store failed ({type(exc).__name__}: {str(exc)[:500]})") from exc


def log_params(client: MlflowClient, run_id: str, config: Any) -> None:
    """Every config field as a param (``log_batch``, 100 at a time)."""
    params = [Param(k, param_str(v)) for k, v in config.to_flat().items()]
    for i in range(0, len(params), PARAMS_PER_BATCH):
        client.log_batch(run_id, params=params[i : i + PARAMS_PER_BATCH])


def flush_interval_s(runs: int) -> float:
    """Seconds between one tracker's flushes when a process logs ``runs`` runs at once: 10 s, or longer
    for many runs so the store takes about two batches a second from them all (110 replicas: 55 s)."""
    return max(10.0, runs / 2.0)


class TrackingError(RuntimeError):
    """The MLflow tracking store failed (server gone, database error); the message carries the reason."""


class ReplicaRuns:
    """Engine callback for a run of K replicas: one MLflow run per replica (a replica is a run), each
    fed that replica's config (its own seed), log points and result."""

    def __init__(self, trackers: list[MlflowRunTracker]):
        self.trackers = trackers

    def on_start(self, config: Any) -> None:
        for k, tracker in enumerate(self.trackers):
            tracker.on_start(config.replace(seed=config.run.seed + k, replicas=1))

    def on_log(self, replica: int, metrics: dict[str, float]) -> None:
        self.trackers[replica].on_log(metrics)

    def on_end(self, result: Any) -> None:
        for k, tracker in enumerate(self.trackers):
            if k < len(result.replicas):
                tracker.on_end(result.single(k))

    def close_unended(self, status: str, error: str = "") -> None:
        for tracker in self.trackers:
            tracker.close_unended(status, error)

    @property
    def broken(self) -> Exception | None:
        return next((t.broken for t in self.trackers if t.broken is not None), None)


class MlflowRunTracker:
    """Writes one child run (one replica; :class:`ReplicaRuns` routes a run's events to its replicas'
    trackers). Log points are buffered and sent when they fill one ``log_batch`` (1,000 metrics) or
    every ``flush_every_s`` seconds, whichever comes first (so the UI shows a long run live). The
    SQLite store's cost per metric falls with the batch's size (~390 us in batches of 2 log points,
    ~180 us in batches of 13: its per-batch queries of existing and latest metrics), so a trial of many
    replicas flushes each less often (:func:`flush_interval_s`).

    The first failed call to the store raises :class:`TrackingError` (the engine then stops the run
    as failed); after that the tracker is broken and its hooks do nothing, so the failure path of
    the run does not wait on the dead store a second time."""

    def __init__(self, client: MlflowClient, run_id: str, flush_every_s: float = 10.0, params_logged: bool = False):
        """Log into the existing run ``run_id`` (see :func:`start_trial_run`); ``params_logged``: its
        config was logged when it was created, ``on_start`` logs nothing more."""
        self.client = client
        self.run_id = run_id
        self.params_logged = params_logged
        self.flush_every_s = flush_every_s
        self._last_flush = time.monotonic()
        self.broken: Exception | None = None
        self.ended = False
        """Whether ``on_end`` closed the run (a run cut off before its engine started was not)."""
        self._pending: list[Metric] = []

    def _call(self, fn, *args, **kwargs):
        if self.broken is not None:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            self.broken = exc
            raise TrackingError(f"MLflow tracking store failed ({type(exc).__name__}: {str(exc)[:500]})") from exc

    def log_metric(self, key: str, value: float) -> None:
        self._call(self.client.log_metric, self.run_id, key, value)

    def on_start(self, config: Any) -> None:
        if not self.params_logged:
            self._call(log_params, self.client, self.run_id, config)

    def on_log(self, metrics: dict[str, float]) -> None:
        ts = int(time.time() * 1000)
        step = int(metrics.get(ENV_STEPS, 0))
        self._pending.extend(Metric(display_key(k), float(v), ts, step) for k, v in metrics.items())
        if len(self._pending) >= METRICS_PER_BATCH or time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        while self._pending and self.broken is None:
            chunk, self._pending = self._pending[:METRICS_PER_BATCH], self._pending[METRICS_PER_BATCH:]
            self._call(self.client.log_batch, self.run_id, metrics=chunk)

    def on_end(self, result: Any) -> None:
        if self.broken is not None:
            return
        self.flush()
        tags = [RunTag("status", result.status)]
        if result.error:
            tags.append(RunTag("error", result.error[:5000]))
        self._call(self.client.log_batch, self.run_id, tags=tags)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / CONFIG_ARTIFACT).write_text(json.dumps(result.config.to_flat(), indent=2))
            (Path(tmp) / HISTORY_ARTIFACT).write_text(json.dumps(result.history))
            (Path(tmp) / "summary.txt").write_text(result.summary() + "\n")
            for name in (CONFIG_ARTIFACT, HISTORY_ARTIFACT, "summary.txt"):
                self._call(self.client.log_artifact, self.run_id, str(Path(tmp) / name))
        self._call(self.client.set_terminated, self.run_id, STATUS_TO_MLFLOW.get(result.status, "FAILED"))
        self.ended = True

    def close_unended(self, status: str, error: str = "") -> None:
        """End a run that never reached ``on_end`` (its process was cut off before or without it) with
        ``status`` (completed/diverged/failed/interrupted); best effort: the store may be the problem."""
        if self.ended or self.broken is not None:
            return
        try:
            self.flush()  # the log points still buffered here are the run's record too
            self.client.set_tag(self.run_id, "status", status)
            if error:
                self.client.set_tag(self.run_id, "error", error[:5000])
            self.client.set_terminated(self.run_id, STATUS_TO_MLFLOW.get(status, "FAILED"))
            self.ended = True
        except Exception:  # the next call that needs the store reports its failure
            pass


def param_str(value: Any) -> str:
    """A config value as its run records it (an MLflow param is text; tuples comma-separated)."""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)
