"""Seaborn plots of a sweep, each written as a titled PNG with units on the axes.

Every function takes the tidy tables of :mod:`analysis.load` and an output path, and returns the
path. With too little data for a plot (say, one worker count) it still writes a PNG that says so,
so a report never silently lacks a figure.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from analysis.stats import iqm, stratified_bootstrap_ci  # noqa: E402

sns.set_theme(style="whitegrid", context="notebook")
_KSTEPS = matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1000:g}k")
N_BOOT = 200  # seaborn's bootstrap draws for the CI bands (its default 1000 is slow on long histories)


def _steps_axis(ax) -> None:
    ax.xaxis.set_major_formatter(_KSTEPS)


def _one_legend(axes) -> None:
    """Keep a single legend, outside the last panel, so that no legend hides data."""
    for ax in axes[:-1]:
        if ax.get_legend():
            ax.get_legend().remove()
    if axes[-1].get_legend():
        sns.move_legend(axes[-1], "upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, title_fontsize=8)


def _save(fig, out: Path, title: str) -> Path:
    width_chars = int(fig.get_figwidth() * 9)  # wrap long titles on narrow figures
    fig.suptitle(textwrap.fill(title, width_chars))
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _empty(out: Path, title: str, why: str) -> Path:
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.axis("off")
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    return _save(fig, out, title)


def _series(hist: pd.DataFrame, runs: pd.DataFrame, metrics: list[str], keys: list[str]) -> pd.DataFrame:
    """Wide per-log-point table of ``metrics`` joined with the run ``keys`` columns."""
    sub = hist[hist["metric"].isin(metrics)]
    if sub.empty:
        return sub
    wide = sub.pivot_table(index=["run_id", "env_steps"], columns="metric", values="value").reset_index()
    return wide.merge(runs[["run_id", *keys]], on="run_id")


def throughput_scaling(runs: pd.DataFrame, out: Path) -> Path:
    title = "Throughput scaling with worker processes (mean over the other grid axes; dotted: ideal linear scaling)"
    if runs.empty or "final_env_steps_per_s_total" not in runs:
        return _empty(out, title, "no throughput data in this experiment")
    df = runs.copy()
    df["limiter"] = df.get("limiter", "strict")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, col, label in [
        (axes[0], "final_env_steps_per_s_total", "env steps/s"),
        (axes[1], "final_updates_per_s_total", "gradient updates/s"),
    ]:
        sns.lineplot(df, x="num_workers", y=col, hue="limiter", style="utd", markers=True, ax=ax, errorbar=None)
        base = df[df["num_workers"] == df["num_workers"].min()].groupby(["limiter", "utd"])[col].mean()
        workers = np.sort(df["num_workers"].unique())
        for v in base.to_numpy():
            ax.plot(workers, v * workers / workers[0], color="grey", ls=":", lw=1)
        ax.plot([], [], color="grey", ls=":", label="ideal scaling")
        ax.set_yscale("log")  # strict and free differ by orders of magnitude
        ax.set(xlabel="worker processes", ylabel=f"{label} (log scale)", xticks=workers)
        ax.set_xticklabels([str(w) for w in workers])
    axes[0].get_legend().remove()
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    df["utd_ratio"] = df["final_utd_realised"] / df["utd"]
    sns.barplot(df, x="num_workers", y="utd_ratio", hue="limiter", ax=axes[2], errorbar=None)
    axes[2].axhline(1.0, color="black", lw=1, ls="--")
    axes[2].set(xlabel="worker processes", ylabel="realised UTD / requested UTD")
    return _save(fig, out, title)


def _ci_table(runs: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    rows = []
    for key, g in runs.groupby(by, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        point, lo, hi = stratified_bootstrap_ci([g[value].dropna().to_numpy()])
        rows.append({**dict(zip(by, key)), "iqm": point, "low": lo, "high": hi, "n": len(g)})
    return pd.DataFrame(rows)


def return_vs_utd(runs: pd.DataFrame, out: Path) -> Path:
    title = "Final greedy return vs replay ratio (IQM over seeds, 95% stratified-bootstrap CI)"
    if runs.empty or runs["final_return"].isna().all():
        return _empty(out, title, "no evaluation returns in this experiment")
    table = _ci_table(runs, ["reset", "layer_norm", "utd"], "final_return")
    resets = sorted(table["reset"].unique())
    fig, axes = plt.subplots(1, len(resets), figsize=(5.5 * len(resets), 4.2), squeeze=False, sharey=True)
    for ax, reset in zip(axes[0], resets):
        for ln, g in table[table["reset"] == reset].groupby("layer_norm"):
            g = g.sort_values("utd")
            ax.errorbar(g["utd"], g["iqm"], yerr=[g["iqm"] - g["low"], g["high"] - g["iqm"]], marker="o",
                        capsize=3, label=f"LayerNorm {'on' if ln else 'off'}")  # fmt: skip
        ax.set_xscale("log", base=2)
        utds = sorted(table["utd"].unique())
        ax.set_xticks(utds, [f"{u:g}" for u in utds])
        ax.minorticks_off()
        ax.set(xlabel="UTD (gradient updates per env step, log scale)", ylabel="final greedy return",
               title=f"reset: {reset}")  # fmt: skip
        ax.legend(fontsize=8)
    return _save(fig, out, title)


def collapse_map(runs: pd.DataFrame, out: Path) -> Path:
    title = "Fraction of runs not healthy (diverged or collapsed) over UTD x target period"
    if runs.empty:
        return _empty(out, title, "no runs")
    df = runs.assign(bad=(runs["collapse"] != "healthy").astype(float))
    facets = df.groupby(["layer_norm", "reset"])
    n = len(facets)
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n + 1, 3.8), squeeze=False)
    for ax, ((ln, reset), g) in zip(axes[0], facets):
        grid = g.pivot_table(index="target_period", columns="utd", values="bad", aggfunc="mean")
        sns.heatmap(grid, vmin=0, vmax=1, annot=True, fmt=".2f", cmap="rocket_r", ax=ax,
                    cbar_kws={"label": "fraction not healthy"})  # fmt: skip
        ax.set(xlabel="UTD", ylabel="target period (updates)", title=f"LayerNorm {'on' if ln else 'off'}, reset {reset}")
    return _save(fig, out, title)


DIAGNOSTICS = [
    ("srank", "srank of penultimate features"),
    ("dormant_frac", "dormant fraction (tau 0.1)"),
    ("q_max", "max Q(s,a) on a sampled batch"),
    ("overestimation", "overestimation: max Q - G (return units)"),
]


def diagnostics_over_training(hist: pd.DataFrame, runs: pd.DataFrame, out: Path) -> Path:
    title = "Q-network diagnostics over training, by UTD (mean over runs, 95% CI)"
    df = _series(hist, runs, [m for m, _ in DIAGNOSTICS], ["utd", "layer_norm"])
    if df.empty:
        return _empty(out, title, "no diagnostics logged")
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    for ax, (metric, label) in zip(axes, DIAGNOSTICS):
        if metric in df:
            sns.lineplot(df, x="env_steps", y=metric, hue="utd", style="layer_norm", palette="viridis", ax=ax,
                         errorbar=("ci", 95), n_boot=N_BOOT)  # fmt: skip
        ax.set(xlabel="env steps", ylabel=label)
        _steps_axis(ax)
    _one_legend(list(axes))
    return _save(fig, out, title)


def q_distribution(hist: pd.DataFrame, runs: pd.DataFrame, out: Path) -> Path:
    title = "Distribution of Q(s,a) on sampled batches over training (bands: 5-95% and 25-75%; line: median)"
    qs = ["q_p05", "q_p25", "q_p50", "q_p75", "q_p95"]
    df = _series(hist, runs, qs, ["utd", "layer_norm", "reset"])
    if df.empty:
        return _empty(out, title, "no Q quantiles logged")
    bound = float(runs["final_q_bound"].median()) if "final_q_bound" in runs else None
    df = df.groupby(["utd", "layer_norm", "reset", "env_steps"])[qs].mean().reset_index()
    df["mitigation"] = df.apply(lambda r: f"LN {'on' if r.layer_norm else 'off'}, reset {r.reset}", axis=1)
    utds, mits = sorted(df["utd"].unique()), sorted(df["mitigation"].unique())
    fig, axes = plt.subplots(len(mits), len(utds), figsize=(4.5 * len(utds), 3.2 * len(mits)), squeeze=False,
                             sharex=True, sharey=True)  # fmt: skip
    for i, mit in enumerate(mits):
        for j, utd in enumerate(utds):
            ax = axes[i][j]
            g = df[(df["mitigation"] == mit) & (df["utd"] == utd)].sort_values("env_steps")
            if bound is not None:
                ax.axhline(bound, color="C3", ls="--", lw=1, label="R_max / (1 - gamma)")
            if not g.empty:
                ax.fill_between(g["env_steps"], g["q_p05"], g["q_p95"], alpha=0.2, color="C0")
                ax.fill_between(g["env_steps"], g["q_p25"], g["q_p75"], alpha=0.4, color="C0")
                ax.plot(g["env_steps"], g["q_p50"], color="C0")
            ax.set_title(f"UTD {utd:g}; {mit}", fontsize=9)
            ax.set(xlabel="env steps" if i == len(mits) - 1 else "", ylabel="Q(s,a)" if j == 0 else "")
            _steps_axis(ax)
    if bound is not None:
        axes[0][-1].legend(fontsize=8, loc="upper left")
    return _save(fig, out, title)


def learning_curves(hist: pd.DataFrame, runs: pd.DataFrame, out: Path) -> Path:
    title = "Greedy evaluation return over training (mean over seeds, 95% CI band)"
    df = _series(hist, runs, ["eval_return_mean"], ["utd", "layer_norm", "reset"])
    if df.empty:
        return _empty(out, title, "no evaluations logged")
    mits = sorted(df[["layer_norm", "reset"]].drop_duplicates().itertuples(index=False, name=None))
    fig, axes = plt.subplots(1, len(mits), figsize=(5.5 * len(mits), 4.2), squeeze=False, sharey=True)
    for ax, (ln, reset) in zip(axes[0], mits):
        g = df[(df["layer_norm"] == ln) & (df["reset"] == reset)]
        sns.lineplot(g, x="env_steps", y="eval_return_mean", hue="utd", palette="viridis", ax=ax, errorbar=("ci", 95),
                     n_boot=N_BOOT)  # fmt: skip
        ax.set(xlabel="env steps", ylabel="greedy return", title=f"LayerNorm {'on' if ln else 'off'}, reset {reset}")
        _steps_axis(ax)
    _one_legend(list(axes[0]))
    return _save(fig, out, title)


def worker_shares(runs: pd.DataFrame, out: Path) -> Path:
    title = "Every worker's data is used: produced vs sampled share per worker; policy lag"
    if runs.empty or "final_worker0_produced_share" not in runs:
        return _empty(out, title, "no worker shares logged")
    rows = []
    for _, r in runs.iterrows():
        for w in range(int(r["num_workers"])):
            for kind in ("produced", "sampled"):
                v = r.get(f"final_worker{w}_{kind}_share")
                if v is not None and not pd.isna(v):
                    rows.append({"num_workers": int(r["num_workers"]), "worker": w, "share of": kind, "share": v})
    shares = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.4))
    shares["config"] = shares["num_workers"].astype(str) + " workers / worker " + shares["worker"].astype(str)
    sns.barplot(shares, x="config", y="share", hue="share of", ax=axes[0], errorbar=None)
    axes[0].set(xlabel="", ylabel="share (fraction)", title="env steps produced vs batch elements sampled")
    axes[0].tick_params(axis="x", rotation=30, labelsize=8)
    sns.move_legend(axes[0], "lower center", bbox_to_anchor=(0.5, 1.08), ncol=2, fontsize=8, title=None)
    for ax, col, label, what in [
        (axes[1], "final_policy_lag_mean", "policy lag (updates)", "policy lag at sampling (replay age)"),
        (axes[2], "final_actor_staleness_mean", "actor staleness (updates)", "acting version behind learner (sync delay)"),
    ]:
        if col in runs:
            sns.barplot(runs, x="num_workers", y=col, hue="utd", ax=ax, errorbar=None)
            sns.move_legend(ax, "upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="utd")
        ax.set(xlabel="worker processes", ylabel=label, title=what)
    return _save(fig, out, title)


PLOTS = {
    "throughput_scaling": lambda runs, hist, out: throughput_scaling(runs, out),
    "return_vs_utd": lambda runs, hist, out: return_vs_utd(runs, out),
    "collapse_map": lambda runs, hist, out: collapse_map(runs, out),
    "diagnostics_over_training": lambda runs, hist, out: diagnostics_over_training(hist, runs, out),
    "q_distribution": lambda runs, hist, out: q_distribution(hist, runs, out),
    "learning_curves": lambda runs, hist, out: learning_curves(hist, runs, out),
    "worker_shares": lambda runs, hist, out: worker_shares(runs, out),
}

__all__ = ["PLOTS", "iqm", *PLOTS]
