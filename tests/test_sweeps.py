"""Sweeps end to end on temporary folders: grid completeness, MLflow records, resume, concurrency."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import pids_with
from stores import wait_for_open_trial_runs

from dqnlab import metrics as M

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
UTD = [sys.executable, str(ROOT / "sweeps" / "utd.py")]
TINY = ["--preset", "smoke", "--quiet"]


def sweep_here(sweep: str, argv: list[str]) -> int:
    """``python sweeps/<sweep>.py ARGV``'s exit code, run in this process (its command line parsed and
    checked exactly as the script's; no interpreter to start: a test of bad input costs milliseconds)."""
    import importlib.util

    from dqnlab.study.cli import sweep_main

    module_spec = importlib.util.spec_from_file_location(f"sweep_{sweep}", ROOT / "sweeps" / f"{sweep}.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)  # the presets; its __main__ block does not run
    objective = {"utd": "eval", "throughput": "throughput"}[sweep]
    return sweep_main(sweep, module.PRESETS, "default", objective=objective, argv=argv)


def run_utd(results: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*UTD, *TINY, "--results", str(results), *extra], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)  # fmt: skip


def trial_rows(results: Path) -> list[tuple[int, str, str | None]]:
    """(number, state, grid_point) of every trial, straight from the Optuna database."""
    with sqlite3.connect(results / "optuna.db") as db:
        rows = db.execute(
            "select t.number, t.state, (select value_json from trial_user_attributes a "
            "where a.trial_id = t.trial_id and a.key = 'grid_point') from trials t order by t.number"
        ).fetchall()
    return rows


def completed_points(results: Path) -> list[str]:
    return [p for _, state, p in trial_rows(results) if state == "COMPLETE"]


def mlflow_runs(results: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    exp = client.get_experiment_by_name("utd")
    return client, client.search_runs([exp.experiment_id], max_results=1000)


def test_smoke_sweep_records_every_trial_and_a_rerun_adds_nothing(tmp_path, capsys):
    res = run_utd(tmp_path)
    assert res.returncode == 0, res.stderr
    assert "2/2 grid points complete" in res.stdout and "python -m dqnlab.ui --results" in res.stdout
    points = completed_points(tmp_path)
    assert len(points) == 2 and len(set(points)) == 2
    client, runs = mlflow_runs(tmp_path)
    parents = [r for r in runs if r.data.tags.get("dqnlab.role") == "parent"]
    children = [r for r in runs if r.data.tags.get("dqnlab.role") == "trial"]
    assert len(parents) == 1 and len(children) == 2
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert child.info.status == "FINISHED" and child.data.tags["status"] == "completed"
        assert {"trial_number", "grid_point", "git_commit"} <= set(child.data.tags)
        assert child.data.params["utd"] in ("1.0", "4.0") and "hidden_sizes" in child.data.params
        for key in (M.TD_LOSS, M.UTD_REALISED, M.Q_MEAN, M.SRANK, M.EVAL_RETURN_MEAN, M.POLICY_LAG_RUN_MEAN):
            assert client.get_metric_history(child.info.run_id, M.display_key(key)), key  # e.g. q/td_loss
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"config.json", "history.json"} <= artifacts
    rerun = run_utd(tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    assert len(trial_rows(tmp_path)) == 2
    assert len(mlflow_runs(tmp_path)[1]) == 3
    # a dry run on the study says what is left to run, and refuses what a run would refuse; it writes nothing
    assert sweep_here("utd", [*TINY, "--results", str(tmp_path), "--dry-run"]) == 0
    assert "2 of them complete" in (out := capsys.readouterr().out) and "for the 0 points to run" in out
    assert sweep_here("utd", [*TINY, "--results", str(tmp_path), "--dry-run", "--set", "lr=0.5"]) == 2
    assert "lr = 0.5 (the study's: " in capsys.readouterr().err
    assert len(trial_rows(tmp_path)) == 2


def test_diverging_run_is_a_completed_trial_and_the_sweep_goes_on(tmp_path):
    res = run_utd(tmp_path, "--axis", "lr=0.001,1e12", "--axis", "utd=4", "--set", "max_grad_norm=1e30")
    assert res.returncode == 0, res.stderr
    assert len(completed_points(tmp_path)) == 2
    client, runs = mlflow_runs(tmp_path)
    statuses = sorted(r.data.tags.get("status") for r in runs if r.data.tags.get("dqnlab.role") == "trial")
    assert statuses == ["completed", "diverged"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--axis", "utdd=1,2"], "unknown config field or sweep axis 'utdd'"),
        (["--axis", "utd="], "no values given"),
        (["--axis", "reset=sometimes"], "reset: got 'sometimes'"),
        (["--tracking-uri", "./mlruns"], "--tracking-uri"),
        (["--storage", "not a url"], "--storage"),
        (["--env", "NoSuchEnv-v0"], "env_id"),
        (["--set", "gamma=-1"], "gamma: got -1.0"),
        (["--set", "utd=2"], "is a grid axis"),
        (["--seeds", "3", "--axis", "seed=0,3"], "--seeds: given with --axis seed=...; allowed: one of them"),
        (["--set", "replicas=3", "--axis", "seed=0,2"], "seed: blocks 0..2 and 2.. overlap"),
        (["--axis", "replicas=2,3", "--axis", "seed=0,2"], "seed: blocks 0..1 and 0.. overlap"),  # one cell
    ],
)
def test_bad_flags_fail_fast_and_write_nothing(tmp_path, extra, message, capsys):
    results = tmp_path / "results"
    assert sweep_here("utd", [*TINY, "--results", str(results), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not results.exists()


def test_the_sweep_script_exits_2_on_bad_input_and_writes_nothing(tmp_path):
    results = tmp_path / "results"  # the script itself, as a user runs it (the cases above run its parser here)
    res = run_utd(results, "--axis", "utdd=1,2", timeout=120)
    assert res.returncode == 2 and "unknown config field or sweep axis 'utdd'" in res.stderr
    assert not results.exists()


def test_two_processes_on_one_fresh_study_run_every_point_once(tmp_path):
    args = [*UTD, *TINY, "--results", str(tmp_path), "--axis", "utd=0.5,1,2,4"]
    procs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    points = completed_points(tmp_path)
    assert len(points) == 4 and len(set(points)) == 4
    _, runs = mlflow_runs(tmp_path)
    assert sum(r.data.tags.get("dqnlab.role") == "parent" for r in runs) == 1


def test_seeds_are_replicas_one_child_run_per_seed_and_one_row_per_seed_in_analysis(tmp_path):
    res = run_utd(tmp_path, "--seeds", "3")
    assert res.returncode == 0, res.stderr[-3000:]
    client, runs = mlflow_runs(tmp_path)
    trials = [r for r in runs if r.data.tags.get("dqnlab.role") == "trial"]
    by_trial: dict[str, list[int]] = {}
    for r in trials:
        by_trial.setdefault(r.data.tags["trial_number"], []).append(int(r.data.params["seed"]))
        assert r.data.params["replicas"] == "1" and r.info.status == "FINISHED"  # a replica is a run
    assert len(by_trial) == 2 and all(sorted(seeds) == [0, 1, 2] for seeds in by_trial.values())
    import optuna

    study = optuna.load_study(study_name="utd-smoke", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    for t in study.trials:  # the trial's value is the IQM over its seeds, each seed's value kept
        assert set(t.user_attrs["seed_values"]) == {"0", "1", "2"}
    from analysis.load import load

    table, _ = load(f"sqlite:///{tmp_path / 'mlflow.db'}", "utd", "utd-smoke")
    assert len(table) == 6 and table.groupby("utd")["seed"].apply(sorted).tolist() == [[0, 1, 2], [0, 1, 2]]


def test_a_cell_split_into_seed_blocks_is_the_cell_run_as_one_trial(tmp_path):
    """In serial mode a replica's run depends on its seed alone, so a cell too long for one sitting runs as
    blocks of seeds (a seed axis with replicas K: trials of seeds ``seed .. seed+K-1``, resumed block by block)
    and the analysis pools them: the cell has the same seeds, final returns and greedy curves as one trial of
    all of them. (Blocks that overlap, a seed counted twice, are refused before anything runs: the bad-flags
    cases above.)"""
    from analysis.cells import axes
    from analysis.load import load

    common = ["--preset", "smoke", "--quiet", "--no-report", "--results", str(tmp_path), "--axis", "utd=1",
              "--set", "mode=serial"]  # fmt: skip
    assert sweep_here("utd", [*common, "--seeds", "4", "--study-name", "whole"]) == 0
    assert sweep_here("utd", [*common, "--set", "replicas=2", "--axis", "seed=0,2", "--study-name", "blocks"]) == 0
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (whole, whole_hist), (blocks, blocks_hist) = load(uri, "utd", "whole"), load(uri, "utd", "blocks")
    assert blocks["trial_number"].nunique() == 2 and whole["trial_number"].nunique() == 1
    assert axes(blocks) == [] and sorted(blocks["seed"]) == sorted(whole["seed"]) == [0, 1, 2, 3]  # one cell

    def by_seed(runs, hist):
        curves = hist[hist["metric"] == M.EVAL_RETURN_MEAN].merge(runs[["run_id", "seed"]], on="run_id")
        return ({s: r for s, r in zip(runs["seed"], runs["final_return"])},
                {s: g.sort_values(M.ENV_STEPS)["value"].tolist() for s, g in curves.groupby("seed")})  # fmt: skip

    whole_returns, whole_curves = by_seed(whole, whole_hist)
    assert by_seed(blocks, blocks_hist) == (whole_returns, whole_curves)
    assert [len(c) for c in whole_curves.values()] == [3] * 4  # evaluations at 500, 1,000 and 1,500 env steps


def test_a_reader_holding_the_study_stores_open_never_stops_a_sweep(tmp_path):
    """A notebook, the MLflow UI or an analysis query reading a running study's SQLite stores held a read
    transaction; in SQLite's default mode no writer could commit meanwhile, and MLflow's writes gave up
    after 5 s, failing the trial (``database is locked``). The stores are in write-ahead-log mode: with a
    read transaction open on each store for the whole sweep, every point completes and is recorded."""
    common = ["--preset", "smoke", "--quiet", "--no-report", "--results", str(tmp_path)]
    assert sweep_here("utd", [*common, "--axis", "utd=1", "--study-name", "first"]) == 0  # the stores exist
    readers = []
    for store in ("mlflow.db", "optuna.db"):
        reader = sqlite3.connect(tmp_path / store, isolation_level=None)
        assert reader.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0  # holds a read snapshot
        readers.append(reader)
    try:
        assert sweep_here("utd", [*common, "--study-name", "second"]) == 0
    finally:
        for reader in readers:
            reader.execute("ROLLBACK")
            reader.close()
    client, runs = mlflow_runs(tmp_path)
    second = [r for r in runs if r.data.tags.get("dqnlab.study") == "second" and r.data.tags.get("dqnlab.role") == "trial"]
    assert sorted(r.info.status for r in second) == ["FINISHED", "FINISHED"]


def test_sigkill_mid_trial_then_rerun_completes_every_point_exactly_once(tmp_path):
    slow = ["--axis", "utd=1,2", "--total-steps", "6000", "--heartbeat-s", "1", "--grace-s", "2", "--seeds", "2"]
    proc = subprocess.Popen([*UTD, *TINY, "--results", str(tmp_path), *slow], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    # inside the trial: both seeds' MLflow runs are open
    wait_for_open_trial_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "utd", proc, 2, results=tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    time.sleep(3.5)  # past the grace period (a heartbeat stops when its process dies): the trial is stale
    # the killed sweep's actors (forked: same command line, which names tmp_path) notice and exit
    deadline = time.monotonic() + 120  # a hang detector
    while (orphans := [pid for pid in pids_with(str(tmp_path)) if pid != proc.pid]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert orphans == [], f"orphaned actor processes: {orphans}"
    res = run_utd(tmp_path, *slow)
    assert res.returncode == 0, res.stderr
    points = completed_points(tmp_path)
    assert len(points) == 2 and len(set(points)) == 2
    states = [state for _, state, _ in trial_rows(tmp_path)]
    assert "FAIL" in states  # the killed trial is kept, marked failed
    _, runs = mlflow_runs(tmp_path)
    trial_runs = [r for r in runs if r.data.tags.get("dqnlab.role") == "trial"]
    assert sorted(r.info.status for r in trial_runs) == ["FINISHED"] * 4 + ["KILLED"] * 2  # 2 seeds per trial
    # the analysis counts each seed of the killed-and-rerun point once, with its finished run
    from analysis.load import load

    table, histories = load(f"sqlite:///{tmp_path / 'mlflow.db'}", "utd", "utd-smoke")
    assert len(table) == 4 and not table.duplicated(["grid_point", "seed"]).any()
    assert set(table["mlflow_status"]) == {"FINISHED"}
    assert set(histories["run_id"]) == set(table["run_id"])


def test_unreachable_storage_fails_fast_with_a_clear_error(tmp_path):
    res = run_utd(tmp_path / "r", "--storage", f"sqlite:///{tmp_path}/no/such/dir/optuna.db", timeout=60)
    assert res.returncode == 2
    assert "--storage: cannot open Optuna storage" in res.stderr


def test_a_crashing_trial_is_failed_in_optuna_and_mlflow_and_the_sweep_goes_on(tmp_path):
    import test_engine  # registers dqnlab-test/Exploding-v0 (its actors raise after 300 steps)

    from dqnlab.study.runner import run_sweep
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations

    assert test_engine
    spec = SweepSpec("crash", "crash-test", dict(total_env_steps=1500, learning_starts=100, batch_size=32,
                     probe_size=32, hidden_sizes=(16,), eval_every_steps=500, eval_episodes=1, num_workers=1),
                     {"env_id": ["dqnlab-test/Exploding-v0", "CartPole-v1"]})  # fmt: skip
    summary = run_sweep(spec, locations(tmp_path, None, None), quiet=True)
    assert [r["point"]["env_id"] for r in summary["rows"]] == ["CartPole-v1"]
    assert summary["states"] == {"FAIL": 1, "COMPLETE": 1}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("crash")
    runs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("dqnlab.role") == "trial"]
    failed = [r for r in runs if r.info.status == "FAILED"]
    assert len(failed) == 1 and "boom: injected env failure" in failed[0].data.tags["error"]
    assert client.get_metric_history(failed[0].info.run_id, M.display_key(M.TD_LOSS)), "metrics before the crash are kept"


def test_a_configuration_this_machine_refuses_fails_its_trial_and_the_sweep_goes_on(tmp_path):
    # a study with cuda points joined from a machine without CUDA (like this one, and CI)
    import torch

    from dqnlab.study.runner import run_sweep
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    spec = SweepSpec("refuse", "refuse-test", dict(total_env_steps=800, learning_starts=200, batch_size=32,
                     probe_size=32, hidden_sizes=(16,), eval_every_steps=400, eval_episodes=1, num_workers=1),
                     {"device": ["cuda", "cpu"]})  # fmt: skip
    summary = run_sweep(spec, locations(tmp_path, None, None), quiet=True)
    assert [r["point"]["device"] for r in summary["rows"]] == ["cpu"]
    assert summary["states"] == {"FAIL": 1, "COMPLETE": 1}
    import optuna

    study = optuna.load_study(study_name="refuse-test", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    failed = [t for t in study.trials if t.state.name == "FAIL"][0]
    assert "configuration refused on" in failed.user_attrs["error"] and "device: got 'cuda'" in failed.user_attrs["error"]
    client, _ = _client(tmp_path, "refuse")
    run = client.get_run(failed.user_attrs["mlflow_run_ids"][0])
    assert run.info.status == "FAILED" and "device" in run.data.tags["error"]


def _client(results: Path, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    return client, client.get_experiment_by_name(experiment)


def test_the_study_run_is_closed_with_its_cells_and_running_again_while_a_rerun_adds_trials(tmp_path, monkeypatch):
    import mlflow

    from dqnlab.engine import fresh_process as trial_process
    from dqnlab.study.runner import run_sweep
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations
    from dqnlab.tracking import mlflow_runs as tracking
    from dqnlab.tracking.mlflow_runs import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG

    base = dict(total_env_steps=800, learning_starts=200, batch_size=32, probe_size=32, hidden_sizes=(16,),
                eval_every_steps=400, eval_episodes=1, num_workers=1, mode="serial")  # fmt: skip
    spec = SweepSpec("study", "study-test", base, {"utd": [1.0], "seed": [0, 1]})
    loc = locations(tmp_path, None, None)
    real = trial_process.run_trial

    def second_trial_dies(request, callbacks, server=None):
        if request.config.run.seed == 1:
            return trial_process.TrialOutcome(trial_process.Outcome.DIED, None, "injected: the trial process was killed")
        return real(request, callbacks, server)

    monkeypatch.setattr(trial_process, "run_trial", second_trial_dies)
    run_sweep(spec, loc, quiet=True)
    client, exp = _client(tmp_path, "study")
    assert exp.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND  # opened as model training, not GenAI
    parent = client.search_runs([exp.experiment_id], filter_string="tags.`dqnlab.role` = 'parent'")[0]
    assert parent.info.status == "FAILED" and parent.info.end_time  # a point failed: closed, with its duration
    first_end = parent.info.end_time

    monkeypatch.setattr(trial_process, "run_trial", real)
    seen = []  # the parent's status while the rerun's trial starts
    original = tracking.MlflowRunTracker.on_start

    def on_start(self, config):
        seen.append(client.get_run(parent.info.run_id).info.status)
        original(self, config)

    monkeypatch.setattr(tracking.MlflowRunTracker, "on_start", on_start)
    run_sweep(spec, loc, quiet=True)  # the rerun runs the failed point again
    assert seen == ["RUNNING"]  # a rerun that adds trials reopens the study's run
    parent = client.get_run(parent.info.run_id)
    assert parent.info.status == "FINISHED" and parent.info.end_time > first_end
    cells = mlflow.artifacts.load_dict(f"{parent.info.artifact_uri}/summary/cells.json")["cells"]
    assert len(cells) == 1 and cells[0]["n_seeds"] == 2 and cells[0]["utd"] == 1.0
    assert client.get_run(parent.info.run_id).data.metrics["points_complete"] == 2


@pytest.mark.parametrize("study", ["replay_ratio", "parallel", "workers", "writers"])
def test_each_finding_study_runs_its_smoke_preset(finding_smokes, study):
    results, stdout = finding_smokes  # each smoke preset run once per session (tests/conftest.py)
    points = 4 if study == "replay_ratio" else 2  # replay_ratio: target unit x variant
    assert f"{points}/{points} grid points complete" in stdout[study]
    from analysis.load import load

    table, _ = load(f"sqlite:///{results / 'mlflow.db'}", study, f"{study}-smoke")
    seeds = 1 if study == "writers" else 2  # naive writers refuse replicas
    assert len(table) == points * seeds and table["outcome"].eq("completed").all()
    varied = {"replay_ratio": "reset", "parallel": "mode", "workers": "worker_step_delay_s", "writers": "writers"}[study]
    assert table[varied].astype(str).nunique() == 2  # the variant's fields reached the runs


def test_the_default_utd_preset_runs_its_jobs_without_a_core_warning_on_two_cores(monkeypatch, capsys):
    import importlib.util

    from dqnlab.study.cli import build_parser, spec_from_args
    from dqnlab.study.spec import warn_cpu_budget

    path = ROOT / "sweeps" / "utd.py"
    module = importlib.util.module_from_spec(spec := importlib.util.spec_from_file_location("utd_sweep", path))
    spec.loader.exec_module(module)
    args = build_parser("utd", module.PRESETS, "default").parse_args([])
    study = spec_from_args("utd", args, module.PRESETS, "eval")
    jobs = module.PRESETS["default"]["jobs"]
    assert jobs == 2 and study.base["replicas"] >= 8  # both cores busy, >= 8 seeds per cell
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    warn_cpu_budget(study, jobs)
    assert capsys.readouterr().err == ""
    warn_cpu_budget(study, jobs + 1)  # and the warning does fire when the jobs outnumber the cores
    assert "will compete" in capsys.readouterr().err


def test_a_fresh_study_with_two_jobs_runs_both_and_exits_cleanly(tmp_path):
    # the README's first command is a `--jobs 2` sweep on a fresh results folder; both trial processes
    # used to create the claims table at once, and one died ("table already exists")
    res = run_utd(tmp_path, "--axis", "utd=1,2", "--jobs", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "already exists" not in res.stderr
    points = completed_points(tmp_path)
    assert len(points) == 2 and len(set(points)) == 2  # each point once (the table race: test_claims.py)
    with sqlite3.connect(tmp_path / "optuna.db") as db:
        workers = {w for (w,) in db.execute("select value_json from trial_user_attributes where key = 'worker'")}
    print(f"trial processes that ran a trial: {sorted(workers)}")  # both, unless one drained the grid first


def test_a_throughput_study_refuses_replicas_since_they_share_one_measurement(capsys):
    # K replicas of one run share its processes and clock: their "seeds" would be K copies of one figure
    assert sweep_here("throughput", ["--seeds", "3", "--dry-run"]) == 2
    assert "replicas: got 3 in a throughput study" in capsys.readouterr().err
    assert sweep_here("throughput", ["--axis", "seed=0,1", "--dry-run"]) == 0


def test_a_dry_run_on_an_empty_store_creates_no_table_and_an_unreachable_one_is_named(tmp_path, capsys):
    """A dry run reads only: opening an empty store through Optuna created its tables (an empty PostgreSQL
    database, or here an empty SQLite file, the same code path). A store it cannot reach is bad input, named
    without its password."""
    import sqlite3

    store = tmp_path / "optuna.db"
    sqlite3.connect(store).close()  # an empty database file
    assert sweep_here("utd", [*TINY, "--results", str(tmp_path), "--dry-run"]) == 0
    assert "0 of them complete" in capsys.readouterr().out
    with sqlite3.connect(store) as db:
        assert db.execute("select name from sqlite_master").fetchall() == []
    unreachable = "postgresql+psycopg2://dq:secret@127.0.0.1:1/studies"  # port 1: nothing listens
    assert sweep_here("utd", [*TINY, "--results", str(tmp_path), "--storage", unreachable, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--storage: cannot open Optuna storage 'postgresql+psycopg2://dq:***@127.0.0.1:1/studies'" in err
    assert "secret" not in err


def test_a_dry_run_plans_each_cells_seeds_for_a_half_width_from_a_pilot_studys_runs(tmp_path, capsys):
    """``--dry-run --half-width H --pilot STUDY`` reads the pilot's seed runs by grid point (its seed axis
    or replicas, alike) and prints the seeds each cell needs, as :func:`seeds_for_half_width` gives them
    from those values; a cell with fewer than 5 pilot seeds says so; a half-width without --dry-run is
    refused by name."""
    import json

    import numpy as np
    from mlflow.tracking import MlflowClient

    from dqnlab.metrics import OBJECTIVE, display_key
    from dqnlab.statistics import seeds_for_half_width

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("utd", artifact_location=str(tmp_path / "mlartifacts"))
    rng = np.random.default_rng(0)
    pilot = {1.0: rng.normal(200, 60, 5), 4.0: rng.normal(150, 20, 4)}  # UTD 4: too few seeds to plan
    for utd, values in pilot.items():
        for seed, v in enumerate(values):
            key = json.dumps({"seed": seed, "target_unit": "updates", "utd": utd})  # a pilot with a seed axis
            run = client.create_run(exp, tags={"dqnlab.study": "utd-pilot", "grid_point": key})
            client.log_metric(run.info.run_id, display_key(OBJECTIVE), float(v))
            client.set_terminated(run.info.run_id)
    # seed 0 of UTD 1 run again by a later trial (its first record was cut short): counted once, the first
    again = json.dumps({"seed": 0, "target_unit": "updates", "utd": 1.0})
    run = client.create_run(exp, tags={"dqnlab.study": "utd-pilot", "grid_point": again, "trial_number": "9"})
    client.log_metric(run.info.run_id, display_key(OBJECTIVE), 900.0)
    client.set_terminated(run.info.run_id)
    argv = ["--results", str(tmp_path), "--axis", "utd=1,4", "--axis", "target_unit=updates", "--seeds", "8",
            "--dry-run", "--half-width", "25", "--pilot", "utd-pilot"]  # fmt: skip
    assert sweep_here("utd", argv) == 0
    out = capsys.readouterr().out
    need = seeds_for_half_width([pilot[1.0]], 25)
    assert f'{{"target_unit": "updates", "utd": 1.0}}: pilot 5 seeds -> {need} seeds' in out
    assert '{"target_unit": "updates", "utd": 4.0}: pilot has 4 finite seed(s); needs >= 5 to plan' in out
    assert sweep_here("utd", ["--half-width", "25"]) == 2
    assert "--half-width: got 25.0; allowed: a number > 0, with --dry-run" in capsys.readouterr().err


def test_an_interrupt_while_a_trials_run_is_being_described_still_closes_that_run(tmp_path, monkeypatch):
    """Ctrl-C landing after MLflow created a trial's run but before its id came back (while its params are
    logged) used to leave the run RUNNING (seen once in CI's fault test): the trial's runs the store holds
    are closed as KILLED with the trial marked interrupted."""
    import pytest

    from dqnlab.study.runner import run_sweep
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations
    from dqnlab.tracking import mlflow_runs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt("SIGINT")

    monkeypatch.setattr(mlflow_runs, "log_params", interrupted)  # the run exists; start_trial_run never returns
    base = dict(total_env_steps=400, learning_starts=200, batch_size=32, probe_size=32, num_workers=1, mode="serial")
    spec = SweepSpec("utd", "cut", base, {"utd": [1.0]})
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, locations(tmp_path, None, None), quiet=True)
    client, exp = _client(tmp_path, "utd")
    trial_runs = client.search_runs([exp.experiment_id], filter_string="tags.`dqnlab.role` = 'trial'")
    assert [r.info.status for r in trial_runs] == ["KILLED"]


def test_a_grid_grows_between_commands_and_a_changed_base_is_refused_by_name(tmp_path):
    """A study's grid may gain values on an axis (Optuna's categorical parameters refused that: the
    widened command failed its first new trial); its terms (base config, axes, objective) may not
    change: one study never mixes two configurations of a cell."""
    from dqnlab.study.runner import run_sweep
    from dqnlab.study.spec import SweepError, SweepSpec
    from dqnlab.study.storage import locations

    base = dict(total_env_steps=400, learning_starts=200, batch_size=32, probe_size=32, hidden_sizes=(16,),
                eval_every_steps=400, eval_episodes=1, num_workers=1, mode="serial")  # fmt: skip
    loc = locations(tmp_path, None, None)
    run_sweep(SweepSpec("study", "grows", base, {"utd": [1.0]}), loc, quiet=True)
    with sqlite3.connect(tmp_path / "optuna.db") as db:  # as a study made before studies kept their terms
        db.execute("delete from study_user_attributes where key = 'dqnlab.terms'")
    with pytest.raises(SweepError, match=re.escape("total_env_steps = '800' (the study's trial 0 ran '400')")):
        run_sweep(SweepSpec("study", "grows", dict(base, total_env_steps=800), {"utd": [1.0]}), loc, quiet=True)
    summary = run_sweep(SweepSpec("study", "grows", base, {"utd": [1.0, 4.0]}), loc, quiet=True)
    assert summary["states"] == {"COMPLETE": 2} and summary["grid_size"] == 2
    rows = trial_rows(tmp_path)
    assert [state for _, state, _ in rows] == ["COMPLETE", "COMPLETE"]  # the first point was not run again
    assert sorted(json.loads(p) for _, _, p in rows) == ['{"utd": 1.0}', '{"utd": 4.0}']
    for changed, message in [
        (dict(base, total_env_steps=800), "total_env_steps = 800 (the study's: 400)"),
        (dict(base, hidden_sizes=(32,)), "hidden_sizes = '32' (the study's: '16')"),
    ]:
        with pytest.raises(SweepError, match=re.escape(message)):
            run_sweep(SweepSpec("study", "grows", changed, {"utd": [1.0, 4.0]}), loc, quiet=True)
    with pytest.raises(SweepError, match=re.escape("axes ['seed', 'utd'] (the study's: ['utd'])")):
        run_sweep(SweepSpec("study", "grows", base, {"utd": [1.0], "seed": [0, 1]}), loc, quiet=True)
    assert len(trial_rows(tmp_path)) == 2  # refused before anything was enqueued

    # a command runs its own grid only: a point a wider command left queued (here: queued, never run) stays
    # waiting for it, though this command pops it first (the costliest point is queued first)
    from dqnlab.study.queue import open_study, top_up_queue
    from dqnlab.study.storage import make_storage

    wider = SweepSpec("study", "grows", base, {"utd": [1.0, 4.0, 8.0, 16.0]})
    top_up_queue(open_study(wider, make_storage(loc.storage, heartbeat_s=10, grace_s=30)), wider)
    summary = run_sweep(SweepSpec("study", "grows", base, {"utd": [1.0, 4.0, 8.0]}), loc, quiet=True)
    assert len(summary["rows"]) == summary["grid_size"] == 3
    assert (summary["study_points"], summary["study_points_complete"]) == (4, 3)  # the study's run stays open
    states = {json.loads(p): state for _, state, p in trial_rows(tmp_path) if state != "PRUNED"}
    assert states == {'{"utd": 1.0}': "COMPLETE", '{"utd": 4.0}': "COMPLETE", '{"utd": 8.0}': "COMPLETE",
                      '{"utd": 16.0}': "WAITING"}  # fmt: skip


def test_an_interrupted_trials_buffered_metrics_are_kept_when_a_second_interrupt_cuts_its_record(tmp_path,
                                                                                                 monkeypatch):
    """An interrupted trial's log points still buffered in the sweep are flushed before the study's record
    is written: a second Ctrl-C (or a store error) in that write lost them."""
    import optuna

    from dqnlab.engine import fresh_process as trial_process
    from dqnlab.study.runner import run_sweep
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations

    def interrupted_after_one_log_point(request, callbacks, server=None):
        callbacks[0].on_log(0, {M.ENV_STEPS: 100.0, M.TD_LOSS: 0.5})  # buffered, not yet sent
        return trial_process.TrialOutcome(trial_process.Outcome.INTERRUPTED, None, "interrupted (SIGINT/SIGTERM)")

    real_set = optuna.trial.Trial.set_user_attr

    def second_interrupt_in_the_record(trial, key, value):
        if (key, value) == ("status", "interrupted"):
            raise KeyboardInterrupt("SIGINT")
        real_set(trial, key, value)

    monkeypatch.setattr(trial_process, "run_trial", interrupted_after_one_log_point)
    monkeypatch.setattr(optuna.trial.Trial, "set_user_attr", second_interrupt_in_the_record)
    spec = SweepSpec("flush", "flush-test", dict(total_env_steps=600, learning_starts=256, num_workers=1,
                                                 mode="serial"), {"utd": [1.0]})  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, locations(tmp_path, None, None), quiet=True)
    client, exp = _client(tmp_path, "flush")
    run = client.search_runs([exp.experiment_id], filter_string="tags.`dqnlab.role` = 'trial'")[0]
    assert run.data.metrics[M.display_key(M.TD_LOSS)] == 0.5


def test_the_summary_says_when_points_are_missing_because_trials_still_show_running(tmp_path):
    # a rerun within --grace-s of a killed sweep finds its trial RUNNING, leaves it and ends with exit 0:
    # the summary must say the grid is incomplete and why, not only print the states
    from dqnlab.study.cli import format_summary
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations

    spec = SweepSpec("s", "s-test", {}, {"utd": [1.0, 4.0]})
    summary = {"rows": [{"trial": 0, "status": "completed", "value": 1.0, "point": {"utd": 1.0}}], "cells": [],
               "states": {"COMPLETE": 1, "RUNNING": 1}, "grid_size": 2, "experiment_id": "0"}  # fmt: skip
    text = format_summary(summary, locations(tmp_path, None, None), spec)
    assert "1 grid point(s) not complete; 1 trial(s) RUNNING" in text and "--grace-s" in text
    summary.update(rows=summary["rows"] * 2, states={"COMPLETE": 2}, grid_size=2)
    assert "not complete" not in format_summary(summary, locations(tmp_path, None, None), spec)
