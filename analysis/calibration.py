"""Finding 0, calibration: dqnlab at published baselines' own settings (``sweeps/calibration.py``),
reported as each publication reports its figure and as greedy evaluations, beside the published one.

The criterion: a setting is **calibrated** when our mean over seeds of the same measure is within the
setting's margin (a tenth of the env's return range: CartPole 50, Acrobot 45) of the published mean,
and the published mean lies inside our 95% bootstrap CI of the mean, or our mean +- std over seeds and
the published mean +- std overlap (publications give mean +- std over 3 seeds or fewer; std with
ddof 1, their convention). Otherwise it is **not reproduced**, and the table says by how much. The
margin was added on 2026-12-06, after the data were read (post hoc): without it a bounded return whose
CI reaches the bound (RL Zoo CartPole, mean 390 with 3 of 10 seeds at 98-195) was called calibrated
against a published 500.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from analysis.curves import auc_of, curve_cells, final_metric, soft_divergence_counts
from analysis.findings_common import DataFinding, Finding, StudyReader, fmt_ci
from dqnlab import metrics as M
from dqnlab.statistics import bootstrap_ci, iqm


@dataclass(frozen=True)
class Published:
    label: str
    measure: str
    """``train`` (training episodes under the exploration policy) or ``greedy`` (the final model's greedy
    episodes)."""
    mean: float | None
    std: float | None
    source: str
    margin: float = 50.0
    """How far our mean may sit from the published one (a tenth of the env's return range)."""


PUBLISHED = {
    "calibration-cleanrl": Published("CleanRL dqn.py (MSE)", "train", 488.69, 16.11,
                                     "CleanRL docs, dqn.py on CartPole-v1, 3 seeds, training-episode return"),
    "calibration-cleanrl_huber": Published("CleanRL dqn.py with the Huber loss", "train", None, None,
                                           "no published figure: the loss swapped, to measure its effect"),
    "calibration-rlzoo": Published("RL Zoo dqn.yml ported literally (target every 10 env steps)", "greedy", 500.0,
                                   0.0, "rl-baselines3-zoo benchmark.md, 1 seed, 300 greedy episodes of the final model"),
    "calibration-rlzoo_bursts": Published("RL Zoo dqn.yml, SB3's effective target period (128 updates)", "greedy",
                                          500.0, 0.0, "as above"),
    "calibration-rlzoo_bursts_64": Published("the same with a 64-64 network", "greedy", None, None,
                                             "no published figure: one departure (the width), measured"),
    "calibration-rlzoo_acrobot": Published("RL Zoo dqn.yml on Acrobot-v1", "greedy", -76.639, 11.752,
                                           "rl-baselines3-zoo benchmark.md, 1 seed, 1,932 greedy episodes of the "
                                           "final model", margin=45.0),
}  # fmt: skip
ORDER = list(PUBLISHED)


def as_published(runs: pd.DataFrame, measure: str) -> np.ndarray:
    """Per seed, the measure the publication reports: the mean return of its last 10 training episodes
    (``train``), or its final greedy evaluation (``greedy``; 10 episodes)."""
    metric = M.TRAIN_RETURN_LAST[10] if measure == "train" else M.EVAL_RETURN_MEAN
    values = final_metric(runs, metric)
    return values[np.isfinite(values)]


def verdict(ours: np.ndarray, pub: Published) -> str:
    """The declared criterion (module docstring), saying which of its two tests passed: the published
    mean inside our 95% CI of the mean (shown), or only the two mean +- std ranges overlapping, a weak
    test where the publication's std comes from one or three seeds."""
    if pub.mean is None or not len(ours):
        return "—"
    mean, std = float(np.mean(ours)), float(np.std(ours, ddof=1))
    _, low, high = bootstrap_ci(ours, statistic=np.mean, reps=2000)
    ci = f"our mean's CI [{low:.0f}, {high:.0f}]"
    if abs(mean - pub.mean) > pub.margin:
        return f"not reproduced ({mean - pub.mean:+.0f}, beyond ±{pub.margin:g}; {ci})"
    if low <= pub.mean <= high:
        return f"calibrated (published mean inside {ci})"
    if mean - std <= pub.mean + (pub.std or 0.0) and pub.mean - (pub.std or 0.0) <= mean + std:
        return f"calibrated, ± std overlap only (published mean outside {ci})"
    return f"not reproduced ({mean - pub.mean:+.0f}; {ci})"


def finding_calibration(studies: dict[str, tuple[pd.DataFrame, pd.DataFrame]]) -> Finding:
    names = [n for n in ORDER if n in studies]
    md = ["| setting | seeds | published (mean ± std) | ours as published: mean ± std | IQM [95% CI] | verdict | "
          "final greedy return, IQM [95% CI] | area under the greedy curve, IQM [95% CI] | soft divergence: at any "
          "check / at the end | "
          "max \\|Q\\| at the end (median) |",
          "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(20, 4.8))
    palette = dict(zip(names, sns.color_palette("tab10", len(names))))
    for name in names:
        runs, hist = studies[name]
        pub = PUBLISHED[name]
        ours = as_published(runs, pub.measure)
        published = "—" if pub.mean is None else f"{pub.mean:.1f} ± {pub.std:.1f} ({pub.measure})"
        mean_std = f"{np.mean(ours):.1f} ± {np.std(ours, ddof=1):.1f} ({pub.measure})" if len(ours) else "—"
        final = runs["final_return"].to_numpy(dtype=float)
        final = final[np.isfinite(final)]
        aucs = auc_of(runs, hist)
        n_any, n_end = soft_divergence_counts(runs, hist)
        qmax = np.nanmedian(np.fmax(final_metric(runs, M.Q_ABS_MAX_CURRENT), final_metric(runs, M.Q_PROBE_ABS_MAX)))
        md.append(f"| {pub.label} | {len(runs)} | {published} | {mean_std} | {fmt_ci(*bootstrap_ci(ours))} | "
                  f"{verdict(ours, pub)} | {fmt_ci(*bootstrap_ci(final))} | {fmt_ci(*bootstrap_ci(aucs))} | "
                  f"{n_any}/{len(runs)} / {n_end}/{len(runs)} | {_q(qmax)} |")  # fmt: skip
        for ax, metric in ((axes[0], M.EVAL_RETURN_MEAN), (axes[1], M.TRAIN_RETURN_LAST[100])):
            c = curve_cells(hist, runs.assign(cell=name), metric, "cell")
            if not c.empty:
                ax.plot(c[M.ENV_STEPS], c["iqm"], color=palette[name], label=pub.label)
                ax.fill_between(c[M.ENV_STEPS], c["low"], c["high"], color=palette[name], alpha=0.15)
        q = curve_cells(hist, runs.assign(cell=name), M.Q_ABS_MAX_CURRENT, "cell", statistic=np.median)
        if not q.empty:
            axes[2].plot(q[M.ENV_STEPS], q["iqm"], color=palette[name], label=pub.label)
    for ax, (ylabel, title) in zip(axes, [("greedy return (IQM over seeds, 95% CI)", "greedy evaluations"),
                                          ("mean return of the last 100 training episodes (IQM, 95% CI)",
                                           "as the publications report: training episodes"),
                                          ("max |Q| on current data (median over seeds; log)", "divergence")]):
        ax.set(xlabel="env steps", ylabel=ylabel, title=title)
    axes[2].set_yscale("log")
    for ax in axes:  # the CleanRL settings run 500k env steps, the RL Zoo ones 50k (Acrobot 100k): all visible
        ax.set_xscale("log")
    axes[2].axhline(150, color="black", ls="--", lw=1, label="q_limit (1.5 x R_max/(1-gamma))")
    axes[0].legend(fontsize=8)
    axes[2].legend(fontsize=8)
    fig.suptitle("Calibration: dqnlab at published DQN settings on CartPole-v1 and Acrobot-v1 (returns 0 to 500 and "
                 "-500 to 0; 10 seeds each)")
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_calibration.png")


def _q(value: float) -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value:.3g}" if value < 1e4 else f"{value:.1e}"


__all__ = ["PUBLISHED", "finding_calibration", "iqm"]


def from_data(read: StudyReader) -> Finding | None:
    present = read(ORDER)
    return finding_calibration(present) if present else None


FINDING = DataFinding("0. Calibration", ORDER, from_data)
