"""Finding 4, the replay-ratio study redesigned (``sweeps/replay_ratio.py``): UTD {0.25, 1, 4, 16} x the
target period's unit (gradient updates or env steps) x {plain, LayerNorm, head reset on an env-step
schedule}, per env.

The family of comparisons of one env, declared before reading the data and corrected together
(:class:`analysis.family.Family`: Holm-Bonferroni on two-sided bootstrap p-values, alpha 0.05):

- the **UTD trend** of each (unit, variant): the least-squares slope of the cell IQM of the final
  return against log2 UTD (6 contrasts);
- the **unit** at each UTD other than 1 for each variant: target period in env steps minus in updates
  (9 contrasts; at UTD 1 both units are the same configuration);
- each **mitigation** against plain DQN at each UTD and unit (16 contrasts).

A second family, for soft divergence: at each UTD other than 1 and each variant, the seeds that
soft-diverged at any check with the target in env steps against in updates (Fisher's exact test,
Holm-corrected; a bootstrap of 0/10 has no spread). It asks the confound's question directly: does
counting the target period in updates, which copies the target ``utd`` times more often per env
step, change how often Q runs away?

A third family, for soft divergence across UTDs: with the target period in env steps (so the target is
copied equally often per env step at every UTD), the seeds that soft-diverged at any check at each UTD
other than 1 against UTD 1, per variant (Fisher's exact test, Holm-corrected within this family). It
asks what the second family cannot: with the copy rate held, does the replay ratio itself make Q run
away? Declared in session 11, after CartPole's UTD-16 cells had been read (so CartPole's reading of it
is post hoc) and before any Acrobot data existed.

A study of a sub-grid (``--axis``) declares the same contrasts over the UTDs and variants it ran.

The **noise floor**: at UTD 1 the two units are the same configuration with the same seeds, so their
difference is the run-to-run noise of parallel collection (the actors' interleaving with the
learner); no effect smaller than it is claimed. "The same" is claimed only by an equivalence test
(TOST on the bootstrap distribution, family-corrected) with the margin :data:`MARGIN` of the env,
declared here: a tenth of the env's return range.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.curves import auc_of, final_metric, soft_divergence_counts
from analysis.family import Family
from analysis.findings_common import DataFinding, Finding, Studies, StudyReader, fmt_ci, stacked
from dqnlab import metrics as M
from dqnlab.statistics import (
    bootstrap_ci,
    bootstrap_difference,
    fisher_exact,
    holm,
    seeds_for_half_width,
    trend_draws,
    trend_slope,
)

VARIANTS = ["plain", "layernorm", "head_reset"]
UNITS = ["updates", "env_steps"]
MARGIN = {"CartPole-v1": 50.0, "Acrobot-v1": 45.0}
"""Equivalence margins, a tenth of each env's return range (CartPole 0..500; Acrobot -500..-50)."""
REPS = 2000


def variant_of(row: pd.Series) -> str:
    if row.get("layer_norm"):
        return "layernorm"
    return "head_reset" if row.get("reset") == "head" else "plain"


def _returns(runs: pd.DataFrame) -> np.ndarray:
    v = runs["final_return"].to_numpy(dtype=float)
    return v[np.isfinite(v)]


def contrasts(runs: pd.DataFrame, env: str) -> Family:
    """The family of one env (the module docstring says which contrasts, declared before the data)."""
    values = {k: _returns(g) for k, g in runs.groupby(["utd", "target_unit", "variant"])}
    utds = sorted(runs["utd"].unique())
    variants = [v for v in VARIANTS if v in set(runs["variant"])]  # a study of a sub-grid declares its own
    family = Family(f"replay ratio, {env}", MARGIN.get(env, float("nan")))
    for unit in UNITS:
        for v in variants:
            ran = [u for u in utds if len(values.get((u, unit, v), []))]  # a variant may lack a UTD so far
            if len(ran) >= 2:
                cells = [values[(u, unit, v)] for u in ran]
                slope = trend_slope(np.log2(ran), cells)
                span = "" if ran == utds else f" over UTD {', '.join(f'{u:g}' for u in ran)}"
                family.add(f"UTD trend, target in {unit}, {v}{span} (return per doubling of UTD)", slope,
                           trend_draws(np.log2(ran), cells),
                           testable_equivalence=False)  # fmt: skip
    for v in variants:
        for u in utds:
            if u != 1.0:
                family.difference(f"UTD {u:g}, {v}: target in env steps minus in updates",
                                  values.get((u, "env_steps", v), []), values.get((u, "updates", v), []))  # fmt: skip
    for unit in UNITS:
        for v in [v for v in variants if v != "plain"]:
            for u in utds:
                family.difference(f"UTD {u:g}, target in {unit}: {v} minus plain", values.get((u, unit, v), []),
                                  values.get((u, unit, "plain"), []))  # fmt: skip
    return family


def _holm_verdicts(out: pd.DataFrame, declared: int = 0) -> pd.DataFrame:
    """A family of Fisher contrasts (``p``, ``sign`` of the first rate minus the second) with its Holm
    adjustment and verdict: ``more``/``fewer`` where the adjusted p < 0.05, else ``inconclusive``. Holm
    counts ``declared`` contrasts where more were declared than run (one not run as p = 1)."""
    if out.empty:
        return out
    out["p_holm"] = holm(out["p"].to_numpy(), declared)
    out["verdict"] = [("more" if s > 0 else "fewer") if q < 0.05 else "inconclusive"
                      for s, q in zip(out["sign"], out["p_holm"])]  # fmt: skip
    return out


def divergence_contrasts(runs: pd.DataFrame, hist: pd.DataFrame, declared: int = 0) -> pd.DataFrame:
    """The soft-divergence family (module docstring): per variant and UTD other than 1, seeds soft-diverged
    at any check with the target in env steps and in updates, Fisher's p and its Holm adjustment (over
    ``declared`` contrasts where more were declared than run), and the verdict (``fewer``/``more`` in env
    steps where the adjusted p < 0.05, else ``inconclusive``)."""
    rows = []
    for v in [v for v in VARIANTS if v in set(runs["variant"])]:
        for u in sorted(runs["utd"].unique()):
            if u == 1.0:
                continue
            cell = {unit: runs[(runs["utd"] == u) & (runs["target_unit"] == unit) & (runs["variant"] == v)]
                    for unit in UNITS}  # fmt: skip
            if any(g.empty for g in cell.values()):
                continue
            (env_hits, _), (upd_hits, _) = (soft_divergence_counts(cell[unit], hist) for unit in ("env_steps", "updates"))
            n_env, n_upd = len(cell["env_steps"]), len(cell["updates"])
            rows.append({"utd": u, "variant": v, "env_steps": f"{env_hits}/{n_env}", "updates": f"{upd_hits}/{n_upd}",
                         "p": fisher_exact(env_hits, n_env, upd_hits, n_upd),
                         "sign": np.sign(env_hits / n_env - upd_hits / n_upd)})  # fmt: skip
    return _holm_verdicts(pd.DataFrame(rows), declared)


def unit_divergence_lines(div: pd.DataFrame, family: str, compared: str, columns: tuple[str, str],
                          verdict_of: str, declared: int = 0) -> list[str]:  # fmt: skip
    """One variant's soft-divergence family by unit (:func:`divergence_contrasts`) as Markdown lines: ``compared``
    says what is compared, ``columns`` name the env-step and update columns, ``verdict_of`` the side the
    verdict word is about, ``declared`` how many contrasts Holm counted; [] when no contrast was made."""
    if div.empty:
        return []
    short = declared > len(div)
    counted = f"{len(div)} of {declared} contrasts run" if short else f"{len(div)} contrasts"
    corrected = f"Holm-corrected over all {declared}, a contrast not run counting as p = 1" if short else "Holm-corrected"
    return ["", f"Family *{family}*: {counted}, seeds soft-diverged at any check with {compared}, Fisher's "
            f"exact test, {corrected} (alpha 0.05):", "",
            f"| UTD | {columns[0]} | {columns[1]} | p | Holm p | verdict ({verdict_of}) |", "|---|---|---|---|---|---|",
            *(f"| {r.utd:g} | {r.env_steps} | {r.updates} | {r.p:.2g} | {r.p_holm:.2g} | {r.verdict} |"
              for r in div.itertuples())]  # fmt: skip


def utd_divergence_contrasts(runs: pd.DataFrame, hist: pd.DataFrame) -> pd.DataFrame:
    """The soft-divergence-across-UTD family (module docstring): per variant, with the target period in env
    steps, seeds soft-diverged at any check at each UTD other than 1 and at UTD 1, Fisher's p and its Holm
    adjustment within this family, and the verdict (``more``/``fewer`` at that UTD than at 1 where the
    adjusted p < 0.05, else ``inconclusive``)."""
    rows = []
    env_unit = runs[runs["target_unit"] == "env_steps"]
    for v in [v for v in VARIANTS if v in set(runs["variant"])]:
        base = env_unit[(env_unit["utd"] == 1.0) & (env_unit["variant"] == v)]
        if base.empty:
            continue
        base_hits, _ = soft_divergence_counts(base, hist)
        for u in sorted(env_unit["utd"].unique()):
            cell = env_unit[(env_unit["utd"] == u) & (env_unit["variant"] == v)]
            if u == 1.0 or cell.empty:
                continue
            hits, _ = soft_divergence_counts(cell, hist)
            rows.append({"utd": u, "variant": v, "at_utd": f"{hits}/{len(cell)}", "at_1": f"{base_hits}/{len(base)}",
                         "p": fisher_exact(hits, len(cell), base_hits, len(base)),
                         "sign": np.sign(hits / len(cell) - base_hits / len(base))})  # fmt: skip
    return _holm_verdicts(pd.DataFrame(rows))


def noise_floor(runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant, the A/A difference at UTD 1 (both units: the same configuration, the same seeds)."""
    rows = []
    for v in VARIANTS:
        x = _returns(runs[(runs["utd"] == 1.0) & (runs["target_unit"] == "env_steps") & (runs["variant"] == v)])
        y = _returns(runs[(runs["utd"] == 1.0) & (runs["target_unit"] == "updates") & (runs["variant"] == v)])
        if len(x) and len(y):
            d, draws = bootstrap_difference(x, y, reps=REPS)
            rows.append({"variant": v, "difference": d, "low": np.quantile(draws, 0.025),
                         "high": np.quantile(draws, 0.975)})  # fmt: skip
    return pd.DataFrame(rows)


PLANNED_HALF_WIDTH = 25.0
"""The 95% CI half-width (return) the rerun's primary contrasts are planned for, on both envs."""


def power_lines(runs: pd.DataFrame, half_width: float = PLANNED_HALF_WIDTH) -> list[str]:
    """The rerun's plan, declared before its data: for each primary contrast (plain DQN, each UTD against
    its next, per target unit), the seeds a cell that give the difference's 95% CI a half-width of at most
    ``half_width`` from these cells' spread (:func:`dqnlab.statistics.seeds_for_half_width`)."""
    utds = sorted(runs["utd"].unique())
    rows = []
    for unit in UNITS:
        for lo, hi in zip(utds, utds[1:]):
            x, y = (_returns(runs[(runs["utd"] == u) & (runs["target_unit"] == unit) & (runs["variant"] == "plain")])
                    for u in (hi, lo))  # fmt: skip
            if len(x) >= 3 and len(y) >= 3:
                rows.append(f"| UTD {hi:g} minus {lo:g} | {unit} | {len(x)} / {len(y)} | "
                            f"{seeds_for_half_width([x, y], half_width)} |")  # fmt: skip
    if not rows:
        return []
    return [f"Power for the rerun (declared before its data): plain DQN, each UTD against the next, the seeds a "
            f"cell that give the difference's 95% CI a half-width of at most ±{half_width:g} return, from these "
            "cells' spread (a planning figure: the spread is itself estimated from these seeds).", "",
            "| contrast | target in | seeds here | seeds a cell needed |", "|---|---|---|---|", *rows]  # fmt: skip


def cell_rows(runs: pd.DataFrame, hist: pd.DataFrame) -> pd.DataFrame:
    """Per cell: final return and AUC (IQM, 95% CI), soft-diverged seeds, median final max |Q|, and the
    current-data diagnostics (medians)."""
    rows = []
    for (u, unit, v), g in runs.groupby(["utd", "target_unit", "variant"]):
        q = np.fmax(final_metric(g, M.Q_ABS_MAX_CURRENT), final_metric(g, M.Q_PROBE_ABS_MAX))
        rows.append({"utd": u, "target_unit": unit, "variant": v, "n": len(g),
                     "final": bootstrap_ci(_returns(g), reps=REPS), "auc": bootstrap_ci(auc_of(g, hist), reps=REPS),
                     "diverged": soft_divergence_counts(g, hist), "q_max": float(np.nanmedian(q)),
                     "q_above_bound": int((final_metric(g, M.Q_ABOVE_BOUND) > 0).sum()),
                     "srank": float(np.nanmedian(final_metric(g, M.SRANK_CURRENT))),
                     "dormant": float(np.nanmedian(final_metric(g, M.DORMANT_CURRENT[0.1]))),
                     "target_updates": float(np.nanmedian(final_metric(g, M.TARGET_UPDATES))),
                     "resets": float(np.nanmedian(final_metric(g, M.RESETS)))})  # fmt: skip
    return pd.DataFrame(rows)


def time_to_threshold(runs: pd.DataFrame, hist: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Per cell: the first evaluation at which the IQM over seeds of the greedy return (10 episodes a seed)
    reaches ``threshold``, and whether it stays there to the end (gym's "solved" is a 100-episode average
    of one agent: this is a stricter per-evaluation IQM, not that)."""
    from analysis.curves import curve_cells

    keyed = runs.assign(cell=[f"UTD {r.utd:g}, target in {r.target_unit}, {r.variant}" for r in runs.itertuples()])
    curves = curve_cells(hist, keyed, M.EVAL_RETURN_MEAN, "cell")
    rows = []
    for cell, c in curves.groupby("cell"):
        c = c.sort_values(M.ENV_STEPS)
        hit = c[c["iqm"] >= threshold]
        first = int(hit[M.ENV_STEPS].iloc[0]) if len(hit) else None
        held = bool(first is not None and (c[c[M.ENV_STEPS] >= first]["iqm"] >= threshold).all())
        best = c.loc[c["iqm"].idxmax()]
        rows.append({"cell": cell, "first": first, "held": held, "best": best["iqm"], "best_at": int(best[M.ENV_STEPS])})
    return pd.DataFrame(rows)


def _q(value: float) -> str:
    return "—" if not math.isfinite(value) else (f"{value:.0f}" if value < 1e4 else f"{value:.1e}")


def finding_replay_ratio(studies: dict[str, tuple[pd.DataFrame, pd.DataFrame]]) -> Finding:
    """``studies``: env id -> (runs, hist) of its preset."""
    envs = list(studies)
    fig, axes = plt.subplots(len(envs), 4, figsize=(22, 4.6 * len(envs)), squeeze=False)
    md = []
    for axrow, env in zip(axes, envs):
        runs, hist = studies[env]
        runs = runs.assign(variant=runs.apply(variant_of, axis=1))
        cells = cell_rows(runs, hist)
        evals = int(hist[hist["metric"] == M.EVAL_RETURN_MEAN].groupby("run_id").size().median())
        episodes = int(runs["eval_episodes"].median())
        seeds = int(runs.groupby(["utd", "target_unit", "variant"]).size().median())
        md += [f"\n**{env}**: per cell, final greedy return (mean of the last quarter of the {evals} evaluations: "
               f"{max(1, evals // 4)} evaluations x {episodes} episodes) and area under the greedy curve (the mean "
               f"return over the run), IQM over {seeds} seeds [95% bootstrap CI]; seeds soft-diverged (max \\|Q\\| "
               "above 1.5 R_max/(1-gamma)) at any check (every evaluation and the end) / at the end; median final "
               "max \\|Q\\| and srank, dormant fraction (tau 0.1) on current replay data; target copies and resets "
               "made (median).\n",
               "| UTD | target in | variant | final return | AUC | soft div. (any / end) | max \\|Q\\| | srank | dormant | "
               "target copies | resets |", "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in cells.sort_values(["utd", "target_unit", "variant"], key=_order).itertuples():
            md.append(f"| {r.utd:g} | {r.target_unit} | {r.variant} | {fmt_ci(*r.final)} | {fmt_ci(*r.auc)} | "
                      f"{r.diverged[0]}/{r.n} / {r.diverged[1]}/{r.n} | {_q(r.q_max)} | {r.srank:.0f} | "
                      f"{r.dormant:.2f} | {r.target_updates:.0f} | {r.resets:.0f} |")  # fmt: skip
        family = contrasts(runs, env)
        floor = noise_floor(runs)
        md += ["", "Noise floor (UTD 1, the two units are one configuration, same seeds; difference of IQMs "
                   "[95% CI]): " + "; ".join(f"{f.variant} {f.difference:+.0f} [{f.low:.0f}, {f.high:.0f}]"
                                             for f in floor.itertuples()) + ".", ""]  # fmt: skip
        md += [family.markdown(digits=1), ""]
        div = divergence_contrasts(runs, hist)
        if not div.empty:
            md += [f"Family *soft divergence*: {len(div)} contrasts, seeds soft-diverged at any check with the "
                   "target in env steps vs in updates, Fisher's exact test, Holm-corrected (alpha 0.05)"
                   + ("; declared after the plain DQN cells were run, so post hoc here" if env == "CartPole-v1" else "")
                   + ":", "",
                   "| UTD | variant | target in env steps | target in updates | p | Holm p | verdict (env steps) |",
                   "|---|---|---|---|---|---|---|"]  # fmt: skip
            md += [f"| {r.utd:g} | {r.variant} | {r.env_steps} | {r.updates} | {r.p:.2g} | {r.p_holm:.2g} | {r.verdict} |"
                   for r in div.itertuples()]  # fmt: skip
            md.append("")
        across = utd_divergence_contrasts(runs, hist)
        if not across.empty:
            md += [f"Family *soft divergence across UTD*: {len(across)} contrasts, with the target in env steps (copied "
                   "equally often per env step at every UTD), seeds soft-diverged at any check at a UTD vs at UTD 1, "
                   "Fisher's exact test, Holm-corrected (alpha 0.05)"
                   + ("; declared after these data were read, so post hoc here" if env == "CartPole-v1" else "") + ":", "",
                   "| UTD | variant | at this UTD | at UTD 1 | p | Holm p | verdict (this UTD vs 1) |",
                   "|---|---|---|---|---|---|---|"]  # fmt: skip
            md += [f"| {r.utd:g} | {r.variant} | {r.at_utd} | {r.at_1} | {r.p:.2g} | {r.p_holm:.2g} | {r.verdict} |"
                   for r in across.itertuples()]  # fmt: skip
            md.append("")
        md += power_lines(runs) + [""]
        if env == "CartPole-v1":  # finding 5 reads the same curves
            reached = time_to_threshold(runs, hist, 475.0)
            md += ["Env steps to a greedy return of 475 (the first evaluation whose IQM over seeds reaches it; "
                   "held: it stays there to the end):", "", "| cell | first env step with IQM >= 475 | held | "
                   "best IQM (at env step) |", "|---|---|---|---|"]  # fmt: skip
            for r in reached.itertuples():
                first = "not reached" if r.first is None else f"{r.first:,}"
                md.append(f"| {r.cell} | {first} | {'yes' if r.held else 'no'} | {r.best:.0f} (at {r.best_at:,}) |")
            md.append("")
        _draw(axrow, cells, env)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.suptitle("What does a higher replay ratio do, with the target period held in updates (dashed) or in env steps "
                 "(solid)? (10 seeds per cell)")  # fmt: skip
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_replay_ratio.png")


def _order(col: pd.Series) -> pd.Series:
    if col.name == "variant":
        return col.map(VARIANTS.index)
    if col.name == "target_unit":
        return col.map(UNITS.index)
    return col


def _draw(axrow, cells: pd.DataFrame, env: str) -> None:
    colors = {"plain": "C0", "layernorm": "C1", "head_reset": "C2"}
    for (unit, v), g in cells.groupby(["target_unit", "variant"]):
        g = g.sort_values("utd")
        ls = "-" if unit == "env_steps" else "--"
        label = f"{v}, target in {unit}"
        for ax, key in ((axrow[0], "final"), (axrow[1], "auc")):
            point = np.array([f[0] for f in g[key]])
            low = np.array([f[1] for f in g[key]])
            high = np.array([f[2] for f in g[key]])
            ax.errorbar(g["utd"], point, yerr=[point - low, high - point], ls=ls, marker="o", capsize=2,
                        color=colors[v], label=label)  # fmt: skip
        axrow[2].plot(g["utd"], g["q_max"], ls=ls, marker="o", color=colors[v], label=label)
        axrow[3].plot(g["utd"], g["srank"], ls=ls, marker="o", color=colors[v], label=label)
    axrow[2].set_yscale("log")
    for ax, ylabel in zip(axrow, ["final greedy return (IQM, 95% CI)", "area under the greedy curve (IQM, 95% CI)",
                                  "final max |Q| (median over seeds; log)", "final srank on current data (median)"]):
        ax.set_xscale("log", base=2)
        ax.set_xticks([0.25, 1, 4, 16], ["0.25", "1", "4", "16"])
        ax.minorticks_off()
        ax.set(xlabel="UTD (updates per env step)", ylabel=ylabel, title=env)


VARIANT_NAMES = ("plain", "layernorm", "head_reset")
"""Finding 4's variants, as the sweep's ``--axis variant=`` names them."""
ENV_OF = {"replay_ratio-cartpole": "CartPole-v1", "replay_ratio-acrobot": "Acrobot-v1",
          "replay_ratio-cartpole-plain": "CartPole-v1", "replay_ratio-cartpole-mitigations": "CartPole-v1",
          **{f"replay_ratio-cartpole-{v}-utd16": "CartPole-v1" for v in VARIANT_NAMES},
          "replay_ratio-acrobot-plain": "Acrobot-v1", "replay_ratio-acrobot-mitigations": "Acrobot-v1",
          **{f"replay_ratio-acrobot-{v}-utd16": "Acrobot-v1" for v in VARIANT_NAMES}}  # fmt: skip
"""Each replay-ratio study's env. ``replay_ratio-cartpole-plain``, ``-mitigations``, ``-<variant>-utd16`` and
``replay_ratio-acrobot-plain``, ``-mitigations``, ``-<variant>-utd16`` are parts of a preset's grid run
as studies of their own (``--axis``; the same config and seeds per cell), read together only while the
env's full study is absent."""
FULL_STUDY = {"CartPole-v1": "replay_ratio-cartpole", "Acrobot-v1": "replay_ratio-acrobot"}
STUDIES = ["replay_ratio-cartpole", "replay_ratio-cartpole-plain", "replay_ratio-cartpole-mitigations",
           "replay_ratio-cartpole-plain-utd16", "replay_ratio-cartpole-layernorm-utd16",
           "replay_ratio-cartpole-head_reset-utd16", "replay_ratio-acrobot", "replay_ratio-acrobot-plain",
           "replay_ratio-acrobot-mitigations", *(f"replay_ratio-acrobot-{v}-utd16" for v in VARIANT_NAMES)]  # fmt: skip


def replay_ratio_by_env(present: Studies) -> Studies:
    """Finding 4's studies (name -> (runs, hist)) as env id -> (runs, hist): an env's full study where
    present, else its parts (:data:`ENV_OF`) together."""
    by_env: Studies = {}
    for env in dict.fromkeys(ENV_OF[s] for s in present):
        parts = [present[FULL_STUDY[env]]] if FULL_STUDY[env] in present else \
            [v for s, v in present.items() if ENV_OF[s] == env]  # fmt: skip
        by_env[env] = stacked(dict(enumerate(parts)))
    return by_env


def from_data(read: StudyReader) -> Finding | None:
    present = read(STUDIES)
    return finding_replay_ratio(replay_ratio_by_env(present)) if present else None


FINDING = DataFinding("4. Replay ratio", STUDIES, from_data)
