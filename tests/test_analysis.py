"""Analysis: statistics by hand, collapse labels, and loaders/plots/report/notebooks on real smoke sweeps."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.stats import (
    collapse_label,
    difference_ci,
    final_return,
    iqm,
    probability_of_improvement,
    soft_divergence_checks,
    stratified_bootstrap_ci,
)
from dqnlab.config import Config

pytestmark = pytest.mark.slow

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
    assert collapse_label(_h(eval_return_mean=[10, 200, 110], srank=[20, 18, 19])) == "healthy"  # fell 90 of 190
    assert collapse_label(_h(eval_return_mean=[10, 200, 190], srank=[20, 12, 9])) == "rank_collapse"
    assert collapse_label(_h(eval_return_mean=[10, 200, 190], soft_divergence=[0, 1, 0])) == "diverged"  # old runs
    # runs with q_limit checked at every evaluation: an overshoot that came back is transient, not the outcome
    transient = _h(eval_return_mean=[10, 200, 190], soft_divergence=[0, 1, 0], q_limit=[150, 150, 150])
    assert collapse_label(transient) == "healthy" and soft_divergence_checks(transient) == (True, False)
    ended = _h(eval_return_mean=[10, 200, 190], soft_divergence=[0, 1, 1], q_limit=[150, 150, 150])
    assert collapse_label(ended) == "diverged" and soft_divergence_checks(ended) == (True, True)
    assert collapse_label(_h(eval_return_mean=[10, 20]), status="diverged") == "diverged"
    assert final_return(_h(eval_return_mean=[0, 0, 0, 0, 0, 0, 8, 10])) == 9.0  # last quarter: 2 evals
    assert np.isnan(final_return(_h(eval_return_mean=[0, 9]), status="diverged"))  # no policy, no return


@pytest.mark.parametrize("shift", [0.0, -600.0])  # CartPole-like and Acrobot/MountainCar-like scales
def test_performance_collapse_is_defined_on_the_runs_own_return_range(shift):
    def label(evals):
        return collapse_label(_h(eval_return_mean=[e + shift for e in evals]))

    assert label([100, 500, 150]) == "performance_collapse"  # fell 350 of a 400 range
    assert label([100, 500, 350]) == "healthy"  # fell 150 of 400
    assert label([100, 500, 500]) == "healthy"
    assert label([300, 300, 300]) == "healthy"  # no range


def test_acrobot_like_negative_returns_collapse():
    # learned from -500 to -80, then fell back to -400: the old rule (best > 0) never fired here
    assert collapse_label(_h(eval_return_mean=[-500, -200, -80, -400])) == "performance_collapse"
    assert collapse_label(_h(eval_return_mean=[-500, -200, -80, -120])) == "healthy"


def test_probability_of_improvement_and_difference_by_hand():
    p, lo, hi = probability_of_improvement([[1.0, 2.0, 3.0]], [[2.0]])
    assert p == pytest.approx((0 + 0.5 + 1) / 3)  # pairs: 1<2, 2=2 (a tie counts half), 3>2
    assert lo <= p <= hi
    # stratified over two tasks of different scales: the mean of the per-task probabilities
    p2, _, _ = probability_of_improvement([[10.0, 11.0], [-50.0, -40.0]], [[0.0, 1.0], [-45.0, -45.0]])
    assert p2 == pytest.approx((1.0 + 0.5) / 2)
    d, dlo, dhi = difference_ci([[5.0] * 8], [[3.0] * 8])
    assert (d, dlo, dhi) == (2.0, 2.0, 2.0)


def _runs(rows: list[dict]):
    import pandas as pd

    defaults = Config().to_flat()
    out = []
    for i, r in enumerate(rows):
        full = {**defaults, **r}
        full.setdefault("outcome", "completed")
        full.setdefault("collapse", "healthy")
        full["run_id"] = f"run{i}"
        out.append(full)
    return pd.DataFrame(out)


def _grid(returns: dict[tuple, list[float]], names: tuple[str, ...]):
    rows = []
    for key, values in returns.items():
        for seed, v in enumerate(values):
            rows.append({**dict(zip(names, key)), "seed": seed, "final_return": v})
    return _runs(rows)


def test_cells_never_pool_configurations():
    from analysis.cells import axes, cell_table

    # the same utd and LayerNorm, two worker counts with very different returns: two cells, not one
    runs = _grid({(1, 1.0): [500, 490, 480, 470], (2, 1.0): [10, 20, 30, 40], (1, 4.0): [100, 110, 120, 130],
                  (2, 4.0): [300, 300, 300, 300]}, ("num_workers", "utd"))  # fmt: skip
    assert axes(runs) == ["num_workers", "utd"]
    table = cell_table(runs).set_index(["num_workers", "utd"])
    assert len(table) == 4
    assert table.loc[(1, 1.0), "iqm"] == iqm([500, 490, 480, 470])
    assert table.loc[(2, 1.0), "iqm"] == iqm([10, 20, 30, 40])
    assert (table["n_seeds"] == 4).all()
    assert table.loc[(2, 4.0), "ci_low"] == table.loc[(2, 4.0), "ci_high"] == 300


def test_a_failed_run_is_counted_as_failed_and_never_as_a_return():
    from analysis.cells import cell_table

    runs = _grid({(1.0,): [100, 200, 300]}, ("utd",))
    runs.loc[2, ["outcome", "collapse"]] = ["failed", "failed"]  # its partial history had 300
    table = cell_table(runs)
    assert table.loc[0, "n_seeds"] == 3 and table.loc[0, "n_returns"] == 2 and table.loc[0, "n_failed"] == 1
    assert table.loc[0, "iqm"] == iqm([100, 200])


def test_comparisons_along_each_axis_at_each_setting_of_the_others():
    from analysis.cells import comparisons

    runs = _grid({(False, 1.0): [100, 110, 120], (True, 1.0): [200, 210, 220], (False, 4.0): [50, 60, 70],
                  (True, 4.0): [40, 45, 50]}, ("layer_norm", "utd"))  # fmt: skip
    comp = comparisons(runs, reps=200)
    ln = comp[comp["axis"] == "layer_norm"].set_index("where")
    assert set(ln.index) == {"utd=1", "utd=4"}  # LayerNorm on vs off at each UTD, never pooled over UTDs
    assert ln.loc["utd=1", "iqm_diff"] == pytest.approx(100.0) and ln.loc["utd=1", "p_improvement"] == 1.0
    assert ln.loc["utd=4", "iqm_diff"] == pytest.approx(45 - 60) and ln.loc["utd=4", "p_improvement"] < 0.5
    assert ln.loc["utd=1", "diff_low"] <= 100.0 <= ln.loc["utd=1", "diff_high"]


def test_an_unset_axis_value_is_a_cell_compared_like_any_other():
    """A sweep over ``reward_bound`` None (its default) and 100: the None cell is the baseline it is, never
    dropped (NaN equals nothing, so it had vanished from the comparisons and the report's family)."""
    from analysis.cells import axis_family, comparisons

    runs = _grid({(None, 1.0): [100, 110, 120], (100.0, 1.0): [200, 210, 220], (None, 4.0): [50, 60, 70],
                  (100.0, 4.0): [40, 45, 50]}, ("reward_bound", "utd"))  # fmt: skip
    rb = comparisons(runs, reps=200)
    rb = rb[rb["axis"] == "reward_bound"].set_index("where")
    assert set(rb.index) == {"utd=1", "utd=4"} and rb.loc["utd=1", "iqm_diff"] == pytest.approx(100.0)
    labels = [r["contrast"] for r in axis_family(runs).results()]
    assert any(label.startswith("reward_bound 100.0 vs None") for label in labels), labels
    assert any(label.startswith("utd 4.0 vs 1.0 (reward_bound=None)") for label in labels), labels


def test_comparisons_over_several_envs_are_stratified_by_env():
    from analysis.cells import comparisons

    runs = _grid({("CartPole-v1", False): [100, 120], ("CartPole-v1", True): [400, 420],
                  ("Acrobot-v1", False): [-300, -280], ("Acrobot-v1", True): [-300, -280]},
                 ("env_id", "layer_norm"))  # fmt: skip
    comp = comparisons(runs, reps=200)
    pooled = comp[comp["where"].str.contains("all envs")]
    assert len(pooled) == 1
    assert pooled.iloc[0]["p_improvement"] == pytest.approx((1.0 + 0.5) / 2)  # per env, then averaged
    assert np.isnan(pooled.iloc[0]["iqm_diff"])  # raw returns of different envs are never pooled


def test_return_vs_utd_draws_a_row_per_setting_of_the_axes_it_does_not_show():
    from analysis.plots import is_placeholder, return_vs_utd

    runs = _grid({(w, u, ln): [100.0 * w + u, 90.0 * w + u] for w in (1, 2, 4) for u in (1.0, 4.0)
                  for ln in (False, True)}, ("num_workers", "utd", "layer_norm"))  # fmt: skip
    fig = return_vs_utd(runs)
    assert not is_placeholder(fig)
    drawn = [ax for ax in fig.axes if ax.lines]
    assert len(drawn) == 3  # one panel per worker count: num_workers is never averaged away
    labels = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert {"num_workers=1", "num_workers=2", "num_workers=4"} <= labels


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    for sweep in ("utd", "throughput"):
        res = subprocess.run([sys.executable, str(ROOT / "sweeps" / f"{sweep}.py"), "--preset", "smoke", "--quiet",
                              "--results", str(results)], capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
    return results


def test_the_report_opens_with_the_verdicts_of_its_declared_family_built_from_the_runs(sweeps):
    """The main job's report says, before any table, what its swept axes did: each value against the axis's
    first, Holm-corrected, in plain words, with the soft-divergence count of every cell. The block is what
    the runs give (recomputed here from MLflow), not text typed in."""
    from analysis.load import load
    from analysis.report import verdict_lines

    summary = (sweeps / "report-utd-smoke" / "summary.md").read_text()
    runs, _ = load(f"sqlite:///{sweeps / 'mlflow.db'}", "utd", "utd-smoke")
    block = "\n".join(verdict_lines(runs))
    assert block.startswith("## Verdicts") and block in summary
    assert summary.index("## Verdicts") < summary.index("## Cells")
    # the smoke grid's one contrast, one seed a cell: named, and not tested (a bootstrap of one value is none)
    assert "- utd 4.0 vs 1.0: not tested, too few seeds (1 vs 1" in block
    assert "Soft or hard divergence per cell (seeds): utd=1 0/1; utd=4 " in block


def test_sweeps_write_their_report_and_log_it_on_the_parent_run(sweeps):
    summary = (sweeps / "report-utd-smoke" / "summary.md").read_text()
    assert summary.count("| ") >= 3 and "2 runs in" in summary
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


EXPECTED_PLOTS = {  # what each smoke sweep has the data for; every other plot says it has none
    "utd": {"return_vs_utd", "collapse_map", "diagnostics_over_training", "q_distribution", "learning_curves",
            "worker_shares", "throughput_scaling"},
    "throughput": {"throughput_scaling", "worker_shares", "diagnostics_over_training", "q_distribution",
                   "collapse_map"},
}


def _data_artists(fig) -> int:
    return sum(len(ax.lines) + len(ax.collections) + len(ax.patches) for ax in fig.axes)


def test_every_plot_draws_data_where_the_sweep_has_it(sweeps, tmp_path):
    from analysis.load import load
    from analysis.plots import PLOTS, is_placeholder, save

    uri = f"sqlite:///{sweeps / 'mlflow.db'}"
    for experiment, expected in EXPECTED_PLOTS.items():
        runs, hist = load(uri, experiment)
        for name, plot in PLOTS.items():
            fig = plot(runs, hist)
            if name in expected:
                assert not is_placeholder(fig) and _data_artists(fig) > 0, (experiment, name)
            else:
                assert is_placeholder(fig), (experiment, name)
            out = save(fig, tmp_path / experiment / f"{name}.png")
            assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    empty = PLOTS["learning_curves"](runs.iloc[0:0], hist.iloc[0:0])
    assert is_placeholder(empty) and _data_artists(empty) == 0


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


NOTEBOOK_FIGURES = {"utd_stability.ipynb": 7, "throughput.ipynb": 3}


def _execute(notebook: str, env: dict[str, str], monkeypatch):
    """Run ``notebook`` headlessly with ``env``; its outputs. A finding notebook may be committed with its
    outputs (drawn from docs/data, so the repository page shows them), never with an error; they are
    cleared before the run. The others read a results folder that is not in the repo: no outputs."""
    import nbformat
    from nbclient import NotebookClient

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    nb = nbformat.read(ROOT / "analysis" / notebook, as_version=4)
    stored = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    if notebook.startswith("finding_"):
        assert not [o for o in stored if o.get("output_type") in ("error", "stream")], "stored outputs: an error or a log"
        for c in nb.cells:
            if c.cell_type == "code":
                c.outputs = []
    else:
        assert not stored, "committed with outputs"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    return outputs


@pytest.mark.parametrize("notebook, experiment", [("utd_stability.ipynb", "utd"), ("throughput.ipynb", "throughput")])
def test_notebooks_execute_headlessly_and_show_their_table_and_figures(sweeps, tmp_path, notebook, experiment,
                                                                       monkeypatch):  # fmt: skip
    outputs = _execute(notebook, {"DQNLAB_TRACKING_URI": f"sqlite:///{sweeps / 'mlflow.db'}",
                                  "DQNLAB_EXPERIMENT": experiment, "DQNLAB_STUDY": "",
                                  "DQNLAB_NOTEBOOK_OUT": str(tmp_path)}, monkeypatch)  # fmt: skip
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) >= NOTEBOOK_FIGURES[notebook]  # every figure rendered inline
    tables = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("iqm" in t and "n_seeds" in t and "ci_low" in t for t in tables), "the per-cell table is shown"
    assert len(list(tmp_path.glob("*.png"))) == NOTEBOOK_FIGURES[notebook]


@pytest.fixture
def finding_sweeps(finding_smokes):
    """The results folder of the finding sweeps' smoke presets (run once per session)."""
    return finding_smokes[0]


FINDING_STUDIES = ["writers", "workers", "parallel", "replay_ratio"]


@pytest.mark.parametrize("study", FINDING_STUDIES)
def test_finding_notebooks_draw_their_figure_and_print_their_numbers(finding_sweeps, study, monkeypatch):
    outputs = _execute(f"finding_{study}.ipynb", {"DQNLAB_RESULTS": str(finding_sweeps), "DQNLAB_STUDY": f"{study}-smoke"},
                       monkeypatch)  # fmt: skip
    markdown = "".join(o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {}))
    assert "|" in markdown and "[" in markdown, markdown[:500]  # the finding's table, with CIs
    tables = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert sum("iqm" in t and "n_seeds" in t for t in tables) == 2, "the per-cell table, and the user's selection"
    # inline figures: the finding's, every seed per cell, and the overlay of the picked seeds; a real plot is far
    # larger than an empty canvas
    figures = [o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) == 3 and len(figures[0]) > 40_000 and len(figures[1]) > 20_000, [len(f) for f in figures]


def test_findings_come_from_the_exported_data_and_the_check_catches_a_number_typed_by_hand(finding_sweeps, tmp_path):
    """``analysis/export.py`` writes each study's data; ``analysis/findings.py`` writes the page's generated
    tables from it, and ``--check`` fails once a number on the page differs from what the data gives."""
    from analysis import export, findings

    data = tmp_path / "data"
    stand_ins = {"writers-smoke": ("writers", "writers-single"), "workers-smoke": ("workers", "workers-default"),
                 "parallel-smoke": ("parallel", "parallel-default"),
                 "replay_ratio-smoke": ("replay_ratio", "replay_ratio-cartpole")}  # fmt: skip
    for smoke, (experiment, name) in stand_ins.items():  # each smoke study stands in for its study
        assert export.main(["--results", str(finding_sweeps), "--experiment", experiment, "--study", smoke,
                            "--out", str(data)]) == 0  # fmt: skip
        for suffix in ("runs", "curves"):
            (data / f"{smoke}.{suffix}.csv.gz").rename(data / f"{name}.{suffix}.csv.gz")
    for suffix in ("runs", "curves"):  # smokes stand in for 4b (period 256), 2b, 4c (uniform), 4d (as Polyak)
        for source, name in (("replay_ratio-cartpole", "replay_ratio-target_period"),
                             ("workers-default", "workers-prioritized"),
                             ("replay_ratio-cartpole", "replay_ratio-prioritized-utd1_4"),
                             ("replay_ratio-cartpole", "replay_ratio-polyak"),
                             ("replay_ratio-cartpole", "replay_ratio-rerun_cartpole-utd0.25_1")):  # fmt: skip
            shutil.copy(data / f"{source}.{suffix}.csv.gz", data / f"{name}.{suffix}.csv.gz")
    page, appendix = tmp_path / "findings.md", tmp_path / "findings" / "replay.md"  # a block lives on one of them
    in_appendix = ("replay_ratio", "target_period", "replay_prioritized", "replay_polyak", "replay_ratio_rerun")
    appendix.parent.mkdir()
    for path, names in ((page, [n for n in findings.DATA_FINDINGS if n not in in_appendix]), (appendix, in_appendix)):
        path.write_text("# Findings\n" + "".join(f"\n{findings.BEGIN.format(n)}\nstale\n{findings.END.format(n)}\n"
                                                 for n in names))  # fmt: skip
    args = ["--data", str(data), "--page", str(page), "--out", str(tmp_path)]
    assert findings.main([*args, "--check"]) == 1  # the page does not hold what the data gives
    assert findings.main(args) == 0
    assert "\nstale\n" not in appendix.read_text()  # the appendix's blocks written too
    text = page.read_text()
    assert text.count("\nstale\n") == 1  # calibration: no data here, its block is left as it was
    assert findings.main([*args, "--check"]) == 1  # ... and a block without its data fails the check
    begin, end = findings.BEGIN.format("calibration"), findings.END.format("calibration")
    page.write_text(text[: text.index(begin)] + text[text.index(end) + len(end) :])
    text = page.read_text() + appendix.read_text()
    for header in ("| UTD | target in | variant |", "| cell | writers |", "| workers | buffer |", "| collection |",
                   "| UTD | period 256 env steps", "| workers | replay |", "| UTD | replay | seeds |",
                   "| UTD | target | unit |", "| UTD | target in | seeds |"):
        assert header in text, header
    assert text.count("Holm-corrected") >= 4
    for name in ("writers", "workers", "parallel", "replay_ratio", "target_period", "workers_prioritized",
                 "replay_prioritized", "replay_polyak", "replay_ratio_rerun"):
        assert (tmp_path / f"finding_{name}.png").stat().st_size > 20_000
    assert findings.main([*args, "--check"]) == 0
    prose = page.read_text()
    page.write_text(prose + "\nA sentence citing +1234 [1, 2], which no table shows.\n")  # a number typed by hand
    assert findings.main([*args, "--check"]) == 1
    page.write_text(prose)
    kept = appendix.read_text()
    appendix.write_text(kept.replace("| 1 | updates | plain | ", "| 1 | updates | plain | 1", 1))  # a hand edit
    assert findings.main([*args, "--check"]) == 1
    appendix.write_text(kept + "\n" + findings.BEGIN.format("writers") + "\n" + findings.END.format("writers") + "\n")
    with pytest.raises(ValueError, match="'writers' is on 2 pages"):  # a block lives on exactly one page
        findings.main([*args, "--check"])
    single = [line for line in text.splitlines() if "| single |" in line]
    assert single and all("0.000 [0.000, 0.000]" in line for line in single), single  # the single learner loses nothing
    assert all(line.split("|")[10].strip() == line.split("|")[3].strip() + "/" + line.split("|")[3].strip()
               for line in single), single  # every update applied: updates == owed in every seed


def test_divergence_across_utd_holds_the_copy_rate_and_counts_each_cell_once():
    """The across-UTD family compares only target-in-env-steps cells (copy rate per env step held), each UTD
    against UTD 1 of the same variant; a run diverged at any check counts once, a hard-diverged one too."""
    import pandas as pd

    from analysis.replay_ratio import utd_divergence_contrasts
    from dqnlab import metrics as M
    from dqnlab.statistics import fisher_exact

    runs, hist = [], []
    diverged = {(1.0, "env_steps"): 0, (16.0, "env_steps"): 9, (4.0, "env_steps"): 1, (16.0, "updates"): 10}
    for (utd, unit), hits in diverged.items():
        for seed in range(10):
            rid = f"{utd}-{unit}-{seed}"
            hard = seed == 0 and hits == 9  # one of UTD 16's nine is a hard divergence: no checks logged
            runs.append({"run_id": rid, "utd": utd, "target_unit": unit, "variant": "plain",
                         "status": "diverged" if hard else "finished"})  # fmt: skip
            if not hard:
                for step, value in ((1000, 0.0), (2000, float(seed < hits)), (3000, 0.0)):  # diverged mid-run, then back
                    hist.append({"run_id": rid, "metric": M.SOFT_DIVERGENCE, M.ENV_STEPS: step, "value": value})
    out = utd_divergence_contrasts(pd.DataFrame(runs), pd.DataFrame(hist)).set_index("utd")
    assert list(out.index) == [4.0, 16.0]  # UTD 1 is the baseline; the updates cell never enters
    assert out.loc[16.0, "at_utd"] == "9/10" and out.loc[16.0, "at_1"] == "0/10"
    assert out.loc[4.0, "at_utd"] == "1/10"
    p16, p4 = fisher_exact(9, 10, 0, 10), fisher_exact(1, 10, 0, 10)
    assert out.loc[16.0, "p_holm"] == pytest.approx(min(1.0, 2 * p16))
    assert out.loc[4.0, "p_holm"] == pytest.approx(max(min(1.0, 2 * p16), p4))
    assert out.loc[16.0, "verdict"] == "more" and out.loc[4.0, "verdict"] == "inconclusive"


def test_calibration_verdict_says_which_test_of_the_criterion_passed():
    """Calibrated by the published mean inside our CI of the mean, or only by the weaker std overlap (which
    the page must not present as the stronger test), and only with our mean within the margin of the
    published one; else not reproduced with the gap."""
    from analysis.calibration import Published, verdict

    pub = Published("x", "greedy", 500.0, 0.0, "test")
    at_500 = np.array([480.0, 490, 500, 500, 500, 510, 495, 505, 500, 520])
    assert verdict(at_500, pub).startswith("calibrated (published mean inside our mean's CI")
    near = np.array([500.0] * 6 + [420] * 4)  # mean 468 (within ±50), std 41, CI below 500: only the overlap
    assert verdict(near, pub).startswith("calibrated, ± std overlap only")
    spread = np.array([500.0] * 5 + [98, 150, 195, 250, 300])  # mean 349: beyond the margin, whatever the std
    assert verdict(spread, pub).startswith("not reproduced (-151, beyond ±50")
    assert verdict(np.array([9.0, 9.5, 10, 9.2]), pub).startswith("not reproduced (-491")
