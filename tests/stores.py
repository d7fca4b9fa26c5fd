"""Watching a running sweep's MLflow store from a test, without racing the sweep that creates it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

TRIAL_RUNS_OPEN = "attributes.status = 'RUNNING' and tags.`dqnlab.role` = 'trial'"


def wait_for_open_trial_runs(tracking_uri: str, experiment: str, proc: subprocess.Popen, count: int = 1,
                             results: Path | None = None, timeout_s: float = 120) -> None:  # fmt: skip
    """Until the sweep ``proc`` has ``count`` trial runs of ``experiment`` open (RUNNING) in MLflow.

    A client opened on a SQLite file creates MLflow's tables when they are missing, so a client opened
    while the sweep creates them clashes with it (the sweep then exits 1). For a local store pass the
    sweep's ``results``: the client is opened under the sweep's own set-up lock, after or before the
    sweep's set-up, never during it. ``timeout_s`` is a hang detector; a sweep that exits first fails."""
    from mlflow.tracking import MlflowClient

    from dqnlab.study.storage import locations, setup_lock

    if results is not None:
        with setup_lock(locations(results, None, tracking_uri)):
            client = MlflowClient(tracking_uri)
            client.get_experiment_by_name(experiment)  # the store is created (or checked) here
    else:
        client = MlflowClient(tracking_uri)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            exp = client.get_experiment_by_name(experiment)
            if exp and len(client.search_runs([exp.experiment_id], TRIAL_RUNS_OPEN)) >= count:
                return
        except Exception:  # a server still starting
            pass
        time.sleep(0.2)
    exited = f" (the sweep exited {proc.returncode} first)" if proc.poll() is not None else ""
    raise AssertionError(f"the sweep never had {count} trial run(s) open{exited}")
