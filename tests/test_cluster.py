"""One study from several sweep processes against real services: PostgreSQL (Debian's package),
``mlflow server`` on it, optuna-dashboard, and the MLflow UI in headless Chromium.

The services come up with ``python -m dqnlab.services up`` exactly as docs/cluster.md says. Without
PostgreSQL's server binaries or Chromium the tests skip, unless ``DQNLAB_REQUIRE_SERVICES=1``
(set by ``.ci/run``, which installs both), where they fail instead.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from browser import chromium, page_text, screenshot
from stores import wait_for_open_trial_runs

from dqnlab import metrics as M
from dqnlab.services.postgres import find_pg_bin, start_postgres, stop_postgres
from dqnlab.services.processes import alive, group_alive
from dqnlab.services.state import ServiceError, free_port, load_state
from tests.procs import pids_with

REPO = Path(__file__).resolve().parent.parent
STUDY = "ci-cluster"


def _missing() -> str | None:
    try:
        find_pg_bin()
    except ServiceError as exc:
        return str(exc)
    if chromium() is None:
        return "Chromium not found (apt-get install -y chromium)"
    return None


_reason = _missing()
if _reason and os.environ.get("DQNLAB_REQUIRE_SERVICES") == "1":
    raise RuntimeError(f"DQNLAB_REQUIRE_SERVICES=1 but {_reason}")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_reason is not None, reason=_reason or "")]


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dqnlab.services", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    # The PostgreSQL server runs as the 'postgres' user when we are root: it must reach the folder.
    base = Path(tempfile.mkdtemp(prefix="dqnlab-svc-", dir="/tmp"))
    base.chmod(0o755)
    root = base / "svc"
    dynshmem = root / "pg" / "pg_dynshmem"
    ports = [str(free_port()) for _ in range(3)]
    up = _cli("up", "--root", str(root), "--pg-port", ports[0], "--mlflow-port", ports[1], "--dashboard-port", ports[2])
    state = load_state(root)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert any(dynshmem.iterdir()), "the running server keeps no dynamic shared memory in its data folder"
        yield state
    finally:
        pids = dict(state.pids) if state else {}
        down = _cli("down", "--root", str(root))
        assert down.returncode == 0, down.stdout + down.stderr
        left = [p for p in pids.values() if alive(p) or group_alive(p)]
        left += pids_with(str(root))
        assert not left, f"service processes left after down: {left}"
        # its dynamic shared memory lives in its data folder (mmap), so what it leaves is its own, whatever
        # else runs on the machine (a suite beside this one, a system server): none after a clean down
        left_shm = sorted(p.name for p in dynshmem.iterdir())
        assert not left_shm, f"PostgreSQL left shared memory in {dynshmem}: {left_shm}"
        shutil.rmtree(base, ignore_errors=True)


def test_up_on_a_running_cluster_is_refused_and_leaves_it_running(cluster):
    again = _cli("up", "--root", cluster.root)
    assert again.returncode == 2 and "already running" in again.stderr, again.stderr
    status = _cli("status", "--root", cluster.root)
    assert status.returncode == 0 and "'mlflow'" in status.stdout and "'postgres'" in status.stdout, status.stdout


def _sweep(state, results: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "sweeps/utd.py", "--preset", "smoke", "--axis", "seed=0,1", "--total-steps", "2000",
           "--study-name", STUDY, "--storage", state.storage, "--tracking-uri", state.tracking_uri,
           "--results", str(results), "--quiet", "--no-report", *extra]  # fmt: skip
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def study_done(cluster, tmp_path_factory):
    """Two sweep processes, each with its own results folder (as on two machines), one study."""
    tmp = tmp_path_factory.mktemp("machines")
    procs = [_sweep(cluster, tmp / name) for name in ("machine-a", "machine-b")]
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=420)
            outputs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    return cluster


def test_every_grid_point_completes_exactly_once_across_processes(study_done):
    import optuna
    from optuna.trial import TrialState

    study = optuna.load_study(study_name=STUDY, storage=study_done.storage)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    keys = collections.Counter(t.user_attrs["grid_point"] for t in complete)
    assert len(keys) == 4 and set(keys.values()) == {1}, keys
    # set-up ran once under the advisory lock: the grid was enqueued once, so no duplicate was even created
    assert not [t for t in trials if "duplicate_of" in t.user_attrs]
    assert {t.state for t in trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    workers = {t.user_attrs["worker"] for t in complete}
    print(f"sweep processes that ran a trial: {sorted(workers)}")  # both, unless one drained the grid first


def test_one_mlflow_child_run_per_completed_trial_under_one_parent(study_done):
    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    client = MlflowClient(study_done.tracking_uri)
    exp = client.get_experiment_by_name("utd")
    parents = client.search_runs([exp.experiment_id], f"tags.`dqnlab.role` = 'parent' and tags.`dqnlab.study` = '{STUDY}'")
    assert len(parents) == 1
    children = client.search_runs([exp.experiment_id], f"tags.`dqnlab.role` = 'trial' and tags.`dqnlab.study` = '{STUDY}'")
    study = optuna.load_study(study_name=STUDY, storage=study_done.storage)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    expected = {r for t in complete for r in t.user_attrs["mlflow_run_ids"]}
    assert {r.info.run_id for r in children} == expected
    for run in children:
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, M.display_key(M.TD_LOSS))
        steps = [m.step for m in history]
        assert len(steps) >= 5 and steps == sorted(steps), steps
        assert "history.json" in {a.path for a in client.list_artifacts(run.info.run_id)}  # proxied artifacts


def test_analysis_report_builds_from_the_server(study_done, tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "analysis.report", "--tracking-uri", study_done.tracking_uri,
                           "--experiment", "utd", "--study", STUDY, "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "summary.md").read_text()
    assert "4 runs in" in summary
    assert (out / "learning_curves.png").stat().st_size > 10_000  # drawn from the downloaded histories


def test_optuna_dashboard_serves_the_study(study_done):
    with urllib.request.urlopen(f"{study_done.dashboard_url}/api/studies", timeout=30) as resp:
        studies = json.load(resp)["study_summaries"]
    assert STUDY in {s["study_name"] for s in studies}


def test_mlflow_ui_shows_the_experiment_and_its_runs_in_chromium(study_done, tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(study_done.tracking_uri)
    exp = client.get_experiment_by_name("utd")
    runs = client.search_runs([exp.experiment_id])
    base = f"{study_done.tracking_uri}/#/experiments/{exp.experiment_id}"
    profile = tmp_path / "chromium-profile"

    listing, _ = page_text(f"{base}/runs", profile, expect=f"{len(runs)} matching runs")
    assert "utd" in listing and STUDY in listing, listing[:2000]
    counted = re.search(r"(\d+) matching runs", listing)
    assert counted and int(counted.group(1)) == len(runs), listing[:2000]  # parent + every trial run

    for run in runs:
        if run.data.tags.get("dqnlab.role") != "trial":
            continue
        page, _ = page_text(f"{base}/runs/{run.info.run_id}", profile, expect="td_loss")
        assert run.info.run_name in page and "td_loss" in page and "utd_realised" in page, page[:2000]

    flt = urllib.parse.quote(f"tags.`dqnlab.study` = '{STUDY}'")
    trial = next(r for r in runs if r.data.tags.get("dqnlab.role") == "trial")
    shots = {"mlflow-ui-runs.png": f"{base}/runs?searchFilter={flt}",
             "mlflow-ui-trial.png": f"{base}/runs/{trial.info.run_id}"}  # fmt: skip
    keep = os.environ.get("DQNLAB_CI_ARTIFACTS")
    for name, url in shots.items():
        shot = tmp_path / name
        assert screenshot(url, profile, shot) > 20_000  # a rendered page, not a blank one
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(keep) / name)


def _restart_postgres(state) -> None:
    """The restarted server belongs to the module's cluster, not to the test: it must not carry the
    test's leak-guard tag (the guard would take it for a leak)."""
    from conftest import TAG

    tag = os.environ.pop(TAG, None)
    try:
        start_postgres(state)
    finally:
        if tag is not None:
            os.environ[TAG] = tag


def test_postgres_going_away_mid_sweep_stops_it_and_a_rerun_resumes(cluster, tmp_path):
    """Last in this module: it stops and restarts the database under the running MLflow server."""
    import optuna
    from optuna.trial import TrialState

    study_name = "ci-pg-outage"
    extra = ("--study-name", study_name, "--axis", "utd=1", "--total-steps", "8000", "--heartbeat-s", "2",
             "--grace-s", "5")  # fmt: skip
    proc = _sweep(cluster, tmp_path / "a", *extra)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                study = optuna.load_study(study_name=study_name, storage=cluster.storage)
                if study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    break
            except KeyError:  # not created yet
                pass
            time.sleep(0.5)
        wait_for_open_trial_runs(cluster.tracking_uri, "utd", proc)  # MLflow has the trial's run: the database goes next
        stop_postgres(cluster)
        start = time.monotonic()
        out, _ = proc.communicate(timeout=120)
    finally:
        _restart_postgres(cluster)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"PostgreSQL stopped mid-trial: sweep exited {proc.returncode} after {time.monotonic() - start:.1f} s")
    assert proc.returncode == 3, out[-3000:]
    assert "Optuna storage failed" in out and "rerun the same command" in out
    time.sleep(6)  # past --grace-s: the cut-off trial is stale
    rerun = _sweep(cluster, tmp_path / "b", *extra)
    out, _ = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, out[-3000:]
    study = optuna.load_study(study_name=study_name, storage=cluster.storage)
    complete = [t.user_attrs["grid_point"] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    assert len(complete) == 2 and len(set(complete)) == 2
    assert [t.state for t in study.get_trials(deepcopy=False)].count(TrialState.FAIL) == 1  # the cut-off one
