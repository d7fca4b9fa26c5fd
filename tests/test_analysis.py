"""Analysis: statistics by hand, collapse labels, and loaders/plots/report/notebooks on real smoke sweeps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.stats import collapse_label, final_return, iqm, stratified_bootstrap_ci

ROOT = Path(__file__).resolve().parent.parent


def test_iqm_by_hand():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8]) == 4.5  # cut 2 each side: mean(3, 4, 5, 6)
    assert iqm([4, 1, 3, 2]) == 2.5  # cut 1 each side: mean(2, 3)
    assert iqm([7.0]) == 7.0


def test_bootstrap_ci_of_constant_is_a_point_and_contains_the_estimate():
    assert stratified_bootstrap_ci([[3.0] * 5]) == (3.0, 3.0, 3.0)
    rng = np.random.default_rng(0)
    point, low, high = stratified_bootstrap_ci([rng.normal(10, 1, 20)])
    assert low < point < high and high - low < 2.0


def test_bootstrap_is_stratified_by_task():
    # With the mean as statistic, resampling within each task keeps 10 zeros and 10 tens: always 5
    point, low, high = stratified_bootstrap_ci([[0.0] * 10, [10.0] * 10], statistic=np.mean)
    assert (point, low, high) == (5.0, 5.0, 5.0)


def _h(**series):
    n = max(len(v) for v in series.values())
    return [{k: v[i] for k, v in series.items() if i < len(v)} for i in range(n)]


def test_collapse_labels_on_constructed_histories():
    assert collapse_label(_h(eval_return_mean=[10, 200, 190], srank=[20, 18, 19])) == "healthy"
    assert collapse_label(_h(eval_return_mean=[10, 200, 90], srank=[20, 18, 19])) == "performance_collapse"
    assert collapse_label(_h(eval_return_mean=[10, 200, 190], srank=[20, 12, 9])) == "rank_collapse"
    assert collapse_label(_h(eval_return_mean=[10, 200, 190], soft_divergence=[0, 1, 0])) == "diverged"
    assert collapse_label(_h(eval_return_mean=[10, 20]), status="diverged") == "diverged"
    assert final_return(_h(eval_return_mean=[0, 0, 0, 0, 0, 0, 8, 10])) == 9.0  # last quarter: 2 evals


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    for sweep in ("utd", "throughput"):
        res = subprocess.run([sys.executable, str(ROOT / "sweeps" / f"{sweep}.py"), "--preset", "smoke", "--quiet",
                              "--results", str(results)], capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
    return results


def test_sweeps_write_their_report_and_log_it_on_the_parent_run(sweeps):
    summary = (sweeps / "report-utd-smoke" / "summary.md").read_text()
    assert summary.count("| ") >= 3 and "2 runs." in summary
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{sweeps / 'mlflow.db'}")
    exp = client.get_experiment_by_name("utd")
    parent = client.search_runs([exp.experiment_id], filter_string="tags.`dqnlab.role` = 'parent'")[0]
    assert "report/summary.md" in {a.path for a in client.list_artifacts(parent.info.run_id, "report")}


def test_loaders_return_one_row_per_run_and_a_long_history(sweeps):
    from analysis.load import load

    runs, hist = load(f"sqlite:///{sweeps / 'mlflow.db'}", "throughput", "throughput-smoke")
    assert len(runs) == 4
    for col in ("run_id", "status", "num_workers", "utd", "limiter", "collapse", "final_return",
                "final_env_steps_per_s_total", "final_utd_realised"):  # fmt: skip
        assert col in runs, col
    assert set(runs["num_workers"]) == {1, 2} and runs["utd"].dtype == float
    assert list(hist.columns) == ["run_id", "env_steps", "updates", "metric", "value"]
    assert {"td_loss", "srank", "q_p50"} <= set(hist["metric"])


def test_every_plot_writes_a_non_empty_png(sweeps, tmp_path):
    from analysis.load import load
    from analysis.plots import PLOTS

    uri = f"sqlite:///{sweeps / 'mlflow.db'}"
    for experiment in ("utd", "throughput"):
        runs, hist = load(uri, experiment)
        for name, plot in PLOTS.items():
            out = plot(runs, hist, tmp_path / experiment / f"{name}.png")
            assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000, name


def test_report_command_exits_0_and_lists_every_run(sweeps, tmp_path):
    out = tmp_path / "report"
    res = subprocess.run([sys.executable, str(ROOT / "analysis" / "report.py"), "--tracking-uri",
                          f"sqlite:///{sweeps / 'mlflow.db'}", "--experiment", "throughput", "--study",
                          "throughput-smoke", "--out", str(out)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    from analysis.load import load_runs

    runs = load_runs(f"sqlite:///{sweeps / 'mlflow.db'}", "throughput", "throughput-smoke")
    summary = (out / "summary.md").read_text()
    assert all(run_id in summary for run_id in runs["run_id"])


@pytest.mark.parametrize("notebook, experiment", [("utd_stability.ipynb", "utd"), ("throughput.ipynb", "throughput")])
def test_notebooks_execute_headlessly(sweeps, tmp_path, notebook, experiment, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("DQNLAB_TRACKING_URI", f"sqlite:///{sweeps / 'mlflow.db'}")
    monkeypatch.setenv("DQNLAB_EXPERIMENT", experiment)
    monkeypatch.setenv("DQNLAB_STUDY", "")
    monkeypatch.setenv("DQNLAB_NOTEBOOK_OUT", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(ROOT / "analysis" / notebook, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "committed with outputs"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    assert any(p.suffix == ".png" for p in tmp_path.iterdir())
    assert os.environ["DQNLAB_EXPERIMENT"] == experiment
