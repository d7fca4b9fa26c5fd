"""Cells: a configuration without its seed. Every statistic here is computed per cell, never over
runs of different configurations.

- :func:`axes`: the config fields that vary between the runs (the swept axes), ``seed`` excluded;
  grouping by them groups by the whole configuration, since the other fields are constant.
- :func:`cell_table`: per cell, the seeds, how many have a final return, the IQM with its 95%
  bootstrap CI, and the collapse counts (failed runs counted apart, never as a return).
- :func:`comparisons`: for each axis, each value against the axis's first value at every setting of
  the other axes: difference of IQMs with a 95% CI and the probability of improvement (rliable).
  Where several environments were swept, the probability of improvement is also given over all of
  them, stratified by environment (differences of raw returns are never pooled across envs).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.stats import COLLAPSE_LABELS, bootstrap_ci, difference_ci, probability_of_improvement
from dqnlab.config import Config

SEED = "seed"
ENV = "env_id"


def axes(runs: pd.DataFrame) -> list[str]:
    """Config fields (in config order) that take more than one value among ``runs``, seed excluded."""
    out = []
    for name in Config.field_names():
        if name == SEED or name not in runs:
            continue
        if runs[name].astype(str).nunique(dropna=False) > 1:
            out.append(name)
    return out


def cell_label(row: pd.Series | dict, names: list[str]) -> str:
    """``utd=4, layer_norm=True``: a cell's swept values (``all runs`` when nothing was swept)."""
    return ", ".join(f"{n}={_fmt(row[n])}" for n in names) or "all runs"


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _groups(runs: pd.DataFrame, names: list[str]):
    if not names:
        yield (), runs
        return
    for key, g in runs.groupby(names, dropna=False, sort=True):
        yield (key if isinstance(key, tuple) else (key,)), g


def returns_of(runs: pd.DataFrame, value: str = "final_return") -> np.ndarray:
    """Final returns of the runs that have one (finished, not hard-diverged)."""
    ok = runs[runs["outcome"] != "failed"][value].to_numpy(dtype=float)
    return ok[np.isfinite(ok)]


def cell_table(runs: pd.DataFrame, value: str = "final_return", reps: int = 2000,
               keep: tuple[str, ...] = ()) -> pd.DataFrame:  # fmt: skip
    """One row per cell: its axis values (and the ``keep`` columns, swept or not), ``label``,
    ``n_seeds`` (runs), ``n_returns`` (runs with a final return), ``n_failed`` (crashed or killed,
    never rerun), ``iqm``, ``ci_low``, ``ci_high``, and a count per collapse label."""
    names = axes(runs)
    rows = []
    for key, g in _groups(runs, names + [k for k in keep if k not in names and k in runs]):
        values = returns_of(g, value)
        point, low, high = bootstrap_ci(values, reps=reps) if len(values) else (math.nan,) * 3
        values_of = dict(zip(names + [k for k in keep if k not in names and k in runs], key))
        row = {**values_of, "label": cell_label(values_of, names), "n_seeds": len(g),
               "n_returns": len(values), "n_failed": int((g["outcome"] == "failed").sum()), "iqm": point,
               "ci_low": low, "ci_high": high}  # fmt: skip
        finished = g[g["outcome"] != "failed"]
        for label in COLLAPSE_LABELS:
            row[label] = int((finished["collapse"] == label).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def comparisons(runs: pd.DataFrame, value: str = "final_return", reps: int = 2000) -> pd.DataFrame:
    """Each axis value against the axis's baseline (its first value) at each setting of the other
    axes: ``iqm_diff`` (IQM of the value minus IQM of the baseline) with ``diff_low``/``diff_high``, and
    ``p_improvement`` = P(a run of the value beats a run of the baseline) with its CI."""
    names = axes(runs)
    runs = _unset_named(runs, names)
    rows = []
    for axis in names:
        values = sorted(runs[axis].unique(), key=_sort_key)
        if len(values) < 2:
            continue
        baseline = values[0]
        rest = [n for n in names if n != axis]
        for v in values[1:]:
            for key, g in _groups(runs, rest):
                x, y = returns_of(g[g[axis] == v], value), returns_of(g[g[axis] == baseline], value)
                if not len(x) or not len(y):
                    continue
                d = difference_ci([x], [y], reps=reps)
                p = probability_of_improvement([x], [y], reps=reps)
                rows.append(_comparison_row(axis, v, baseline, cell_label(dict(zip(rest, key)), rest), x, y, d, p))
            if ENV in rest and runs[ENV].nunique() > 1:  # over all envs: P(improvement), stratified by env
                others = [n for n in rest if n != ENV]
                for key, g in _groups(runs, others):
                    xs = [returns_of(e[e[axis] == v], value) for _, e in g.groupby(ENV)]
                    ys = [returns_of(e[e[axis] == baseline], value) for _, e in g.groupby(ENV)]
                    p = probability_of_improvement(xs, ys, reps=reps)
                    where = cell_label(dict(zip(others, key)), others) + " (all envs, stratified)"
                    rows.append(_comparison_row(axis, v, baseline, where, np.concatenate(xs), np.concatenate(ys),
                                                (math.nan,) * 3, p))  # fmt: skip
    return pd.DataFrame(rows)


def _comparison_row(axis, value, baseline, where, x, y, diff, p) -> dict:
    return {"axis": axis, "value": value, "baseline": baseline, "where": where, "n_value": len(x),
            "n_baseline": len(y), "iqm_diff": diff[0], "diff_low": diff[1], "diff_high": diff[2],
            "p_improvement": p[0], "p_low": p[1], "p_high": p[2]}  # fmt: skip


def _unset_named(runs: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """``runs`` with an axis value that is unset (None: e.g. ``reward_bound``'s default) written ``"None"``,
    so the cell it names is compared like any other instead of vanishing (NaN equals nothing)."""
    return runs.assign(**{a: runs[a].astype(object).where(runs[a].notna(), "None") for a in names})


def _sort_key(v):
    if v is None or v == "None":  # an unset value (the default) first: the baseline
        return (-1, "")
    return (0, v) if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) else (1, str(v))


def facets(runs: pd.DataFrame, used: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """``(label, runs)`` for every setting of the swept axes a plot does not show (``used``): plots
    draw one row per facet, so no panel averages over a configuration it does not name."""
    rest = [n for n in axes(runs) if n not in used]
    return [(cell_label(dict(zip(rest, key)), rest), g) for key, g in _groups(runs, rest)]


RETURN_MARGINS = {"CartPole-v1": 50.0, "Acrobot-v1": 50.0}
"""The equivalence margin a report declares for its env's final return: a tenth of the return's range
(CartPole 0-500, Acrobot -500-0), as the findings declare it. Another env: no equivalence is tested."""


def axis_family(runs: pd.DataFrame, value: str = "final_return"):
    """The family every report declares before reading its runs: each swept axis's values against the
    axis's first value, the other axes held fixed (one contrast per value and setting of the others),
    corrected together (:class:`analysis.family.Family`: Holm, TOST). None when nothing was swept or the
    runs span several envs (their returns are not comparable)."""
    from analysis.family import Family

    names = axes(runs)
    if not names or ENV in names:
        return None
    env = str(runs[ENV].iloc[0]) if ENV in runs else ""
    family = Family("each swept value against the axis's first, the other axes held fixed (final return)",
                    RETURN_MARGINS.get(env, math.nan))  # fmt: skip
    runs = _unset_named(runs, names)
    for axis in names:
        values = sorted(runs[axis].unique(), key=_sort_key)
        rest = [n for n in names if n != axis]
        for v in values[1:]:
            for key, g in _groups(runs, rest):
                label = f"{axis} {v} vs {values[0]}" + (f" ({cell_label(dict(zip(rest, key)), rest)})" if rest else "")
                family.difference(label, returns_of(g[g[axis] == v], value), returns_of(g[g[axis] == values[0]], value))
    return family
