"""Finding 1: do updates from different processes overwrite each other? The single learner against the
naive writers (``sweeps/writers.py``)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.cells import returns_of
from analysis.family import Family
from analysis.findings_common import (
    MARGIN_CARTPOLE,
    DataFinding,
    Finding,
    StudyReader,
    auc_cell,
    final_values,
    fmt_ci,
    iqm_by,
    stacked,
)
from analysis.stats import bootstrap_ci, probability_of_improvement
from dqnlab import metrics as M

WRITERS_ORDER = ["single", "hogwild", "local_copies", "a3c", "a3c, sync 5"]
A3C_SYNC5 = "a3c, sync 5"
"""a3c whose local copies take the shared vector every 5 env steps (Mnih et al.'s t_max), not the naive grid's
100 (study ``writers-a3c-sync5``): a check of the finding's explanation run after its data, so outside the family."""
NAIVE_UTDS = (1.0, 4.0)
"""The replay ratios of the naive writers' grid (``sweeps/writers.py --preset naive``)."""


def owed_updates(runs: pd.DataFrame) -> pd.Series:
    """What the limiter owes each run at its end: ``floor(utd * (total_env_steps - learning_starts))``."""
    return np.floor(runs["utd"] * (runs["total_env_steps"] - runs["learning_starts"]) + 1e-9)


def _stale_age(g: pd.DataFrame) -> str:
    """The median over seeds of a3c's mean pushed-gradient age (updates); "—" for the other writers."""
    col = f"final_{M.STALE_GRADIENT_AGE_MEAN}"
    if col not in g or not g["writers"].str.startswith("a3c").all() or g[col].isna().all():
        return "—"
    return f"{np.nanmedian(g[col]):.1f}"


def finding_writers(runs: pd.DataFrame, hist: pd.DataFrame | None = None) -> Finding:
    """The single learner beside the naive writers, per cell (writers x workers x UTD): final return,
    divergence, lost-update fraction (``local_copies``), raced-write fraction (``hogwild``, ``a3c``) and
    the age of pushed gradients (``a3c``)."""
    sync5 = runs["writers"].eq("a3c") & runs["sync_every"].eq(5)
    runs = runs.assign(diverged=runs["collapse"].eq("diverged"), writers=runs["writers"].where(~sync5, A3C_SYNC5),
                       cell=runs.apply(lambda r: f"{int(r['num_workers'])} workers, UTD {r['utd']:g}", axis=1))  # fmt: skip
    cells = sorted(runs["cell"].unique(), key=lambda c: (float(c.split("UTD ")[1]), c))
    order = [w for w in WRITERS_ORDER if w in set(runs["writers"])]
    fig, axes = plt.subplots(1, 3, figsize=(19, 4.6))
    width = 0.8 / len(order)
    md = ["| cell | writers | seeds | final return IQM [95% CI] | AUC IQM [95% CI] | diverged | lost-update fraction "
          "(median [min, max]) | raced-write fraction (median) | stale-gradient age, updates (median) | updates = owed | "
          "vs single: P(improvement) [95% CI] |", "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for j, w in enumerate(order):
        xs = np.arange(len(cells)) + (j - (len(order) - 1) / 2) * width
        f = iqm_by(runs[runs["writers"] == w], "cell", cells)
        axes[0].errorbar(xs, f["iqm"], yerr=[f["iqm"] - f["low"], f["high"] - f["iqm"]], fmt="o", capsize=3, label=w)
        lost = [runs[(runs["writers"] == w) & (runs["cell"] == c)] for c in cells]
        axes[1].bar(xs, [float(np.median(final_values(g, M.LOST_UPDATE_FRAC))) if len(g) else np.nan for g in lost], width,
                    label=f"{w}: lost updates")  # fmt: skip
        axes[1].scatter(xs, [float(np.median(final_values(g, M.RACED_WRITE_FRAC))) if len(g) else np.nan for g in lost],
                        marker="x", color="black", zorder=3, label="raced writes" if j == 0 else None)  # fmt: skip
        axes[2].bar(xs, [g["diverged"].mean() if len(g) else np.nan for g in lost], width, label=w)
    base = {c: returns_of(runs[(runs["writers"] == "single") & (runs["cell"] == c)]) for c in cells}
    family = Family("each naive setup minus the single learner, per cell; and the explanation: local copies of N "
                    "workers at UTD u minus the single learner at UTD u/N (final return)", MARGIN_CARTPOLE)
    for c in cells:
        for w in [w for w in order[1:] if w != A3C_SYNC5]:  # the naive grid has UTD 1 and 4 only (UTD 1/4 and 1/2
            # hold the single learner alone)
            if len(base[c]) and float(c.split("UTD ")[1]) in NAIVE_UTDS:
                family.difference(f"{c}: {w} minus single", returns_of(runs[(runs["writers"] == w) & (runs["cell"] == c)]),
                                  base[c])  # fmt: skip
    for n in (2, 4):
        for u in (1.0, 4.0):
            copies = runs[(runs["writers"] == "local_copies") & (runs["num_workers"] == n) & (runs["utd"] == u)]
            single = runs[(runs["writers"] == "single") & (runs["num_workers"] == n) & np.isclose(runs["utd"], u / n)]
            if len(copies) and len(single):
                family.difference(f"local_copies, {n} workers, UTD {u:g} minus single, {n} workers, UTD {u / n:g}",
                                  returns_of(copies), returns_of(single))  # fmt: skip
    for c in cells:
        for w in order:
            g = runs[(runs["writers"] == w) & (runs["cell"] == c)]
            if g.empty:
                continue
            x = returns_of(g)
            point = bootstrap_ci(x, reps=1000) if len(x) else (math.nan,) * 3
            lost = final_values(g, M.LOST_UPDATE_FRAC)
            exact = int((final_values(g, M.UPDATES) == owed_updates(g)).sum())
            vs = ("—" if w == "single" or not len(x) or not len(base[c])
                  else fmt_ci(*probability_of_improvement([x], [base[c]], reps=1000), digits=2))  # fmt: skip
            md.append(f"| {c} | {w} | {len(g)} | {fmt_ci(*point)} | {auc_cell(g, hist)} | "
                      f"{int(g['diverged'].sum())}/{len(g)} | "
                      f"{np.median(lost):.3f} [{lost.min():.3f}, {lost.max():.3f}] | "
                      f"{np.median(final_values(g, M.RACED_WRITE_FRAC)):.3f} | {_stale_age(g)} | {exact}/{len(g)} | "
                      f"{vs} |")  # fmt: skip
    md += ["", family.markdown()]
    for ax in axes:
        ax.set_xticks(range(len(cells)), cells, rotation=20)
        ax.legend(fontsize=8)
    axes[0].set(ylabel="final greedy return (IQM, 95% CI)", title="what was learned")
    axes[1].set(ylabel="fraction of updates (median over seeds)", title="updates lost / writes that raced")
    axes[2].set(ylabel="fraction of seeds diverged", title="divergence (max |Q| above R_max/(1-gamma), or NaN)",
                ylim=(0, 1.05))
    fig.suptitle("Do updates from different processes overwrite each other? One learner vs the naive writers "
                 "(CartPole-v1, 10 seeds per cell)")  # fmt: skip
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_writers.png")


STUDIES = ["writers-single", "writers-naive-utd1", "writers-naive-utd4", "writers-a3c-utd1", "writers-a3c-utd4",
           "writers-a3c-sync5"]  # fmt: skip


def from_data(read: StudyReader) -> Finding | None:
    present = read(STUDIES)
    return finding_writers(*stacked(present)) if present else None


FINDING = DataFinding("1. Writers", STUDIES, from_data)
