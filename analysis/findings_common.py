"""What every finding returns, how its numbers are written, and the helpers the findings share (a cell's
IQM and CI, the A/A noise floor against another study's runs)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.cells import returns_of
from analysis.curves import auc_of
from dqnlab import metrics as M
from dqnlab.config import Config
from dqnlab.statistics import bootstrap_ci, bootstrap_difference, iqm


class Finding(NamedTuple):
    """What a finding shows: its numbers as Markdown, its figure, the file name it is saved as, and the
    families of contrasts its numbers hold (:class:`analysis.family.Family`, set by the page generator)."""

    text: str
    figure: Figure
    filename: str
    families: tuple = ()


Studies = dict[str, tuple[pd.DataFrame, pd.DataFrame]]
"""Study name -> ``(runs, hist)`` (:func:`analysis.export.read_study`)."""
StudyReader = Callable[[Iterable[str]], Studies]
"""The named studies whose data are present (the page generator's reader of ``docs/data``)."""


class DataFinding(NamedTuple):
    """A finding the page generates: its title, its studies, and how it is built from them (None: no data)."""

    title: str
    studies: list[str]
    build: Callable[[StudyReader], Finding | None]


def stacked(studies: Studies) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs and the curves of ``studies`` as one pair of tables."""
    return (pd.concat([r for r, _ in studies.values()], ignore_index=True),
            pd.concat([h for _, h in studies.values()], ignore_index=True))  # fmt: skip


def fmt_ci(point: float, low: float, high: float, digits: int = 0) -> str:
    """``point [low, high]``; a dash where there is no value."""
    if math.isnan(point):
        return "—"
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


MARGIN_CARTPOLE = 50.0
"""The equivalence margin of CartPole returns (a tenth of its 0..500 range), declared with each family."""


def iqm_curves(hist: pd.DataFrame, runs: pd.DataFrame, metric: str, key: str) -> pd.DataFrame:
    """Per (``key`` value, env step): the IQM of ``metric`` over seeds and a 95% bootstrap CI."""
    sub = hist[(hist["metric"] == metric) & hist["run_id"].isin(runs["run_id"])].merge(runs[["run_id", key]], on="run_id")
    rows = []
    for (k, step), g in sub.groupby([key, M.ENV_STEPS]):
        point, low, high = bootstrap_ci(g["value"].to_numpy(), reps=500)
        rows.append({key: k, M.ENV_STEPS: step, "iqm": point, "low": low, "high": high, "n": len(g)})
    return pd.DataFrame(rows)


def iqm_by(runs: pd.DataFrame, key: str, order: list[str]) -> pd.DataFrame:
    """Per value of ``key`` (one cell each): the IQM of the final return over seeds with its 95% CI."""
    rows = [(v, *bootstrap_ci(returns_of(runs[runs[key] == v]), reps=1000)) for v in order]
    return pd.DataFrame(rows, columns=[key, "iqm", "low", "high"])


def learned_panel(ax, f: pd.DataFrame, key: str) -> None:
    ax.errorbar(range(len(f)), f["iqm"], yerr=[f["iqm"] - f["low"], f["high"] - f["iqm"]], fmt="o", capsize=3)
    ax.set_xticks(range(len(f)), f[key], rotation=30)
    ax.set(ylabel="final greedy return (IQM, 95% CI)", title="what was learned")


def final_values(runs: pd.DataFrame, metric: str) -> pd.Series:
    return runs[f"final_{metric}"] if f"final_{metric}" in runs else pd.Series(np.nan, index=runs.index)




def auc_cell(runs: pd.DataFrame, hist: pd.DataFrame | None) -> str:
    """The area under the greedy curve of a cell's runs, IQM [95% CI] ("—" without curves)."""
    aucs = auc_of(runs, hist) if hist is not None else np.array([])
    return fmt_ci(*bootstrap_ci(aucs, reps=1000)) if len(aucs) else "—"


def same_config_runs(there: pd.DataFrame, cell: pd.DataFrame) -> pd.DataFrame:
    """The runs of another study with exactly ``cell``'s configuration (every config field but the seed)
    and its seeds: the other half of an A/A comparison; empty when there is none."""
    fields = [f for f in Config.field_names() if f != "seed" and f in cell and f in there]
    key = [str(v) for v in cell.iloc[0][fields]]
    same = there[there[fields].apply(lambda col: col.map(str)).apply(list, axis=1).map(lambda v: v == key)]
    return same if sorted(same["seed"]) == sorted(cell["seed"]) else same.iloc[:0]


def return_noise_floor(same_config: pd.DataFrame | None, cells: list[tuple[str, pd.DataFrame]]) -> list[str]:
    """The A/A rows of the final return for each ``(label, cell runs)`` whose configuration and seeds
    ``same_config`` (another study's runs) also holds, naming the studies that supplied them; [] if none."""
    rows, partners = [], []
    for label, here in cells:
        there = same_config_runs(same_config, here) if same_config is not None and len(same_config) and len(here) \
            else here.iloc[:0]  # fmt: skip
        if len(there):
            rows.append((label, returns_of(here), returns_of(there)))
            partners += list(there["study"]) if "study" in there else []
    if not rows:
        return []
    return ["", *noise_floor(rows, "the final return", ", ".join(f"`{n}`" for n in dict.fromkeys(partners))
                              or "another study")]  # fmt: skip


def noise_floor(rows: list[tuple[str, np.ndarray, np.ndarray]], what: str, other: str, digits: int = 0) -> list[str]:
    """A/A rows: per label, ``IQM(here) - IQM(there)`` with a 95% bootstrap CI (not part of any family);
    ``other`` names the study or studies the partners come from, as markdown."""
    md = [f"Noise floor (A/A: {what} here against the same configuration and seeds in {other}, run separately "
          "(another sitting; some from another commit); not part of a family):", "",
          "| cell | here minus there [95% CI] | IQM here | IQM there |", "|---|---|---|---|"]  # fmt: skip
    for label, here, there in rows:
        point, draws = bootstrap_difference(here, there, reps=1000)
        low, high = np.quantile(draws, [0.025, 0.975])
        md.append(f"| {label} | {fmt_ci(point, low, high, digits)} | {iqm(here):.{digits}f} | {iqm(there):.{digits}f} |")
    return md
