"""Finding 3: does collecting in parallel change what is learned at the same replay ratio? Serial vs
strict vs free collection (``sweeps/parallel.py``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from analysis.cells import returns_of
from analysis.curves import auc_of
from analysis.family import Family
from analysis.findings_common import (
    MARGIN_CARTPOLE,
    DataFinding,
    Finding,
    StudyReader,
    final_values,
    fmt_ci,
    iqm_by,
    iqm_curves,
    learned_panel,
    stacked,
)
from analysis.stats import bootstrap_ci, iqm, probability_of_improvement
from dqnlab import metrics as M


def _variant(row: pd.Series) -> str:
    if row["mode"] == "serial":
        return f"serial_{int(row['num_workers'])}"
    return f"{row['limiter']}_{int(row['num_workers'])}"


def finding_parallel(runs: pd.DataFrame, hist: pd.DataFrame) -> Finding:
    runs = runs.assign(variant=runs.apply(_variant, axis=1))
    order = [v for v in ["serial_2", "strict_1", "strict_2", "strict_4", "free_1", "free_2", "free_4"]
             if v in set(runs["variant"])]  # fmt: skip
    curves = iqm_curves(hist, runs, M.EVAL_RETURN_MEAN, "variant")
    fig, axes = plt.subplots(1, 3, figsize=(19, 4.6))
    palette = dict(zip(order, sns.color_palette("tab10", len(order))))
    for v in order:
        c = curves[curves["variant"] == v].sort_values(M.ENV_STEPS)
        ls = "--" if v.startswith("free") else "-"
        axes[0].plot(c[M.ENV_STEPS], c["iqm"], ls=ls, color=palette[v], label=v)
        axes[0].fill_between(c[M.ENV_STEPS], c["low"], c["high"], color=palette[v], alpha=0.12)
    axes[0].set(xlabel="env steps", ylabel="greedy return (IQM over seeds, 95% CI band)", title="learning curves")
    axes[0].legend(fontsize=8)
    utd = runs.assign(ratio=final_values(runs, M.UTD_REALISED) / runs["utd"])
    sns.barplot(utd, x="variant", y="ratio", order=order, ax=axes[1], estimator=iqm, errorbar=("ci", 95), palette=palette,
                hue="variant", legend=False, seed=0)  # fmt: skip
    axes[1].axhline(1.0, color="black", lw=1, ls="--")
    axes[1].set(xlabel="", ylabel="realised UTD / requested UTD", title="the replay ratio actually trained at")
    axes[1].tick_params(axis="x", rotation=30)
    md = ["| collection | realised UTD (median over seeds) | final return IQM [95% CI] | AUC IQM [95% CI] | "
          "vs serial: P(improvement) [95% CI] |", "|---|---|---|---|---|"]  # fmt: skip
    base = returns_of(runs[runs["variant"] == "serial_2"]) if "serial_2" in order else np.array([])
    f = iqm_by(runs, "variant", order)
    family = Family("collection vs serial (final return)", MARGIN_CARTPOLE)
    for v, point in zip(order, f[["iqm", "low", "high"]].itertuples(index=False)):
        sub = runs[runs["variant"] == v]
        realised = float(np.median(final_values(sub, M.UTD_REALISED)))
        auc = fmt_ci(*bootstrap_ci(auc_of(sub, hist), reps=1000))
        if v == "serial_2" or not len(base):
            md.append(f"| {v} | {realised:.3f} | {fmt_ci(*point)} | {auc} | — |")
        else:
            x = returns_of(sub)
            family.difference(f"{v} minus serial_2", x, base)
            p = probability_of_improvement([x], [base], reps=1000)
            md.append(f"| {v} | {realised:.3f} | {fmt_ci(*point)} | {auc} | {fmt_ci(*p, digits=2)} |")
    md += ["", family.markdown()]
    learned_panel(axes[2], f, "variant")
    fig.suptitle("Does collecting in parallel change what is learned at the same replay ratio? (CartPole-v1, UTD 1, "
                 "10 seeds per cell)")  # fmt: skip
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_parallel.png")


STUDIES = ["parallel-default"]


def from_data(read: StudyReader) -> Finding | None:
    present = read(STUDIES)
    return finding_parallel(*stacked(present)) if present else None


FINDING = DataFinding("3. Parallel", STUDIES, from_data)
