"""Per-run and per-cell readings of the learning curves a finding draws and scores: the IQM over
seeds at each env step (a band per cell, never pooled across cells), the area under a run's greedy
curve, and a metric's final value per run."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.cells import axes, cell_label
from dqnlab import metrics as M
from dqnlab.statistics import area_under_curve, bootstrap_ci, iqm


def curve_cells(hist: pd.DataFrame, runs: pd.DataFrame, metric: str, key: str, statistic=iqm,
                reps: int = 500) -> pd.DataFrame:  # fmt: skip
    """Per (``key`` value, env step): ``statistic`` of ``metric`` over the seeds with a 95% bootstrap CI
    (``iqm``, ``low``, ``high``, ``n``). Each run's points are the records it took at that env step."""
    sub = hist[(hist["metric"] == metric) & hist["run_id"].isin(runs["run_id"])]
    sub = sub.merge(runs[["run_id", key]], on="run_id")
    rows = []
    for (k, step), g in sub.groupby([key, M.ENV_STEPS]):
        values = g["value"].to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        if not len(values):
            continue
        point, low, high = bootstrap_ci(values, statistic=statistic, reps=reps)
        rows.append({key: k, M.ENV_STEPS: step, "iqm": point, "low": low, "high": high, "n": len(values)})
    return pd.DataFrame(rows).sort_values([key, M.ENV_STEPS]) if rows else pd.DataFrame(rows)


def auc_of(runs: pd.DataFrame, hist: pd.DataFrame) -> np.ndarray:
    """Per run with a final return (not failed, not hard-diverged): the area under its greedy curve, the
    mean greedy return over the run (:func:`dqnlab.statistics.area_under_curve`)."""
    evals = hist[(hist["metric"] == M.EVAL_RETURN_MEAN) & hist["run_id"].isin(runs["run_id"])]
    evals = evals.sort_values(["run_id", M.ENV_STEPS], kind="stable")  # only these runs' records, sorted once
    by_run = {r: (g[M.ENV_STEPS].to_numpy(), g["value"].to_numpy()) for r, g in evals.groupby("run_id", sort=False)}
    out = []
    for r in runs.itertuples():
        curve = by_run.get(r.run_id)
        if curve is None or not np.isfinite(r.final_return):
            continue
        out.append(area_under_curve(*curve))
    return np.asarray(out, dtype=float)


def final_metric(runs: pd.DataFrame, metric: str) -> np.ndarray:
    """Each run's last value of ``metric`` (NaN where it never reported it)."""
    col = f"final_{metric}"
    return runs[col].to_numpy(dtype=float) if col in runs else np.full(len(runs), np.nan)


def soft_divergence_counts(runs: pd.DataFrame, hist: pd.DataFrame) -> tuple[int, int]:
    """How many of ``runs`` had max |Q| beyond what the env can pay at any soft-divergence check, and at
    their last check (ended there: the last in record order, as :func:`analysis.stats.collapse_label` reads
    it; the final evaluation and the final log point each check, at one stamp); a hard-diverged run counts
    in both."""
    checks = hist[(hist["metric"] == M.SOFT_DIVERGENCE) & hist["run_id"].isin(runs["run_id"])]
    stamp = [c for c in (M.ENV_STEPS, M.UPDATES) if c in checks]
    last = checks.sort_values(stamp, kind="stable").groupby("run_id")["value"].last()
    ever = checks.groupby("run_id")["value"].max()
    hard = set(runs.loc[runs["status"] == "diverged", "run_id"])
    n_any = sum(1 for r in runs["run_id"] if r in hard or ever.get(r, 0.0) >= 1.0)
    n_end = sum(1 for r in runs["run_id"] if r in hard or last.get(r, 0.0) >= 1.0)
    return n_any, n_end


def every_seed(runs: pd.DataFrame, hist: pd.DataFrame, by: list[str] | None = None,
               metric: str = M.EVAL_RETURN_MEAN, columns: int = 4) -> plt.Figure:  # fmt: skip
    """A figure with one panel per cell (the columns ``by``; default: the swept axes,
    :func:`analysis.cells.axes`): every seed's ``metric`` curve as a thin line, the IQM over the cell's
    seeds in bold; the panels share their axes. Where a cell's IQM hides seeds that peak and fall, or
    one seed that never learns, this shows it."""
    names = axes(runs) if by is None else list(by)
    groups = [(cell_label(g.iloc[0], names), g) for _, g in runs.groupby(names, dropna=False, sort=True)] if names \
        else [("all runs", runs)]  # fmt: skip
    rows = math.ceil(len(groups) / columns)
    fig, grid = plt.subplots(rows, min(columns, len(groups)), figsize=(4.2 * min(columns, len(groups)), 2.8 * rows),
                             sharex=True, sharey=True, squeeze=False)  # fmt: skip
    sub = hist[hist["metric"] == metric]
    for ax, (label, g) in zip(grid.flat, groups):
        curves = sub[sub["run_id"].isin(g["run_id"])].sort_values(M.ENV_STEPS)
        for _, c in curves.groupby("run_id"):
            ax.plot(c[M.ENV_STEPS], c["value"], lw=0.7, alpha=0.6)
        # the IQM per evaluation (the k-th of each seed, at their median env step): parallel runs evaluate at
        # slightly different env steps, and an IQM over the seeds that share one exact step would be a single seed's
        k = curves.groupby("run_id").cumcount()
        band = curves.groupby(k).agg(x=(M.ENV_STEPS, "median"), y=("value", lambda v: iqm(v.to_numpy(dtype=float))))
        ax.plot(band["x"], band["y"], color="black", lw=2, label="IQM")
        ax.set_title(f"{label} ({g['run_id'].nunique()} seeds)", fontsize=8)
    for ax in grid.flat[len(groups):]:
        ax.set_visible(False)
    for ax in grid[:, 0]:
        ax.set_ylabel(metric)
    for ax in grid[-1, :]:
        ax.set_xlabel("env steps")
    fig.tight_layout()
    return fig
