"""Finding 4d (``sweeps/replay_ratio.py --preset polyak``, ``--preset polyak_acrobot``): finding 4's question
with a Polyak target.

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

Acrobot-v1 (declared on 2026-12-05 after CartPole's data above were read, before any Acrobot Polyak
run): the same two families on finding 4's Acrobot base (RL Zoo settings, 64-64, 20,000 env steps),
tau = 1/125.5 (a mean lag of 124.5 units, the hard period 250's), against finding 4's Acrobot plain
cells, equivalence margin 45 (a tenth of Acrobot's return range); each env's families corrected on
their own, as finding 4's are.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullLocator

from analysis.curves import soft_divergence_counts
from analysis.family import Family
from analysis.findings_common import DataFinding, Finding, StudyReader, fmt_ci
from analysis.replay_ratio import MARGIN, REPS, UNITS, _holm_verdicts, _q, _returns, cell_rows, unit_divergence_lines
from dqnlab.statistics import bootstrap_difference, fisher_exact, trend_draws, trend_slope

STUDY_ENV = {"replay_ratio-polyak": "CartPole-v1", "replay_ratio-polyak_acrobot": "Acrobot-v1"}
"""Each 4d study's env."""


def _targets(runs: pd.DataFrame) -> dict[str, str]:
    """How the table names the cell variants: the Polyak runs, and finding 4's hard copies by their period."""
    period = int(runs.loc[runs["variant"] == "plain", "target_period"].median())
    return {"polyak": "Polyak", "plain": f"copy every {period}"}


def polyak_cells(polyak_runs: pd.DataFrame, hard_runs: pd.DataFrame) -> pd.DataFrame:
    """The Polyak runs and, from finding 4's runs, its plain DQN cells (hard copies, no LayerNorm, no reset)
    at the Polyak runs' UTDs, as one table with ``variant`` ``polyak`` or ``plain``."""
    hard = hard_runs[(hard_runs["target_update"] == "hard") & ~hard_runs["layer_norm"].astype(bool)
                     & (hard_runs["reset"] == "none") & hard_runs["utd"].isin(set(polyak_runs["utd"]))]  # fmt: skip
    return pd.concat([polyak_runs.assign(variant="polyak"), hard.assign(variant="plain")], ignore_index=True)


def contrasts(runs: pd.DataFrame, env: str) -> Family:
    """The family of the module docstring over ``runs`` (:func:`polyak_cells`) of ``env``."""
    values = {k: _returns(g) for k, g in runs.groupby(["utd", "target_unit", "variant"])}
    utds = sorted(runs.loc[runs["variant"] == "polyak", "utd"].unique())
    copy = _targets(runs)["plain"]
    family = Family(f"Polyak target, {env}", MARGIN[env])
    for unit in ("env_steps", "updates"):
        ran = [u for u in utds if len(values.get((u, unit, "polyak"), []))]
        if len(ran) >= 2:
            cells = [values[(u, unit, "polyak")] for u in ran]
            family.add(f"UTD trend, Polyak, tau per {_unit(unit)} (return per doubling of UTD)",
                       trend_slope(np.log2(ran), cells), trend_draws(np.log2(ran), cells),
                       testable_equivalence=False)  # fmt: skip
    for u in utds:
        if u != 1.0:
            per_step, per_update = (values.get((u, unit, "polyak"), []) for unit in ("env_steps", "updates"))
            family.difference(f"UTD {u:g}, Polyak: tau per env step minus per update", per_step, per_update)
    for unit in ("env_steps", "updates"):
        for u in utds:
            family.difference(f"UTD {u:g}, in {_unit(unit)}s: Polyak minus {copy}",
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


Studies = dict[str, tuple[tuple[pd.DataFrame, pd.DataFrame], tuple[pd.DataFrame, pd.DataFrame]]]
"""env id -> ((runs, hist) of its Polyak study, (runs, hist) of finding 4's study of that env or its parts)."""


def finding_replay_polyak(studies: Studies) -> Finding:
    """Finding 4d, one block of tables and one row of the figure per env of ``studies``."""
    md: list[str] = []
    all_cells = {}
    for env, (polyak, hard) in studies.items():
        runs = polyak_cells(polyak[0], hard[0])
        hist = pd.concat([polyak[1], hard[1]], ignore_index=True)
        all_cells[env] = cells = cell_rows(runs, hist)
        md += _env_block(env, runs, hist, cells)
    return Finding("\n".join(md).strip("\n"), _figure(all_cells), "finding_replay_polyak.png")


def _env_block(env: str, runs: pd.DataFrame, hist: pd.DataFrame, cells: pd.DataFrame) -> list[str]:
    targets = _targets(runs)
    md = [f"\n**{env}**: per cell, final greedy return (mean of the last quarter of the evaluations) and area under "
          "the greedy curve, IQM over seeds [95% bootstrap CI]; seeds soft-diverged (max \\|Q\\| above 1.5 "
          "R_max/(1-gamma)) at any check / at the end; median final max \\|Q\\| and srank on current replay data; "
          f"target updates made (median: Polyak steps, or copies). The `{targets['plain']}` rows are finding 4's "
          "plain DQN cells.", "",
          "| UTD | target | unit | seeds | final return | AUC | soft div. (any / end) | max \\|Q\\| | srank | "
          "target updates |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    order = {"polyak": 0, "plain": 1}
    for r in sorted(cells.itertuples(), key=lambda r: (order[r.variant], r.utd, UNITS.index(r.target_unit))):
        md.append(f"| {r.utd:g} | {targets[r.variant]} | {_unit(r.target_unit)}s | {r.n} | {fmt_ci(*r.final)} | "
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
    md += ["", contrasts(runs, env).markdown(digits=1)]
    md += unit_divergence_lines(divergence_contrasts(runs, hist), f"soft divergence, Polyak, {env}",
                                "tau per env step vs per update", ("tau per env step", "tau per update"),
                                "per env step")  # fmt: skip
    return md


def _figure(cells_by_env: dict[str, pd.DataFrame]) -> plt.Figure:
    fig, axes = plt.subplots(len(cells_by_env), 3, figsize=(18, 4.4 * len(cells_by_env)), squeeze=False)
    colors = {"polyak": "C3", "plain": "C0"}
    for axrow, (env, cells) in zip(axes, cells_by_env.items()):
        for (unit, v), g in cells.groupby(["target_unit", "variant"]):
            g = g.sort_values("utd")
            name = "Polyak" if v == "polyak" else "hard copy"
            style = dict(ls="-" if unit == "env_steps" else "--", marker="o", color=colors[v],
                         label=f"{name}, in {_unit(unit)}s")  # fmt: skip
            point, low, high = (np.array([f[i] for f in g["final"]]) for i in range(3))
            axrow[0].errorbar(g["utd"], point, yerr=[point - low, high - point], capsize=2, **style)
            axrow[1].plot(g["utd"], [d[0] / n for d, n in zip(g["diverged"], g["n"])], **style)
            axrow[2].plot(g["utd"], g["q_max"], **style)
        axrow[2].set_yscale("log")
        for ax, ylabel in zip(axrow, ["final greedy return (IQM, 95% CI)", "fraction of seeds soft-diverged at any "
                                      "check", "final max |Q| on current data (median; log)"]):  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_xticks([0.25, 1, 4, 16], ["0.25", "1", "4", "16"])
            ax.xaxis.set_minor_locator(NullLocator())  # the y axis keeps its minor ticks: a log axis within a
            # decade (Acrobot's max |Q|) has no major tick to label
            ax.set(xlabel="UTD (updates per env step)", ylabel=ylabel, title=env)
        axrow[0].legend(fontsize=8)
    fig.suptitle("Finding 4 with a Polyak target (tau per update or per env step, the hard period's mean lag) beside "
                 "finding 4's hard copy (plain DQN, 10 seeds a cell)")  # fmt: skip
    fig.tight_layout()
    return fig


def from_data(read: StudyReader) -> Finding | None:
    """Finding 4d, beside finding 4's cells of the same env (its full study, or its parts)."""
    from analysis.replay_ratio import STUDIES as HARD_STUDIES
    from analysis.replay_ratio import replay_ratio_by_env

    present = read(STUDY_ENV)
    hard = replay_ratio_by_env(read(HARD_STUDIES))
    studies = {STUDY_ENV[s]: (v, hard[STUDY_ENV[s]]) for s, v in present.items() if STUDY_ENV[s] in hard}
    return finding_replay_polyak(studies) if studies else None


FINDING = DataFinding("4d. Polyak target", list(STUDY_ENV), from_data)
