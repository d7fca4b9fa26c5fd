"""Seaborn plots of a sweep: each function takes the tidy tables of :mod:`analysis.load` and returns a
matplotlib Figure (titled, units on the axes); :func:`save` writes one to a PNG.

No panel averages over configurations it does not name: every plot draws one row per setting of
the swept axes it does not show (:func:`analysis.cells.facets`), and its error bars and bands are
over the seeds of one cell: the IQM with a bootstrap 95% CI, the statistic the tables give. With too
little data a plot returns a placeholder figure that says so
(:func:`is_placeholder`), so a report never silently lacks a figure.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import matplotlib

if "MPLBACKEND" not in os.environ and "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # files only, no display needed; a notebook keeps its inline backend

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.cells import cell_table, facets  # noqa: E402
from analysis.stats import iqm  # noqa: E402
from dqnlab import metrics as M  # noqa: E402

sns.set_theme(style="whitegrid", context="notebook")
_KSTEPS = matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1000:g}k")
N_BOOT = 200  # seaborn's bootstrap draws for the CI bands (its default 1000 is slow on long histories)
PLACEHOLDER = "_dqnlab_placeholder"


def save(fig: Figure, out: Path | str) -> Path:
    """Write ``fig`` as a PNG (folders created) and close it; returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def is_placeholder(fig: Figure) -> bool:
    """True for the figure a plot returns when it had no data to draw."""
    return bool(getattr(fig, PLACEHOLDER, False))


def _finish(fig: Figure, title: str) -> Figure:
    width_chars = int(fig.get_figwidth() * 9)  # wrap long titles on narrow figures
    fig.suptitle(textwrap.fill(title, width_chars))
    fig.tight_layout()
    return fig


def _empty(title: str, why: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.axis("off")
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    setattr(fig, PLACEHOLDER, True)
    return _finish(fig, title)


def _steps_axis(ax) -> None:
    ax.xaxis.set_major_formatter(_KSTEPS)


def _row_title(ax, label: str) -> None:
    if label != "all runs":
        ax.annotate(label, xy=(0, 1.12), xycoords="axes fraction", fontsize=9, fontweight="bold", ha="left")


def _legend_outside(ax) -> None:
    if ax.get_legend():
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, title_fontsize=8)


def _drop_legends(axes) -> None:
    for ax in axes:
        if ax.get_legend():
            ax.get_legend().remove()


def _series(hist: pd.DataFrame, runs: pd.DataFrame, metrics: list[str], keys: list[str]) -> pd.DataFrame:
    """Wide per-log-point table of ``metrics`` joined with the run ``keys`` columns."""
    sub = hist[hist["metric"].isin(metrics) & hist["run_id"].isin(runs["run_id"])]
    if sub.empty:
        return sub
    wide = sub.pivot_table(index=["run_id", M.ENV_STEPS], columns="metric", values="value").reset_index()
    return wide.merge(runs[["run_id", *[k for k in keys if k in runs]]], on="run_id")


def _col(runs: pd.DataFrame, name: str, default) -> pd.Series:
    return runs[name] if name in runs else pd.Series(default, index=runs.index)


# --- throughput --------------------------------------------------------------------------------------
def throughput_scaling(runs: pd.DataFrame, hist: pd.DataFrame | None = None) -> Figure:
    title = "Does adding worker processes add throughput? (dotted: ideal linear scaling; bars: realised/requested UTD)"
    steps_col, upd_col = f"final_{M.ENV_STEPS_PER_S_TOTAL}", f"final_{M.UPDATES_PER_S_TOTAL}"
    if runs.empty or steps_col not in runs:
        return _empty(title, "no throughput data in these runs")
    df = runs.assign(limiter=_col(runs, "limiter", "strict"))
    rows = facets(df, ["num_workers", "limiter", "utd"])
    fig, axes = plt.subplots(len(rows), 3, figsize=(16, 4.4 * len(rows)), squeeze=False)
    for (label, g), axrow in zip(rows, axes):
        workers = np.sort(g["num_workers"].unique())
        for ax, col, what in [(axrow[0], steps_col, "env steps/s"), (axrow[1], upd_col, "gradient updates/s")]:
            sns.lineplot(g, x="num_workers", y=col, hue="limiter", style="utd", markers=True, ax=ax,
                         estimator=iqm, errorbar=("ci", 95), n_boot=N_BOOT)  # fmt: skip
            base = g[g["num_workers"] == workers[0]].groupby(["limiter", "utd"])[col].mean()
            for v in base.to_numpy():
                ax.plot(workers, v * workers / workers[0], color="grey", ls=":", lw=1)
            ax.set_yscale("log")  # strict and free differ by orders of magnitude
            ax.set(xlabel="worker processes", ylabel=f"{what} (log scale)", xticks=workers)
            ax.set_xticklabels([str(w) for w in workers])
        ratio = g.assign(utd_ratio=g[f"final_{M.UTD_REALISED}"] / g["utd"])
        sns.barplot(ratio, x="num_workers", y="utd_ratio", hue="limiter", ax=axrow[2], errorbar=None)
        axrow[2].axhline(1.0, color="black", lw=1, ls="--")
        axrow[2].set(xlabel="worker processes", ylabel="realised UTD / requested UTD")
        _drop_legends([axrow[0]])
        _legend_outside(axrow[1])
        _legend_outside(axrow[2])
        _row_title(axrow[0], label)
    return _finish(fig, title)


# --- returns ------------------------------------------------------------------------------------------
def return_vs_utd(runs: pd.DataFrame, hist: pd.DataFrame | None = None) -> Figure:
    title = "What does a higher replay ratio do to the final return? (IQM over the seeds of each cell, 95% bootstrap CI)"
    if runs.empty or "final_return" not in runs or runs["final_return"].isna().all():
        return _empty(title, "no final returns in these runs")
    df = runs.assign(reset=_col(runs, "reset", "none"), layer_norm=_col(runs, "layer_norm", False))
    rows = facets(df, ["utd", "layer_norm", "reset"])
    resets = sorted(df["reset"].dropna().unique())
    fig, axes = plt.subplots(len(rows), len(resets), figsize=(5.5 * len(resets) + 1, 4.2 * len(rows)), squeeze=False,
                             sharey=True)  # fmt: skip
    utds = sorted(df["utd"].dropna().unique())
    for (label, g), axrow in zip(rows, axes):
        table = cell_table(g, reps=1000, keep=("utd", "layer_norm", "reset"))
        for ax, reset in zip(axrow, resets):
            for ln, t in table[table["reset"] == reset].groupby("layer_norm"):
                t = t.sort_values("utd").dropna(subset=["iqm"])
                ax.errorbar(t["utd"], t["iqm"], yerr=[t["iqm"] - t["ci_low"], t["ci_high"] - t["iqm"]], marker="o",
                            capsize=3, label=f"LayerNorm {'on' if ln else 'off'}")  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_xticks(utds, [f"{u:g}" for u in utds])
            ax.minorticks_off()
            ax.set(xlabel="UTD (gradient updates per env step, log scale)", ylabel="final greedy return (IQM)",
                   title=f"reset: {reset}")  # fmt: skip
            ax.legend(fontsize=8)
        _row_title(axrow[0], label)
    return _finish(fig, title)


def collapse_map(runs: pd.DataFrame, hist: pd.DataFrame | None = None) -> Figure:
    title = "Where do runs collapse? Fraction of each cell's seeds not healthy (diverged or collapsed), UTD x target period"
    if runs.empty or "collapse" not in runs:
        return _empty(title, "no runs")
    df = runs[runs["outcome"] != "failed"]
    if df.empty:
        return _empty(title, "every run failed: nothing to label")
    df = df.assign(bad=(df["collapse"] != "healthy").astype(float), reset=_col(df, "reset", "none"),
                   layer_norm=_col(df, "layer_norm", False), target_period=_col(df, "target_period", 0))  # fmt: skip
    rows = facets(df, ["utd", "target_period", "layer_norm", "reset"])
    mits = sorted(df[["layer_norm", "reset"]].drop_duplicates().itertuples(index=False, name=None))
    fig, axes = plt.subplots(len(rows), len(mits), figsize=(4.8 * len(mits) + 1, 3.9 * len(rows)), squeeze=False)
    for (label, g), axrow in zip(rows, axes):
        for ax, (ln, reset) in zip(axrow, mits):
            sub = g[(g["layer_norm"] == ln) & (g["reset"] == reset)]
            grid = sub.pivot_table(index="target_period", columns="utd", values="bad", aggfunc="mean")
            if grid.empty:
                ax.axis("off")
                continue
            sns.heatmap(grid, vmin=0, vmax=1, annot=True, fmt=".2f", cmap="rocket_r", ax=ax,
                        cbar_kws={"label": "fraction not healthy"})  # fmt: skip
            ax.set(xlabel="UTD", ylabel="target period (updates)", title=f"LayerNorm {'on' if ln else 'off'}, reset {reset}")
        _row_title(axrow[0], label)
    return _finish(fig, title)


DIAGNOSTICS = [
    (M.SRANK, "srank of penultimate features"),
    (M.DORMANT_FRAC, "dormant fraction (tau 0.1)"),
    (M.Q_MAX, "max Q(s,a) on a sampled batch"),
    (M.OVERESTIMATION, "overestimation: max Q - G (return units)"),
]


def diagnostics_over_training(runs: pd.DataFrame, hist: pd.DataFrame) -> Figure:
    title = ("Signs of Q-network collapse over training: srank falling, dormant units rising, Q above its bound "
             "(mean over the seeds of each cell, 95% CI)")
    df = _series(hist, runs, [m for m, _ in DIAGNOSTICS], ["utd", "layer_norm"])
    if df.empty:
        return _empty(title, "no diagnostics logged")
    rows = facets(runs, ["utd", "layer_norm"])
    fig, axes = plt.subplots(len(rows), 4, figsize=(21, 4.3 * len(rows)), squeeze=False)
    for (label, g), axrow in zip(rows, axes):
        sub = df[df["run_id"].isin(g["run_id"])]
        for ax, (metric, what) in zip(axrow, DIAGNOSTICS):
            if metric in sub and sub[metric].notna().any():
                sns.lineplot(sub, x=M.ENV_STEPS, y=metric, hue="utd", style="layer_norm", palette="viridis", ax=ax,
                             estimator=iqm, errorbar=("ci", 95), n_boot=N_BOOT)  # fmt: skip
            ax.set(xlabel="env steps", ylabel=what)
            _steps_axis(ax)
        _drop_legends(axrow[:-1])
        _legend_outside(axrow[-1])
        _row_title(axrow[0], label)
    return _finish(fig, title)


def q_distribution(runs: pd.DataFrame, hist: pd.DataFrame) -> Figure:
    title = "Distribution of Q(s,a) on sampled batches over training (bands: 5-95% and 25-75%; line: median)"
    qs = [M.Q_P[q] for q in M.Q_QUANTILES]
    df = _series(hist, runs, qs, ["utd"])
    if df.empty:
        return _empty(title, "no Q quantiles logged")
    bound = float(runs[f"final_{M.Q_BOUND}"].median()) if f"final_{M.Q_BOUND}" in runs else None
    rows = facets(runs, ["utd"])
    utds = sorted(runs["utd"].dropna().unique())
    fig, axes = plt.subplots(len(rows), len(utds), figsize=(4.6 * len(utds), 3.3 * len(rows)), squeeze=False,
                             sharex=True, sharey=True)  # fmt: skip
    for i, (label, g) in enumerate(rows):
        mean = df[df["run_id"].isin(g["run_id"])].groupby(["utd", M.ENV_STEPS])[qs].mean().reset_index()
        for j, utd in enumerate(utds):
            ax = axes[i][j]
            c = mean[mean["utd"] == utd].sort_values(M.ENV_STEPS)
            if bound is not None:
                ax.axhline(bound, color="C3", ls="--", lw=1, label="R_max / (1 - gamma)")
            if not c.empty:
                ax.fill_between(c[M.ENV_STEPS], c[qs[0]], c[qs[-1]], alpha=0.2, color="C0")
                ax.fill_between(c[M.ENV_STEPS], c[qs[1]], c[qs[-2]], alpha=0.4, color="C0")
                ax.plot(c[M.ENV_STEPS], c[qs[2]], color="C0")
            ax.set_title(f"UTD {utd:g}" + ("" if label == "all runs" else f"; {label}"), fontsize=9)
            ax.set(xlabel="env steps" if i == len(rows) - 1 else "", ylabel="Q(s,a)" if j == 0 else "")
            _steps_axis(ax)
    if bound is not None:
        axes[0][-1].legend(fontsize=8, loc="upper left")
    return _finish(fig, title)


def learning_curves(runs: pd.DataFrame, hist: pd.DataFrame) -> Figure:
    title = "Greedy evaluation return over training (mean over the seeds of each cell, 95% CI band)"
    df = _series(hist, runs, [M.EVAL_RETURN_MEAN], ["utd"])
    if df.empty:
        return _empty(title, "no evaluations logged")
    panels = facets(runs, ["utd"])
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.8 * ncols + 1, 4.3 * nrows), squeeze=False, sharey=True)
    flat = list(axes.flat)
    for ax, (label, g) in zip(flat, panels):
        sub = df[df["run_id"].isin(g["run_id"])]
        sns.lineplot(sub, x=M.ENV_STEPS, y=M.EVAL_RETURN_MEAN, hue="utd", palette="viridis", ax=ax,
                     estimator=iqm, errorbar=("ci", 95), n_boot=N_BOOT)  # fmt: skip
        ax.set(xlabel="env steps", ylabel="greedy return", title=textwrap.fill(label, 48))
        _steps_axis(ax)
    for ax in flat[len(panels) :]:
        ax.axis("off")
    _drop_legends(flat[: len(panels) - 1])
    _legend_outside(flat[len(panels) - 1])
    return _finish(fig, title)


def worker_shares(runs: pd.DataFrame, hist: pd.DataFrame | None = None) -> Figure:
    title = "Is every worker's data used? Produced vs sampled share per worker; policy lag over the run"
    if runs.empty or f"final_{M.worker_share(0, 'produced')}" not in runs:
        return _empty(title, "no worker shares logged")
    rows = facets(runs, ["num_workers"])
    fig, axes = plt.subplots(len(rows), 3, figsize=(18, 4.6 * len(rows)), squeeze=False)
    for (label, g), axrow in zip(rows, axes):
        shares = []
        for _, r in g.iterrows():
            for w in range(int(r["num_workers"])):
                for kind in ("produced", "sampled"):
                    v = r.get(f"final_{M.worker_share(w, kind)}")
                    if v is not None and not pd.isna(v):
                        shares.append({"config": f"{int(r['num_workers'])} workers / worker {w}", "share of": kind,
                                       "share": v})  # fmt: skip
        if shares:
            sns.barplot(pd.DataFrame(shares), x="config", y="share", hue="share of", ax=axrow[0], estimator=iqm,
                        errorbar=("ci", 95))  # fmt: skip
        axrow[0].set(xlabel="", ylabel="share (fraction)", title="env steps produced vs batch elements sampled")
        axrow[0].tick_params(axis="x", rotation=30, labelsize=8)
        _legend_outside(axrow[0])
        for ax, metric, what, panel in [
            (axrow[1], M.POLICY_LAG_RUN_MEAN, "policy lag (updates)", "policy lag at sampling, whole run"),
            (axrow[2], M.ACTOR_STALENESS_RUN_MEAN, "actor staleness (updates)", "acting version behind learner"),
        ]:
            col = f"final_{metric}"
            if col in g and g[col].notna().any():
                sns.barplot(g, x="num_workers", y=col, ax=ax, estimator=iqm, errorbar=("ci", 95), color="C0")
            ax.set(xlabel="worker processes", ylabel=what, title=panel)
        _row_title(axrow[0], label)
    return _finish(fig, title)


PLOTS = {
    "throughput_scaling": throughput_scaling,
    "return_vs_utd": return_vs_utd,
    "collapse_map": collapse_map,
    "diagnostics_over_training": diagnostics_over_training,
    "q_distribution": q_distribution,
    "learning_curves": learning_curves,
    "worker_shares": worker_shares,
}
"""name -> ``plot(runs, hist) -> Figure``."""

__all__ = ["PLOTS", "is_placeholder", "save", *PLOTS]
