"""Findings 2 and 2b: are a slow worker's or a long-episode worker's transitions ignored, and does
prioritized replay change whose transitions are used? (``sweeps/workers.py``)."""

from __future__ import annotations

import math

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
    auc_cell,
    fmt_ci,
    iqm_by,
    learned_panel,
    noise_floor,
    same_config_runs,
    stacked,
)
from analysis.stats import bootstrap_ci, iqm, probability_of_improvement
from dqnlab import metrics as M
from dqnlab.statistics import difference_draws


def _workers_variant(row: pd.Series) -> str:
    slow = bool(str(row.get("worker_step_delay_s", "")).strip("() ,0."))
    long = bool(str(row.get("worker_max_episode_steps", "")).strip("() ,0"))
    name = {(False, False): "homogeneous", (True, False): "one_slow", (False, True): "one_long_episodes",
            (True, True): "slow_and_long"}[(slow, long)]  # fmt: skip
    return name + ("_evicting" if row.get("buffer_capacity", math.inf) < row.get("total_env_steps", 0) else "")


WORKERS_ORDER = ["homogeneous", "one_slow", "one_long_episodes", "slow_and_long"]
SHARE_MARGIN = 0.05
"""Finding 2's equivalence margin for shares: a worker counts as sampled in proportion when its sampled
share is within 0.05 of its produced (or resident) share."""


def finding_workers(runs: pd.DataFrame, hist: pd.DataFrame | None = None) -> Finding:
    runs = runs.assign(variant=runs.apply(_workers_variant, axis=1))
    order = [v for v in WORKERS_ORDER + [w + "_evicting" for w in WORKERS_ORDER] if v in set(runs["variant"])]
    rows = []
    for _, r in runs.iterrows():
        for w in range(int(r["num_workers"])):
            for kind in M.SHARE_KINDS:
                col = f"final_{M.worker_share(w, kind)}"
                if col in r and not pd.isna(r[col]):  # studies from before the episodes share lack it
                    rows.append({"variant": r["variant"], "worker": f"worker {w}", "share of": kind, "share": r[col]})
    shares = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, 2, figsize=(16, 4.6), gridspec_kw={"width_ratios": [3, 1.3]})
    shares["bar"] = shares["variant"] + "\n" + shares["worker"]
    sns.barplot(shares, x="bar", y="share", hue="share of", ax=axes[0], estimator=iqm, errorbar=("ci", 95), seed=0)
    axes[0].set(xlabel="", ylabel="share (fraction, end of run)")
    axes[0].set_title("env steps produced / resident / sampled, and episodes finished, per worker", pad=28)
    sns.move_legend(axes[0], "lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(M.SHARE_KINDS), title=None,
                    frameon=False)  # fmt: skip
    axes[0].tick_params(axis="x", labelsize=8)
    md = ["| workers | buffer | worker 1 produced | worker 1 resident | worker 1 sampled | worker 1 episodes | "
          "final return IQM [95% CI] | AUC IQM [95% CI] | vs homogeneous: P(improvement) [95% CI] |",
          "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    f = iqm_by(runs, "variant", order)
    returns_family = Family("each setup minus the homogeneous one with the same buffer (final return)", MARGIN_CARTPOLE)
    shares_family = Family("worker 1's sampled share minus its produced share, per setup", SHARE_MARGIN,
                           words=("higher", "lower"))
    for v, point in zip(order, f[["iqm", "low", "high"]].itertuples(index=False)):
        sub = runs[runs["variant"] == v]
        share = {k: float(np.median(sub[c])) if (c := f"final_{M.worker_share(1, k)}") in sub else math.nan
                 for k in M.SHARE_KINDS}  # fmt: skip
        x = returns_of(sub)
        home = "homogeneous_evicting" if v.endswith("_evicting") else "homogeneous"
        base = returns_of(runs[runs["variant"] == home])
        vs = "—" if v == home else fmt_ci(*probability_of_improvement([x], [base], reps=1000), digits=2)
        if v != home:
            returns_family.difference(f"{v} minus {home}", x, base)
        sampled, produced = f"final_{M.worker_share(1, 'sampled')}", f"final_{M.worker_share(1, 'produced')}"
        if sampled in sub and produced in sub:
            gap = (sub[sampled] - sub[produced]).to_numpy(dtype=float)
            shares_family.add(f"{v}: sampled minus produced", iqm(gap), difference_draws(gap, np.zeros(1)))
        buffer = f"{int(sub['buffer_capacity'].iloc[0]):,}" if "buffer_capacity" in sub else "—"
        md.append(f"| {v} | {buffer} | {share['produced']:.3f} | {share['resident']:.3f} | {share['sampled']:.3f} | "
                  f"{share['episodes']:.3f} | {fmt_ci(*point)} | {auc_cell(sub, hist)} | {vs} |")  # fmt: skip
    md += ["", returns_family.markdown(), "", shares_family.markdown(digits=3)]
    learned_panel(axes[1], f, "variant")
    fig.suptitle("Are a slow worker's or a long-episode worker's transitions ignored? (CartPole-v1, UTD 1, 2 workers, "
                 "10 seeds per cell; shares: medians over seeds, 95% CI)")  # fmt: skip
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_workers.png")




def finding_workers_prioritized(runs: pd.DataFrame, hist: pd.DataFrame, other: pd.DataFrame | None = None) -> Finding:
    """Finding 2 under Ape-X's shared prioritized replay: per setup (homogeneous, one slow, one long-episode
    worker) and replay (uniform, prioritized), worker 1's produced / resident / sampled / episode shares and
    the final return; two families: worker 1's sampled-minus-produced gap and the final return, each
    prioritized minus uniform per setup. ``other``: finding 2's runs, whose cells with a uniform cell's
    configuration and seeds give the noise floor (A/A)."""
    runs = runs.assign(variant=runs.apply(_workers_variant, axis=1))
    order = [v for v in WORKERS_ORDER if v in set(runs["variant"])]
    replays = [r for r in ("uniform", "prioritized") if r in set(runs["replay"])]
    sampled, produced = f"final_{M.worker_share(1, 'sampled')}", f"final_{M.worker_share(1, 'produced')}"
    md = ["| workers | replay | worker 1 produced (median) | worker 1 resident (median) | worker 1 sampled (median) | "
          "sampled minus produced (IQM [95% CI]) | worker 1 episodes (median) | final return IQM [95% CI] | "
          "AUC IQM [95% CI] |",
          "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    gaps_family = Family("worker 1's sampled-minus-produced share, prioritized minus uniform, per setup", SHARE_MARGIN,
                         words=("higher", "lower"))  # fmt: skip
    returns_family = Family("prioritized minus uniform replay, per setup (final return)", MARGIN_CARTPOLE)
    fig, axes = plt.subplots(1, 2, figsize=(15, 4.6))
    width = 0.8 / max(len(replays), 1)
    cells: dict[tuple[str, str], pd.DataFrame] = {}
    for j, replay in enumerate(replays):
        xs = np.arange(len(order)) + (j - (len(replays) - 1) / 2) * width
        gap_points, return_points = [], []
        for v in order:
            sub = cells[(v, replay)] = runs[(runs["variant"] == v) & (runs["replay"] == replay)]
            gap = (sub[sampled] - sub[produced]).to_numpy(dtype=float)
            share = {k: float(np.median(sub[f"final_{M.worker_share(1, k)}"])) for k in M.SHARE_KINDS}
            g_ci, r_ci = bootstrap_ci(gap, reps=1000), bootstrap_ci(returns_of(sub), reps=1000)
            gap_points.append(g_ci)
            return_points.append(r_ci)
            md.append(f"| {v} | {replay} | {share['produced']:.3f} | {share['resident']:.3f} | {share['sampled']:.3f} | "
                      f"{fmt_ci(*g_ci, digits=3)} | {share['episodes']:.3f} | {fmt_ci(*r_ci)} | "
                      f"{fmt_ci(*bootstrap_ci(auc_of(sub, hist), reps=1000))} |")  # fmt: skip
        for ax, points in ((axes[0], gap_points), (axes[1], return_points)):
            p = np.array(points)
            ax.errorbar(xs, p[:, 0], yerr=[p[:, 0] - p[:, 1], p[:, 2] - p[:, 0]], fmt="o", capsize=3, label=replay)
    if len(replays) == 2:
        for v in order:
            prio, uni = cells[(v, "prioritized")], cells[(v, "uniform")]
            gaps_family.difference(f"{v}: prioritized minus uniform", (prio[sampled] - prio[produced]).to_numpy(float),
                                   (uni[sampled] - uni[produced]).to_numpy(float))  # fmt: skip
            returns_family.difference(f"{v}: prioritized minus uniform", returns_of(prio), returns_of(uni))
        md += ["", gaps_family.markdown(digits=3), "", returns_family.markdown()]
    if other is not None and len(other):
        gaps, returns = [], []
        for v in order:
            here = cells.get((v, "uniform"), runs.iloc[:0])
            there = same_config_runs(other, here) if len(here) else here
            if len(there):
                gaps.append((v, (here[sampled] - here[produced]).to_numpy(float),
                             (there[sampled] - there[produced]).to_numpy(float)))  # fmt: skip
                returns.append((v, returns_of(here), returns_of(there)))
        if gaps:
            md += ["", *noise_floor(gaps, "worker 1's sampled-minus-produced share, uniform", "`workers-default`", 3),
                   "", *noise_floor(returns, "the final return, uniform", "`workers-default`")]  # fmt: skip
    axes[0].axhline(0.0, color="black", lw=1, ls="--")
    axes[0].set(ylabel="worker 1: sampled - produced share\n(IQM, 95% CI)", title="is worker 1 sampled in proportion?")
    axes[1].set(ylabel="final greedy return (IQM, 95% CI)", title="what was learned")
    for ax in axes:
        ax.set_xticks(range(len(order)), order)
        ax.legend(fontsize=8)
    fig.suptitle("Does prioritized replay change whose transitions are used? (CartPole-v1, UTD 1, 2 workers, "
                 "10 seeds per cell)")  # fmt: skip
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_workers_prioritized.png")


STUDIES, PRIORITIZED_STUDIES = ["workers-default"], ["workers-prioritized"]


def from_data(read: StudyReader) -> Finding | None:
    present = read(STUDIES)
    return finding_workers(*stacked(present)) if present else None


def prioritized_from_data(read: StudyReader) -> Finding | None:
    """Finding 2b, beside finding 2's runs (the uniform cells' A/A partners) where present."""
    present, default = read(PRIORITIZED_STUDIES), read(STUDIES)
    return finding_workers_prioritized(*stacked(present), stacked(default)[0] if default else None) if present else None


FINDING = DataFinding("2. Workers", STUDIES, from_data)
PRIORITIZED_FINDING = DataFinding("2b. Workers, prioritized replay", PRIORITIZED_STUDIES, prioritized_from_data)
