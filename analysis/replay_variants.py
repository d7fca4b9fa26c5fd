"""Findings 4b and 4c, departures from finding 4's CartPole base: a shorter target period, and prioritized
replay, each against the uniform hard-copy base at the same UTD (``sweeps/replay_ratio.py --preset
target_period`` / ``prioritized``)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.cells import returns_of
from analysis.curves import auc_of, soft_divergence_counts
from analysis.family import Family
from analysis.findings_common import (
    MARGIN_CARTPOLE,
    DataFinding,
    Finding,
    StudyReader,
    final_values,
    fmt_ci,
    iqm_by,
    return_noise_floor,
    stacked,
)
from analysis.stats import bootstrap_ci
from dqnlab import metrics as M
from dqnlab.statistics import fisher_exact, holm


def _divergence_by_period(runs: pd.DataFrame, hist: pd.DataFrame, periods: list, utds: list) -> list[str]:
    """Finding 4b's second family: seeds soft-diverged at any check, each period against 256 env steps at
    each UTD (Fisher's exact test, Holm-corrected; a bootstrap of 0/10 has no spread)."""
    rows = []
    for utd in utds:
        base = runs[(runs["utd"] == utd) & (runs["target_period"] == 256)]
        for period in periods:
            g = runs[(runs["utd"] == utd) & (runs["target_period"] == period)]
            if period == 256 or g.empty or base.empty:
                continue
            hits, base_hits = soft_divergence_counts(g, hist)[0], soft_divergence_counts(base, hist)[0]
            rows.append((utd, period, hits, len(g), base_hits, len(base),
                         fisher_exact(hits, len(g), base_hits, len(base))))  # fmt: skip
    if not rows:
        return []
    adjusted = holm([r[-1] for r in rows])
    md = [f"Family *soft divergence*: {len(rows)} contrasts, seeds soft-diverged at any check, each period against "
          "256 env steps, Fisher's exact test, Holm-corrected (alpha 0.05):", "",
          "| UTD | period (env steps) | soft-diverged | at period 256 | p | Holm p | verdict |",
          "|---|---|---|---|---|---|---|"]  # fmt: skip
    for (utd, period, hits, n, base_hits, base_n, p_value), q in zip(rows, adjusted):
        verdict = ("more" if hits / n > base_hits / base_n else "fewer") if q < 0.05 else "inconclusive"
        md.append(f"| {utd:g} | {period} | {hits}/{n} | {base_hits}/{base_n} | {p_value:.2g} | {q:.2g} | {verdict} |")
    return md


# --- finding 4b: target period ----------------------------------------------------------------------------------
def finding_target_period(runs: pd.DataFrame, hist: pd.DataFrame, same_config: pd.DataFrame | None = None) -> Finding:
    """Finding 4b on the redesigned study: plain DQN, target period (in env steps) x UTD; per cell the final
    return, the AUC and seeds that soft-diverged (at any check / at the end); the family: each period
    against the base period 256 at each UTD. ``same_config``: runs of another study (finding 4's), whose
    cells with a period-256 cell's configuration and seeds give the noise floor (A/A, outside the family)."""
    periods, utds = sorted(runs["target_period"].unique()), sorted(runs["utd"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.3))
    md = ["| UTD | " + " | ".join(f"period {p} env steps: return; AUC; soft div. (any / end)" for p in periods) + " |",
          "|---" * (len(periods) + 1) + "|"]  # fmt: skip
    family = Family("each target period minus 256 env steps, per UTD (final return)", MARGIN_CARTPOLE)
    for period in periods:
        sub = runs[runs["target_period"] == period]
        f = iqm_by(sub, "utd", utds)
        axes[0].errorbar(f["utd"], f["iqm"], yerr=[f["iqm"] - f["low"], f["high"] - f["iqm"]], marker="o", capsize=3,
                         label=f"target period {period}")  # fmt: skip
        ended = [soft_divergence_counts(sub[sub["utd"] == u], hist)[1] / max(len(sub[sub["utd"] == u]), 1) for u in utds]
        axes[1].plot(utds, ended, marker="o", label=f"target period {period}")
    for utd in utds:
        cells = []
        for period in periods:
            g = runs[(runs["utd"] == utd) & (runs["target_period"] == period)]
            if g.empty:
                cells.append("—")
                continue
            n_any, n_end = soft_divergence_counts(g, hist)
            final, auc = bootstrap_ci(returns_of(g), reps=1000), bootstrap_ci(auc_of(g, hist), reps=1000)
            cells.append(f"{fmt_ci(*final)}; {fmt_ci(*auc)}; {n_any}/{len(g)} / {n_end}/{len(g)}")
            if period != 256:
                family.difference(f"UTD {utd:g}: period {period} minus 256", returns_of(g),
                                  returns_of(runs[(runs["utd"] == utd) & (runs["target_period"] == 256)]))  # fmt: skip
        md.append(f"| {utd:g} | " + " | ".join(cells) + " |")
    md += ["", family.markdown(), "", *_divergence_by_period(runs, hist, periods, utds)]
    md += return_noise_floor(same_config, [(f"UTD {u:g}, period 256 env steps",
                                             runs[(runs["utd"] == u) & (runs["target_period"] == 256)]) for u in utds])
    for ax, ylabel in zip(axes, ["final greedy return (IQM, 95% CI)", "fraction of seeds that ended soft-diverged"]):
        ax.set_xscale("log", base=2)
        ax.set_xticks(utds, [f"{u:g}" for u in utds])
        ax.minorticks_off()
        ax.set(xlabel="UTD (updates per env step, log scale)", ylabel=ylabel)
        ax.legend(fontsize=8)
    fig.suptitle("Does a shorter target period diverge more often at high UTD? (CartPole-v1, plain DQN, periods in env "
                 "steps, 10 seeds)")  # fmt: skip
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_target_period.png")


# --- finding 4c: prioritized replay at a high replay ratio ---------------------------------------------------
def finding_replay_prioritized(runs: pd.DataFrame, hist: pd.DataFrame, same_config: pd.DataFrame | None = None) -> Finding:
    """Finding 4c: plain DQN at UTD {1, 4, 16}, uniform vs prioritized replay (target period in env steps).
    Per cell: final return, AUC, seeds soft-diverged (any check / at the end) and the median final max |Q| on
    current data; two families per UTD, prioritized minus uniform: the final return (bootstrap, Holm) and
    the seeds soft-diverged at any check (Fisher's exact test, Holm). ``same_config``: runs of another
    study (finding 4b's), whose cells with a uniform cell's configuration and seeds give the noise floor
    (an A/A comparison, outside the families)."""
    utds = sorted(runs["utd"].unique())
    replays = [r for r in ("uniform", "prioritized") if r in set(runs["replay"])]
    md = ["| UTD | replay | seeds | final return IQM [95% CI] | AUC IQM [95% CI] | soft-diverged (any / end) | "
          "max abs Q, current data (median, end) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    returns_family = Family("prioritized minus uniform replay, per UTD (final return)", MARGIN_CARTPOLE)
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.4))
    counts: dict[tuple[float, str], tuple[int, int]] = {}
    for replay in replays:
        points, ended, qmax = [], [], []
        for utd in utds:
            g = runs[(runs["utd"] == utd) & (runs["replay"] == replay)]
            if g.empty:
                points.append((math.nan,) * 3)
                ended.append(math.nan)
                qmax.append(math.nan)
                continue
            n_any, n_end = counts[(utd, replay)] = soft_divergence_counts(g, hist)
            final = bootstrap_ci(returns_of(g), reps=1000)
            points.append(final)
            ended.append(n_end / len(g))
            q = float(np.nanmedian(final_values(g, M.Q_ABS_MAX_CURRENT)))
            qmax.append(q)
            md.append(f"| {utd:g} | {replay} | {len(g)} | {fmt_ci(*final)} | "
                      f"{fmt_ci(*bootstrap_ci(auc_of(g, hist), reps=1000))} | {n_any}/{len(g)} / {n_end}/{len(g)} | "
                      f"{q:.3g} |")  # fmt: skip
        p = np.array(points)
        axes[0].errorbar(utds, p[:, 0], yerr=[p[:, 0] - p[:, 1], p[:, 2] - p[:, 0]], marker="o", capsize=3, label=replay)
        axes[1].plot(utds, ended, marker="o", label=replay)
        axes[2].plot(utds, qmax, marker="o", label=replay)
    fisher_rows = []
    if len(replays) == 2:
        for utd in utds:
            prio = runs[(runs["utd"] == utd) & (runs["replay"] == "prioritized")]
            uni = runs[(runs["utd"] == utd) & (runs["replay"] == "uniform")]
            returns_family.difference(f"UTD {utd:g}: prioritized minus uniform", returns_of(prio), returns_of(uni))
            if len(prio) and len(uni):
                (hits, _), (base_hits, _) = counts[(utd, "prioritized")], counts[(utd, "uniform")]
                fisher_rows.append((utd, hits, len(prio), base_hits, len(uni),
                                    fisher_exact(hits, len(prio), base_hits, len(uni))))  # fmt: skip
        md += ["", returns_family.markdown()]
    if fisher_rows:
        adjusted = holm([r[-1] for r in fisher_rows])
        md += ["", f"Family *soft divergence*: {len(fisher_rows)} contrasts, seeds soft-diverged at any check, "
               "prioritized against uniform per UTD, Fisher's exact test, Holm-corrected (alpha 0.05):", "",
               "| UTD | prioritized | uniform | p | Holm p | verdict |", "|---|---|---|---|---|---|"]  # fmt: skip
        for (utd, hits, n, base_hits, base_n, p_value), q in zip(fisher_rows, adjusted):
            verdict = ("more" if hits / n > base_hits / base_n else "fewer") if q < 0.05 else "inconclusive"
            md.append(f"| {utd:g} | {hits}/{n} | {base_hits}/{base_n} | {p_value:.2g} | {q:.2g} | {verdict} |")
    md += return_noise_floor(same_config, [(f"UTD {u:g}, uniform", runs[(runs["utd"] == u) & (runs["replay"] == "uniform")])
                                            for u in utds])  # fmt: skip
    for ax, ylabel in zip(axes, ["final greedy return (IQM, 95% CI)", "fraction of seeds that ended soft-diverged",
                                 "max |Q| on current data at the end (median)"]):  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(utds, [f"{u:g}" for u in utds])
        ax.minorticks_off()
        ax.set(xlabel="UTD (updates per env step, log scale)", ylabel=ylabel)
        ax.legend(fontsize=8)
    axes[1].set_ylim(-0.02, 1.05)
    limit = float(np.nanmedian(final_values(runs, M.Q_LIMIT)))
    if math.isfinite(limit):
        axes[2].axhline(limit, color="black", ls="--", lw=1, label="soft-divergence threshold")
        axes[2].legend(fontsize=8)
    axes[2].set_yscale("log")
    fig.suptitle("Does prioritized replay diverge more at a high replay ratio? (CartPole-v1, plain DQN, target period "
                 "in env steps, 10 seeds)")  # fmt: skip
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_replay_prioritized.png")


TARGET_PERIOD_STUDIES = ["replay_ratio-target_period"]
PRIORITIZED_STUDIES = ["replay_ratio-prioritized", "replay_ratio-prioritized-utd1_4", "replay_ratio-prioritized-utd16"]


def _partners(read: StudyReader, names: list[str]) -> pd.DataFrame | None:
    """A/A partners from other studies, where present."""
    present = read(names)
    return stacked(present)[0] if present else None


def target_period_from_data(read: StudyReader) -> Finding | None:
    """Finding 4b; the period-256 cells' A/A partners are finding 4's plain env-step cells."""
    present = read(TARGET_PERIOD_STUDIES)
    partners = ["replay_ratio-cartpole", "replay_ratio-cartpole-plain", "replay_ratio-cartpole-plain-utd16"]
    return finding_target_period(*stacked(present), _partners(read, partners)) if present else None


def prioritized_from_data(read: StudyReader) -> Finding | None:
    """Finding 4c; the uniform cells' A/A partners are 4b's period-256 cells and finding 4's plain env-step cell."""
    present = read(PRIORITIZED_STUDIES)
    partners = ["replay_ratio-target_period", "replay_ratio-cartpole-plain-utd16"]
    return finding_replay_prioritized(*stacked(present), _partners(read, partners)) if present else None


TARGET_PERIOD_FINDING = DataFinding("4b. Target period", TARGET_PERIOD_STUDIES, target_period_from_data)
PRIORITIZED_FINDING = DataFinding("4c. Prioritized replay", PRIORITIZED_STUDIES, prioritized_from_data)
