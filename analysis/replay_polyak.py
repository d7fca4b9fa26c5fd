"""Finding 4d (``sweeps/replay_ratio.py --preset polyak``): finding 4's question with a Polyak target.

A hard target copied every C units jumps; a Polyak target moves a little after every update. Counted in
updates, a Polyak tau is applied ``utd`` times per env step, so raising the replay ratio also speeds the
target up per env step: the same confound as a period in updates. Plain DQN on CartPole-v1 (finding 4's
base: RL Zoo settings, 64-64, 20,000 env steps, 10 seeds a cell), UTD {0.25, 1, 4, 16} x tau applied per
update or per env step, tau = 1/128.5 (a mean target lag of 127.5 units, the hard period 256's).

The family of comparisons, declared before the data were read (Holm-Bonferroni on two-sided bootstrap
p-values, alpha 0.05; equivalence margin 50, a tenth of CartPole's return range):

- the **UTD trend** with tau per env step and with tau per update: the least-squares slope of the cell
  IQM of the final return against log2 UTD (2 contrasts);
- the **unit** at each UTD other than 1: tau per env step minus per update (3; at UTD 1 both move the
  target alike);
- **Polyak minus the hard copy** (finding 4's plain cells: period 256 in the same unit, the same seeds and
  settings otherwise) at each UTD and unit (8).

A second family: the seeds that soft-diverged at any check, tau per env step against per update, at each
UTD other than 1 (Fisher's exact test, Holm-corrected). The noise floor is the UTD 1 A/A difference.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.curves import soft_divergence_counts
from analysis.family import Family
from analysis.findings_common import Finding, fmt_ci
from analysis.replay_ratio import MARGIN, REPS, UNITS, _holm_verdicts, _q, _returns, cell_rows
from dqnlab.statistics import bootstrap_difference, fisher_exact, trend

ENV = "CartPole-v1"
TARGETS = {"polyak": "Polyak", "plain": "copy every 256"}
"""Cell variants of this finding: the Polyak runs and finding 4's hard-copy plain runs."""


def polyak_cells(polyak_runs: pd.DataFrame, hard_runs: pd.DataFrame) -> pd.DataFrame:
    """The Polyak runs and, from finding 4's runs, its plain DQN cells (hard copies, no LayerNorm, no reset)
    at the Polyak runs' UTDs, as one table with ``variant`` ``polyak`` or ``plain``."""
    hard = hard_runs[(hard_runs["target_update"] == "hard") & ~hard_runs["layer_norm"].astype(bool)
                     & (hard_runs["reset"] == "none") & hard_runs["utd"].isin(set(polyak_runs["utd"]))]  # fmt: skip
    return pd.concat([polyak_runs.assign(variant="polyak"), hard.assign(variant="plain")], ignore_index=True)


def contrasts(runs: pd.DataFrame) -> Family:
    """The family of the module docstring over ``runs`` (:func:`polyak_cells`)."""
    values = {k: _returns(g) for k, g in runs.groupby(["utd", "target_unit", "variant"])}
    utds = sorted(runs.loc[runs["variant"] == "polyak", "utd"].unique())
    family = Family("Polyak target", MARGIN[ENV], reps=REPS)
    for unit in ("env_steps", "updates"):
        ran = [u for u in utds if len(values.get((u, unit, "polyak"), []))]
        if len(ran) >= 2:
            slope, draws = trend(np.log2(ran), [values[(u, unit, "polyak")] for u in ran], reps=REPS)
            family.add(f"UTD trend, Polyak, tau per {_unit(unit)} (return per doubling of UTD)", slope, draws,
                       testable_equivalence=False)  # fmt: skip
    for u in utds:
        if u != 1.0:
            per_step, per_update = (values.get((u, unit, "polyak"), []) for unit in ("env_steps", "updates"))
            family.difference(f"UTD {u:g}, Polyak: tau per env step minus per update", per_step, per_update)
    for unit in ("env_steps", "updates"):
        for u in utds:
            family.difference(f"UTD {u:g}, in {_unit(unit)}s: Polyak minus copy every 256",
                              values.get((u, unit, "polyak"), []), values.get((u, unit, "plain"), []))  # fmt: skip
    return family


def divergence_contrasts(runs: pd.DataFrame, hist: pd.DataFrame) -> pd.DataFrame:
    """Seeds soft-diverged at any check, Polyak with tau per env step against per update, per UTD other than 1."""
    rows = []
    polyak = runs[runs["variant"] == "polyak"]
    for u in sorted(polyak["utd"].unique()):
        cell = {unit: polyak[(polyak["utd"] == u) & (polyak["target_unit"] == unit)] for unit in UNITS}
        if u == 1.0 or any(g.empty for g in cell.values()):
            continue
        (env_hits, _), (upd_hits, _) = (soft_divergence_counts(cell[unit], hist) for unit in ("env_steps", "updates"))
        n_env, n_upd = len(cell["env_steps"]), len(cell["updates"])
        rows.append({"utd": u, "env_steps": f"{env_hits}/{n_env}", "updates": f"{upd_hits}/{n_upd}",
                     "p": fisher_exact(env_hits, n_env, upd_hits, n_upd),
                     "sign": np.sign(env_hits / n_env - upd_hits / n_upd)})  # fmt: skip
    return _holm_verdicts(pd.DataFrame(rows))


def _unit(unit: str) -> str:
    return "env step" if unit == "env_steps" else "update"


def finding_replay_polyak(polyak: tuple[pd.DataFrame, pd.DataFrame], hard: tuple[pd.DataFrame, pd.DataFrame]) -> Finding:
    """``polyak``, ``hard``: (runs, hist) of the Polyak study and of finding 4's CartPole study (or its parts)."""
    runs = polyak_cells(polyak[0], hard[0])
    hist = pd.concat([polyak[1], hard[1]], ignore_index=True)
    cells = cell_rows(runs, hist)
    md = ["Per cell, final greedy return (mean of the last quarter of the evaluations) and area under the greedy "
          "curve, IQM over seeds [95% bootstrap CI]; seeds soft-diverged (max \\|Q\\| above 1.5 R_max/(1-gamma)) at "
          "any check / at the end; median final max \\|Q\\| and srank on current replay data; target updates made "
          "(median: Polyak steps, or copies). The `copy every 256` rows are finding 4's plain DQN cells.", "",
          "| UTD | target | unit | seeds | final return | AUC | soft div. (any / end) | max \\|Q\\| | srank | "
          "target updates |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    order = {"polyak": 0, "plain": 1}
    for r in sorted(cells.itertuples(), key=lambda r: (order[r.variant], r.utd, UNITS.index(r.target_unit))):
        md.append(f"| {r.utd:g} | {TARGETS[r.variant]} | {_unit(r.target_unit)}s | {r.n} | {fmt_ci(*r.final)} | "
                  f"{fmt_ci(*r.auc)} | {r.diverged[0]}/{r.n} / {r.diverged[1]}/{r.n} | {_q(r.q_max)} | {r.srank:.0f} | "
                  f"{r.target_updates:.0f} |")  # fmt: skip
    polyak_runs = runs[runs["variant"] == "polyak"]
    a_a = [_returns(polyak_runs[(polyak_runs["utd"] == 1.0) & (polyak_runs["target_unit"] == unit)])
           for unit in ("env_steps", "updates")]  # fmt: skip
    if all(len(x) for x in a_a):
        d, draws = bootstrap_difference(*a_a, reps=REPS)
        md += ["", f"Noise floor (UTD 1: tau per env step and per update move the target alike, the same seeds; "
                   f"difference of IQMs [95% CI]): {d:+.0f} [{np.quantile(draws, 0.025):.0f}, "
                   f"{np.quantile(draws, 0.975):.0f}]."]  # fmt: skip
    md += ["", contrasts(runs).markdown(digits=1)]
    div = divergence_contrasts(runs, hist)
    if not div.empty:
        md += ["", f"Family *soft divergence, Polyak*: {len(div)} contrasts, seeds soft-diverged at any check with tau "
               "per env step vs per update, Fisher's exact test, Holm-corrected (alpha 0.05):", "",
               "| UTD | tau per env step | tau per update | p | Holm p | verdict (per env step) |",
               "|---|---|---|---|---|---|"]  # fmt: skip
        md += [f"| {r.utd:g} | {r.env_steps} | {r.updates} | {r.p:.2g} | {r.p_holm:.2g} | {r.verdict} |"
               for r in div.itertuples()]  # fmt: skip
    return Finding("\n".join(md), _figure(cells), "finding_replay_polyak.png")


def _figure(cells: pd.DataFrame) -> plt.Figure:
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.4))
    colors = {"polyak": "C3", "plain": "C0"}
    for (unit, v), g in cells.groupby(["target_unit", "variant"]):
        g = g.sort_values("utd")
        style = dict(ls="-" if unit == "env_steps" else "--", marker="o", color=colors[v],
                     label=f"{TARGETS[v]}, in {_unit(unit)}s")  # fmt: skip
        point, low, high = (np.array([f[i] for f in g["final"]]) for i in range(3))
        axes[0].errorbar(g["utd"], point, yerr=[point - low, high - point], capsize=2, **style)
        axes[1].plot(g["utd"], [d[0] / n for d, n in zip(g["diverged"], g["n"])], **style)
        axes[2].plot(g["utd"], g["q_max"], **style)
    axes[2].set_yscale("log")
    for ax, ylabel in zip(axes, ["final greedy return (IQM, 95% CI)", "fraction of seeds soft-diverged at any check",
                                 "final max |Q| on current data (median; log)"]):  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks([0.25, 1, 4, 16], ["0.25", "1", "4", "16"])
        ax.minorticks_off()
        ax.set(xlabel="UTD (updates per env step)", ylabel=ylabel)
    axes[0].legend(fontsize=8)
    fig.suptitle("Finding 4 with a Polyak target (tau 1/128.5 per update or per env step) beside the hard copy every 256 "
                 "(CartPole-v1, plain DQN, 10 seeds a cell)")  # fmt: skip
    fig.tight_layout()
    return fig
