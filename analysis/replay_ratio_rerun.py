"""Finding 4r, finding 4's primary contrasts rerun at the power declared for them (``sweeps/replay_ratio.py
--preset rerun_cartpole``, ``rerun_default``, ``rerun_acrobot``): plain DQN, UTD {0.25, 1, 4} x the target
period's unit, in serial mode (a cell's seeds depend on their seeds alone: no sitting effect is shared by
a trial's replicas, so the seed is the unit of replication), at budgets where the best cell converges or
plateaus (CartPole 50,000 env steps, Acrobot 100,000), with the seeds a cell the power table of finding 4
asked for (``PLANNED_HALF_WIDTH``: a 95% CI half-width of +-25 return on each primary contrast).

Each study's family, declared on 2026-12-06 before any of its data were read (Holm-Bonferroni on two-sided
bootstrap p-values, alpha 0.05; equivalence margin ``MARGIN`` of the env, TOST at the corrected level):

- **each UTD against its neighbour** (1 minus 0.25, 4 minus 1), per target unit, on the final return and
  on the area under the greedy curve (8 contrasts): a straight-line trend cannot see a drop followed by
  a rise, and the final return cannot see a cell that learns sooner;
- **the unit** (target period in env steps minus in updates) at UTD 0.25 and 4, on the final return (2).

A second family, soft divergence: the seeds whose max \\|Q\\| passed the env's bound at any check, target
in env steps against in updates, at UTD 0.25 and 4 (Fisher's exact test, Holm-corrected).

Declared on 2026-12-07, before its data: the RL Zoo CartPole base again at **100,000 env steps**
(``--preset rerun_cartpole_100k``, study ``replay_ratio-rerun_cartpole_100k``), since at 50,000 its best cell
(UTD 0.25, target in env steps) was still rising; the same two families, 232 seeds a cell (the 50k rerun as
the pilot: its primary contrasts need 162-232 a cell for +-25). Its UTD-0.25 and UTD-1 cells may run first
(the part ``-utd0.25_1``), the UTD-4 cells later; Holm counts the contrasts not run yet as p = 1.
Declared the same day, before its data: dqnlab's default base at 100,000 env steps (``--preset
rerun_default_100k``), since at 50,000 its best cell was still moving and the RL Zoo base's UTD 1 minus 0.25
with the period in updates flipped sign between 50k and 100k; the same families, 217 seeds a cell (its 50k
rerun as the pilot: 93-217 for +-25), to run after the RL Zoo base's UTD-4 blocks.

Contrasts are unpaired: a seed's runs in two cells share their initial weights and env seeds, but the
trajectories part at the first update that differs, and no pairing was declared. The noise floor is
UTD 1's two units (the same copy rate; the copies' phase differs by ``learning_starts mod period`` env
steps), reported beside the family, not in it.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.cells import axes as cell_axes
from analysis.cells import cell_label
from analysis.curves import auc_of, curve_cells, soft_divergence_counts
from analysis.family import Family
from analysis.findings_common import DataFinding, Finding, StudyReader, fmt_ci, stacked
from analysis.replay_ratio import (
    MARGIN,
    PLANNED_HALF_WIDTH,
    REPS,
    UNITS,
    _q,
    _returns,
    cell_rows,
    divergence_contrasts,
    time_to_threshold,
    unit_divergence_lines,
)
from dqnlab import metrics as M
from dqnlab.statistics import bootstrap_ci, bootstrap_difference

STUDIES = {"replay_ratio-rerun_cartpole": ("CartPole-v1", "RL Zoo base"),
           "replay_ratio-rerun_default": ("CartPole-v1", "dqnlab's default base (finding 1's)"),
           "replay_ratio-rerun_acrobot": ("Acrobot-v1", "RL Zoo base"),
           "replay_ratio-rerun_cartpole_100k": ("CartPole-v1", "RL Zoo base, 100k env steps"),
           "replay_ratio-rerun_default_100k": ("CartPole-v1", "dqnlab's default base, 100k env steps")}  # fmt: skip
"""Each rerun study's env and base."""
BLOCK_STARTS = sorted({*range(0, 170, 34), *range(0, 232, 29), *range(0, 217, 31)})
"""The first seeds of the seed blocks a UTD-4 part runs as: Acrobot's 170 seeds in blocks of 34, CartPole's 232
at 100k env steps (RL Zoo base) in blocks of 29, its 217 (default base) in blocks of 31."""
PARTS = ("utd0.25_1", "utd1", "utd4", *(f"utd4-seeds{first}" for first in BLOCK_STARTS))
"""A rerun study may run as studies of its own, one per part (``--axis utd=... --study-name <study>-<part>``:
the same config and seeds per cell; the cheap cells first), read together while the full study is absent.
Acrobot's UTD-1 cells run as ``-utd1`` (before d069b71 a study's grid could not grow). A part too long for
one sitting runs its cells as seed blocks (``--set replicas=K --axis seed=0,K,2K,...``: one trial a block;
the cell pools its blocks' seeds). A results folder does not outlive the machine it ran on, its exported
data do: Acrobot's UTD 4 (~5 h) runs as one part per block of 34 seeds (``-utd4-seeds0``, ``-seeds34``,
..., ``-seeds136``), each exported when its two trials end; CartPole's at 100k env steps (~4 h) as one part
per block of 29 (``-utd4-seeds0``, ``-seeds29``, ..., ``-seeds203``: 46 min for the first, a block fits beside a
session's other work)."""
PLANNED_SEEDS = {"replay_ratio-rerun_cartpole": 110, "replay_ratio-rerun_default": 110,
                 "replay_ratio-rerun_acrobot": 170, "replay_ratio-rerun_cartpole_100k": 232,
                 "replay_ratio-rerun_default_100k": 217}  # fmt: skip
"""Seeds a cell, as the power table asked and the presets run (``sweeps/replay_ratio.py``'s ``RERUNS``; a test
holds them equal). A cell with fewer so far (its blocks still running, part by part) is listed with its count
and held out of the contrasts, the noise floor and the figure until its last block is in: no verdict or
curve is read from part of a planned sample."""
LR_STUDY = "replay_ratio-rerun_lr_check"
"""Three learning rates per UTD on tuning seeds (``--preset rerun_lr_check``): is a UTD effect a step-size effect?"""
NEIGHBOURS = ((1.0, 0.25), (4.0, 1.0))
"""The UTD pairs of the primary contrasts: (higher, lower)."""
UNIT_UTDS = (0.25, 4.0)
"""Where the unit is contrasted (at UTD 1 both units copy the target at the same rate)."""


def _unit(unit: str) -> str:
    return "env steps" if unit == "env_steps" else "updates"


def contrasts(runs: pd.DataFrame, hist: pd.DataFrame, name: str, env: str) -> Family:
    """The family of the module docstring over one study's ``runs`` (plain DQN, UTD x target unit)."""
    cells = {k: g for k, g in runs.groupby(["utd", "target_unit"])}
    final = {k: _returns(g) for k, g in cells.items()}
    auc = {k: auc_of(g, hist) for k, g in cells.items()}
    family = Family(f"rerun at power, {name}", MARGIN.get(env, float("nan")))
    empty = np.array([])
    for score, values in (("final return", final), ("AUC", auc)):
        for unit in UNITS:
            for hi, lo in NEIGHBOURS:
                family.difference(f"{score}, target in {_unit(unit)}: UTD {hi:g} minus {lo:g}",
                                  values.get((hi, unit), empty), values.get((lo, unit), empty))  # fmt: skip
    for u in UNIT_UTDS:
        family.difference(f"final return, UTD {u:g}: target in env steps minus in updates",
                          final.get((u, "env_steps"), empty), final.get((u, "updates"), empty))  # fmt: skip
    return family


def _count(value: float) -> str:
    return f"{value:.0f}" if np.isfinite(value) else "—"


def trial_minutes(runs: pd.DataFrame) -> pd.Series:
    """Per trial (utd, target_unit, study, trial_number): its wall time in minutes (its replicas' median of
    env steps over env steps per second; the replicas of a trial share one clock). A cell run as seed
    blocks has a trial per block; :func:`wall_minutes` sums them."""
    per_run = runs["final_env_steps"] / runs["final_env_steps_per_s_total"] / 60.0
    trial = [runs[c] for c in ("study", "trial_number") if c in runs]  # (runs made by hand: one trial a cell)
    return per_run.groupby([runs["utd"], runs["target_unit"], *trial]).median()


def wall_minutes(runs: pd.DataFrame) -> pd.Series:
    """Per cell (utd, target_unit): the wall time of its trials in minutes, summed over its seed blocks."""
    return trial_minutes(runs).groupby(level=[0, 1]).sum()


def seed_correlations(runs: pd.DataFrame) -> dict[str, float]:
    """For each primary contrast on the final return whose two cells share at least 3 seeds: the Pearson
    correlation over those seeds of the two cells' final returns (whether a pairing by seed would help)."""
    final = runs.pivot_table(index="seed", columns=["utd", "target_unit"], values="final_return")
    out = {}
    pairs = [((hi, u), (lo, u), f"UTD {hi:g} vs {lo:g} in {_unit(u)}") for u in UNITS for hi, lo in NEIGHBOURS]
    pairs += [((u, "env_steps"), (u, "updates"), f"the unit at UTD {u:g}") for u in UNIT_UTDS]
    for a, b, label in pairs:
        if a in final and b in final:
            both = final[[a, b]].dropna()
            if len(both) >= 3:
                out[label] = float(np.corrcoef(both[a], both[b])[0, 1])
    return out


def achieved_half_widths(family: Family) -> dict[str, float]:
    """Each tested contrast's 95% CI half-width (what the planned +-25 became)."""
    return {r["contrast"]: (r["high"] - r["low"]) / 2.0 for r in family.results() if not r["missing"]}


def plain_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rerun's runs: plain DQN (a hard target copy, no LayerNorm, no reset), as ``variant`` ``plain``."""
    plain = (runs["target_update"] == "hard") & ~runs["layer_norm"].astype(bool) & (runs["reset"] == "none")
    return runs[plain].assign(variant="plain")


def split_complete(runs: pd.DataFrame, planned: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``runs`` as (the cells with at least ``planned`` seeds that ended, failed ones not counted: a part
    exported mid-block, a lost trial; the cells still short of it); every cell is complete where nothing
    was planned."""
    seeds = runs["seed"].where(runs["outcome"] != "failed").groupby([runs["utd"], runs["target_unit"]])
    complete = seeds.transform("nunique") >= planned if planned else pd.Series(True, index=runs.index)
    return runs[complete], runs[~complete]


def _running_rows(running: pd.DataFrame, planned: int | None) -> list[str]:
    """The table rows of the cells short of their planned seeds: seeds ended so far and wall time only."""
    minutes = wall_minutes(running)
    ended = running[running["outcome"] != "failed"].groupby(["utd", "target_unit"])["seed"].nunique()
    return [f"| {u:g} | {_unit(unit)} | {ended.get((u, unit), 0)} of {planned} so far | held out until its last "
            f"seed block is in | — | — | — | — | {minutes.get((u, unit), float('nan')):.0f} |"
            for (u, unit), g in running.groupby(["utd", "target_unit"])]  # fmt: skip


def _study_block(name: str, env: str, base: str, runs: pd.DataFrame, hist: pd.DataFrame,
                 running: pd.DataFrame, planned: int | None) -> list[str]:  # fmt: skip
    cells = cell_rows(runs, hist)
    spent = pd.concat([runs, running])
    if spent.empty:
        return []
    minutes, trials = wall_minutes(spent), len(trial_minutes(spent))
    steps = int(spent["total_env_steps"].median())
    md = [f"\n**{env}, {base}** (`{name}`, {steps:,} env steps): per cell, final greedy return (mean of the last "
          "quarter of the evaluations) and area under the greedy curve, IQM over seeds [95% bootstrap CI]; seeds "
          "soft-diverged at any check / at the end; median final max \\|Q\\|; target copies (median); the cell's "
          "wall time (all of a trial's seeds at once, serial mode; a cell run as seed blocks: its trials summed).", "",
          "| UTD | target in | seeds | final return | AUC | soft div. (any / end) | max \\|Q\\| | target copies | "
          "wall (min) |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    order = (lambda c: c.map(UNITS.index) if c.name == "target_unit" else c)
    for r in (cells if cells.empty else cells.sort_values(["utd", "target_unit"], key=order)).itertuples():
        md.append(f"| {r.utd:g} | {_unit(r.target_unit)} | {r.n} | {fmt_ci(*r.final)} | {fmt_ci(*r.auc)} | "
                  f"{r.diverged[0]}/{r.n} / {r.diverged[1]}/{r.n} | {_q(r.q_max)} | {_count(r.target_updates)} | "
                  f"{minutes.get((r.utd, r.target_unit), float('nan')):.0f} |")  # fmt: skip
    md += _running_rows(running, planned)
    md += ["", f"Cost: {minutes.sum():.0f} min of trial wall time for the {trials} trials (summed; trials "
           "run side by side overlap in the clock)."]
    if runs.empty:
        return md
    a_a = [_returns(runs[(runs["utd"] == 1.0) & (runs["target_unit"] == unit)]) for unit in ("env_steps", "updates")]
    if all(len(x) for x in a_a):
        d, draws = bootstrap_difference(*a_a, reps=REPS)
        floor = fmt_ci(d, *np.quantile(draws, [0.025, 0.975]))
        md += ["", "Noise floor (UTD 1: the target copied at the same rate in both units, at a different phase; final "
               f"return, env steps minus updates [95% CI]; not in the family): {floor}."]  # fmt: skip
    family = contrasts(runs, hist, name, env)
    widths = achieved_half_widths(family)
    md += ["", family.markdown(digits=1), ""]
    if widths:
        md += [f"The 95% CI half-widths the power plan asked to be at most ±{PLANNED_HALF_WIDTH:g}: "
               + "; ".join(f"{c.removeprefix('final return, ')} ±{w:.0f}" for c, w in widths.items()
                           if c.startswith("final")) + "."]  # fmt: skip
    pairs = seed_correlations(runs)
    if pairs:
        md += ["", "Pairing (not used; declared unpaired): the correlation over seeds of the final return of the same "
               "seed in the two cells of each contrast, " + "; ".join(f"{c} r = {r:+.2f}" for c, r in pairs.items())
               + ". A paired contrast would narrow a CI by about sqrt(1 - r) where r > 0."]  # fmt: skip
    declared = len(UNIT_UTDS)
    md += unit_divergence_lines(divergence_contrasts(runs, hist, declared), f"soft divergence, rerun, {name}",
                                "the target in env steps vs in updates", ("target in env steps", "target in updates"),
                                "env steps", declared)  # fmt: skip
    if env == "CartPole-v1":
        reached = time_to_threshold(runs, hist, 475.0)
        md += ["", "Env steps to a greedy return of 475 (the first evaluation whose IQM over seeds reaches it; held: "
               "it stays there to the end):", "", "| cell | first env step with IQM >= 475 | held | best IQM (at env "
               "step) |", "|---|---|---|---|"]  # fmt: skip
        for r in reached.itertuples():
            first = "not reached" if r.first is None else f"{r.first:,}"
            md.append(f"| {r.cell.replace(', plain', '')} | {first} | {'yes' if r.held else 'no'} | "
                      f"{r.best:.0f} (at {r.best_at:,}) |")  # fmt: skip
    return md


def lr_check_lines(runs: pd.DataFrame, hist: pd.DataFrame) -> list[str]:
    """The learning-rate check (``--preset rerun_lr_check``): per UTD and rate, the final return and AUC
    (IQM [95% CI]) and soft-diverged seeds. Tuning seeds, never a verdict's: no family, a reading only."""
    md = ["", f"**Learning-rate check** (`{LR_STUDY}`; CartPole RL Zoo base, target in env steps, seeds 1000-1009: "
          "tuning seeds, no verdict's; the rate varied around RL Zoo's 2.3e-3, x0.5 and x2): is a UTD effect a "
          "step-size effect?", "",
          "| UTD | lr | seeds | final return | AUC | soft div. (any / end) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for (u, lr), g in plain_runs(runs).groupby(["utd", "lr"]):
        (any_, end), n = soft_divergence_counts(g, hist), len(g)
        final, auc = (fmt_ci(*bootstrap_ci(v, reps=REPS)) for v in (_returns(g), auc_of(g, hist)))
        md.append(f"| {u:g} | {lr:.2g} | {n} | {final} | {auc} | {any_}/{n} / {end}/{n} |")
    return md


def finding_rerun(studies: dict[str, tuple[pd.DataFrame, pd.DataFrame]],
                  lr_check: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                  planned: dict[str, int] | None = None) -> Finding:  # fmt: skip
    """Finding 4r: one block of tables and one row of the figure per rerun study present (name -> (runs,
    hist)), and the learning-rate check's table where it ran. A cell short of its study's ``planned`` seeds
    (default :data:`PLANNED_SEEDS`) is listed, never contrasted or drawn."""
    planned = PLANNED_SEEDS if planned is None else planned
    md: list[str] = []
    fig, axes = plt.subplots(len(studies), 3, figsize=(18, 4.4 * len(studies)), squeeze=False)
    for axrow, (name, (runs, hist)) in zip(axes, studies.items()):
        env, base = STUDIES[name]
        runs, running = split_complete(plain_runs(runs), planned.get(name))
        md += _study_block(name, env, base, runs, hist, running, planned.get(name))
        if runs.empty:
            axrow[0].set_title(f"{env}, {base}: every cell still running")
            for ax in axrow:
                ax.set_axis_off()
        else:
            _draw(axrow, runs, hist, f"{env}, {base}")
    if lr_check is not None:
        md += lr_check_lines(*lr_check)
    fig.suptitle("Finding 4's primary contrasts at power: plain DQN, UTD x the target period's unit (serial mode)")
    fig.tight_layout()
    return Finding("\n".join(md).strip("\n"), fig, "finding_replay_ratio_rerun.png")


def _draw(axrow, runs: pd.DataFrame, hist: pd.DataFrame, title: str) -> None:
    cells = cell_rows(runs, hist)
    for unit, g in cells.groupby("target_unit"):
        g = g.sort_values("utd")
        style = dict(ls="-" if unit == "env_steps" else "--", marker="o", capsize=2, label=f"target in {_unit(unit)}")
        for ax, key in ((axrow[0], "final"), (axrow[1], "auc")):
            point, low, high = (np.array([f[i] for f in g[key]]) for i in range(3))
            ax.errorbar(g["utd"], point, yerr=[point - low, high - point], **style)
    for ax, ylabel in zip(axrow[:2], ["final greedy return (IQM, 95% CI)", "area under the greedy curve (IQM, 95% CI)"]):
        ax.set_xscale("log", base=2)
        ax.set_xticks([0.25, 1, 4], ["0.25", "1", "4"])
        ax.minorticks_off()
        ax.set(xlabel="UTD (updates per env step)", ylabel=ylabel, title=title)
    axrow[0].legend(fontsize=8)
    keyed = runs.assign(cell=[f"UTD {r.utd:g}, in {_unit(r.target_unit)}" for r in runs.itertuples()])
    curves = curve_cells(hist, keyed, M.EVAL_RETURN_MEAN, "cell")
    for cell, c in curves.groupby("cell"):
        (line,) = axrow[2].plot(c[M.ENV_STEPS], c["iqm"], ls="-" if "env steps" in cell else "--", label=cell)
        axrow[2].fill_between(c[M.ENV_STEPS], c["low"], c["high"], color=line.get_color(), alpha=0.15)
    axrow[2].set(xlabel="env steps", ylabel="greedy return (IQM over seeds, 95% CI)", title=title)
    axrow[2].legend(fontsize=7)


def by_study(present: dict[str, tuple[pd.DataFrame, pd.DataFrame]]) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """The rerun studies present (name -> (runs, hist)) by their full study's name: the full study where
    present, else its parts (:data:`PARTS`) together. A failed run (its trial lost) is left out: it has no
    result, so it neither counts among a cell's seeds nor stops the same seeds from being rerun in another
    part; a cell none of whose seeds ended is then absent (not run yet)."""
    out = {}
    for name in STUDIES:
        parts = [present[name]] if name in present else [present[p] for p in _parts(name) if p in present]
        if parts:
            runs, hist = stacked(dict(enumerate(parts)))
            if "outcome" in runs:
                runs = runs[runs["outcome"] != "failed"]
                hist = hist[hist["run_id"].isin(runs["run_id"])]
            cell = list(dict.fromkeys(["utd", "target_unit", *cell_axes(runs)]))
            twice = runs[runs.duplicated([*cell, "seed"], keep=False)]
            if not twice.empty:  # parts overlap (a UTD or a seed block run twice): a seed would count twice
                first = twice.iloc[0]
                raise ValueError(f"{name}: seed {first['seed']} of cell {cell_label(first, cell)} is in "
                                 f"{sorted(set(twice['study']))}; each seed of a cell must come from one part")  # fmt: skip
            out[name] = runs, hist
    return out


def _parts(name: str) -> list[str]:
    return [f"{name}-{part}" for part in PARTS]


def from_data(read: StudyReader) -> Finding | None:
    present = by_study(read([s for name in STUDIES for s in (name, *_parts(name))]))
    lr_check = read([LR_STUDY]).get(LR_STUDY)
    return finding_rerun(present, lr_check) if present else None


FINDING = DataFinding("4r. Replay ratio at power", [*(s for name in STUDIES for s in (name, *_parts(name))), LR_STUDY],
                      from_data)  # fmt: skip
