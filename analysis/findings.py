"""The figures and numbers of ``docs/findings.md``, read from the studies' MLflow runs.

    python analysis/findings.py --results results --out docs/

Each ``finding_*`` function takes the tidy tables of :mod:`analysis.load` for its study and returns a
:class:`Finding`: the numbers (IQM over seeds with 95% bootstrap CIs, per cell) that the findings
page quotes, as Markdown, and the figure (a notebook shows it inline; ``main`` saves it under ``out``).
Statistics are per cell, never pooled across cells.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.cells import cell_table, returns_of  # noqa: E402
from analysis.load import load  # noqa: E402
from analysis.plots import save  # noqa: E402
from analysis.stats import bootstrap_ci, difference_ci, iqm, probability_of_improvement  # noqa: E402
from dqnlab import metrics as M  # noqa: E402

MITIGATION_ORDER = ["plain", "layernorm", "head_reset", "shrink_perturb"]


class Finding(NamedTuple):
    """What a finding shows: its numbers as Markdown, its figure, and the file name it is saved as."""

    text: str
    figure: Figure
    filename: str


def _fmt(point: float, low: float, high: float, digits: int = 0) -> str:
    if math.isnan(point):
        return "—"
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _mitigation(row: pd.Series) -> str:
    if row.get("layer_norm"):
        return "layernorm"
    return {"none": "plain", "head": "head_reset", "shrink_perturb": "shrink_perturb"}[row["reset"]]


def _curves(hist: pd.DataFrame, runs: pd.DataFrame, metric: str, key: str) -> pd.DataFrame:
    """Per (``key`` value, env step): the IQM of ``metric`` over seeds and a 95% bootstrap CI."""
    sub = hist[(hist["metric"] == metric) & hist["run_id"].isin(runs["run_id"])].merge(runs[["run_id", key]], on="run_id")
    rows = []
    for (k, step), g in sub.groupby([key, M.ENV_STEPS]):
        point, low, high = bootstrap_ci(g["value"].to_numpy(), reps=500)
        rows.append({key: k, M.ENV_STEPS: step, "iqm": point, "low": low, "high": high, "n": len(g)})
    return pd.DataFrame(rows)


def _iqm_by(runs: pd.DataFrame, key: str, order: list[str]) -> pd.DataFrame:
    """Per value of ``key`` (one cell each): the IQM of the final return over seeds with its 95% CI."""
    rows = [(v, *bootstrap_ci(returns_of(runs[runs[key] == v]), reps=1000)) for v in order]
    return pd.DataFrame(rows, columns=[key, "iqm", "low", "high"])


def _learned_panel(ax, f: pd.DataFrame, key: str) -> None:
    ax.errorbar(range(len(f)), f["iqm"], yerr=[f["iqm"] - f["low"], f["high"] - f["iqm"]], fmt="o", capsize=3)
    ax.set_xticks(range(len(f)), f[key], rotation=30)
    ax.set(ylabel="final greedy return (IQM, 95% CI)", title="what was learned")


def _final(runs: pd.DataFrame, metric: str) -> pd.Series:
    return runs[f"final_{metric}"] if f"final_{metric}" in runs else pd.Series(np.nan, index=runs.index)


# --- finding 4: replay ratio -------------------------------------------------------------------------
def finding_replay_ratio(studies: dict[str, tuple[pd.DataFrame, pd.DataFrame]]) -> Finding:
    """``studies``: env name -> (runs, hist) of the cartpole/acrobot presets."""
    envs = list(studies)
    fig, axes = plt.subplots(len(envs), 4, figsize=(21, 4.4 * len(envs)), squeeze=False)
    md = []
    for axrow, env in zip(axes, envs):
        runs, _ = studies[env]
        runs = runs.assign(mitigation=runs.apply(_mitigation, axis=1), diverged=runs["collapse"].eq("diverged"))
        table = cell_table(runs, keep=("utd", "layer_norm", "reset")).assign(
            mitigation=lambda t: t.apply(_mitigation, axis=1))
        utds = sorted(runs["utd"].unique())
        for mit in MITIGATION_ORDER:
            t = table[table["mitigation"] == mit].sort_values("utd")
            axrow[0].errorbar(t["utd"], t["iqm"], yerr=[t["iqm"] - t["ci_low"], t["ci_high"] - t["iqm"]], marker="o",
                              capsize=3, label=mit)  # fmt: skip
            q = runs[runs["mitigation"] == mit].assign(q=_final(runs, M.Q_PROBE_ABS_MAX)).groupby("utd")["q"]
            lo, med, hi = q.quantile(0.25), q.median(), q.quantile(0.75)
            axrow[1].errorbar(med.index, med.values, yerr=[med - lo, hi - med], marker="o", capsize=3, label=mit)
            for ax, metric in ((axrow[2], M.SRANK), (axrow[3], M.DORMANT_FRAC)):
                g = runs[runs["mitigation"] == mit].assign(v=_final(runs, metric)).groupby("utd")["v"].median()
                ax.plot(g.index, g.values, marker="o", label=mit)
        bound = float(np.nanmedian(_final(runs, M.Q_BOUND)))
        axrow[1].axhline(bound, color="black", ls="--", lw=1, label="R_max / (1 - gamma)")
        axrow[1].set_yscale("log")
        for ax, ylabel in zip(axrow, ["final greedy return (IQM, 95% CI)", "final max |Q| on the probe (median, IQR)",
                                      "final srank (median over seeds)", "final dormant fraction, tau 0.1 (median)"]):
            ax.set_xscale("log", base=2)
            ax.set_xticks(utds, [f"{u:g}" for u in utds])
            ax.minorticks_off()
            ax.set(xlabel="UTD (updates per env step, log scale)", ylabel=ylabel, title=env)
        axrow[0].legend(fontsize=8)
        md.append(f"\n**{env}** (final greedy return, IQM over 10 seeds with 95% bootstrap CI; seeds flagged diverged "
                  f"(max \\|Q\\| on the probe above R_max/(1-gamma), or NaN, at any log point); median final max "
                  f"\\|Q\\| on the probe):\n")  # fmt: skip
        md.append("| UTD | " + " | ".join(MITIGATION_ORDER) + " |")
        md.append("|---" * (len(MITIGATION_ORDER) + 1) + "|")
        for utd in utds:
            cells = []
            for mit in MITIGATION_ORDER:
                row = table[(table["utd"] == utd) & (table["mitigation"] == mit)]
                if row.empty:
                    cells.append("—")
                    continue
                r = row.iloc[0]
                sel = runs[(runs["utd"] == utd) & (runs["mitigation"] == mit)]
                q = float(np.nanmedian(_final(sel, M.Q_PROBE_ABS_MAX)))
                cells.append(f"{_fmt(r['iqm'], r['ci_low'], r['ci_high'])}; {int(r['diverged'])}/{int(r['n_seeds'])} "
                             f"div.; max\\|Q\\| {q:.0f}")  # fmt: skip
            md.append(f"| {utd:g} | " + " | ".join(cells) + " |")
        for mit in MITIGATION_ORDER[1:]:
            for utd in utds:
                x = returns_of(runs[(runs["utd"] == utd) & (runs["mitigation"] == mit)])
                y = returns_of(runs[(runs["utd"] == utd) & (runs["mitigation"] == "plain")])
                if len(x) and len(y):
                    d = difference_ci([x], [y], reps=1000)
                    p = probability_of_improvement([x], [y], reps=1000)
                    md.append(f"- {env}, UTD {utd:g}: {mit} vs plain: IQM difference {_fmt(*d)}, "
                              f"P(improvement) {_fmt(*p, digits=2)}")  # fmt: skip
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle("What does a higher replay ratio do to a small DQN, and what buys it back? (10 seeds per cell)")
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_replay_ratio.png")


def finding_target_period(runs: pd.DataFrame) -> Finding:
    runs = runs.assign(diverged=runs["collapse"].eq("diverged"))
    table = cell_table(runs, keep=("utd", "target_period"))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.3))
    utds = sorted(runs["utd"].unique())
    md = ["| UTD | " + " | ".join(f"target period {p}" for p in sorted(runs["target_period"].unique())) + " |"]
    md.append("|---" * (runs["target_period"].nunique() + 1) + "|")
    for period, t in table.groupby("target_period"):
        t = t.sort_values("utd")
        axes[0].errorbar(t["utd"], t["iqm"], yerr=[t["iqm"] - t["ci_low"], t["ci_high"] - t["iqm"]], marker="o",
                         capsize=3, label=f"target period {period}")  # fmt: skip
        frac = runs[runs["target_period"] == period].groupby("utd")["diverged"].mean()
        axes[1].plot(frac.index, frac.values, marker="o", label=f"target period {period}")
    for utd in utds:
        cells = []
        for period in sorted(runs["target_period"].unique()):
            row = table[(table["utd"] == utd) & (table["target_period"] == period)]
            if row.empty:  # a combination the study did not run
                cells.append("—")
                continue
            r = row.iloc[0]
            cells.append(f"{_fmt(r['iqm'], r['ci_low'], r['ci_high'])}, {int(r['diverged'])}/{int(r['n_seeds'])} div.")
        md.append(f"| {utd:g} | " + " | ".join(cells) + " |")
    for ax, ylabel in zip(axes, ["final greedy return (IQM, 95% CI)", "fraction of seeds diverged"]):
        ax.set_xscale("log", base=2)
        ax.set_xticks(utds, [f"{u:g}" for u in utds])
        ax.minorticks_off()
        ax.set(xlabel="UTD (updates per env step, log scale)", ylabel=ylabel)
        ax.legend(fontsize=8)
    fig.suptitle("Does a shorter target period diverge more often at high UTD? (CartPole-v1, plain DQN, 10 seeds)")
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_target_period.png")


# --- finding 5: sample efficiency --------------------------------------------------------------------------
def finding_sample_efficiency(runs: pd.DataFrame, hist: pd.DataFrame, threshold: float = 475.0) -> str:
    """Per cell of the CartPole replay-ratio study: the first evaluation step at which the IQM over
    seeds of the greedy return reaches ``threshold``."""
    runs = runs.assign(cell=runs.apply(lambda r: f"UTD {r['utd']:g}, {_mitigation(r)}", axis=1))
    curves = _curves(hist, runs, M.EVAL_RETURN_MEAN, "cell")
    if curves.empty:  # a study still running (or failed) has no evaluations to read yet
        return "No evaluation recorded yet."
    md = ["| cell | first env step with IQM >= 475 | best IQM (at env step) |", "|---|---|---|"]
    for cell, c in curves.groupby("cell"):
        c = c.sort_values(M.ENV_STEPS)
        hit = c[c["iqm"] >= threshold]
        best = c.loc[c["iqm"].idxmax()]
        md.append(f"| {cell} | {int(hit[M.ENV_STEPS].iloc[0]) if len(hit) else 'not reached'} | "
                  f"{best['iqm']:.0f} [{best['low']:.0f}, {best['high']:.0f}] (at {int(best[M.ENV_STEPS])}) |")  # fmt: skip
    return "\n".join(md)


# --- finding 3: parallel = serial ----------------------------------------------------------------------------
def _variant(row: pd.Series) -> str:
    if row["mode"] == "serial":
        return f"serial_{int(row['num_workers'])}"
    return f"{row['limiter']}_{int(row['num_workers'])}"


def finding_parallel(runs: pd.DataFrame, hist: pd.DataFrame) -> Finding:
    runs = runs.assign(variant=runs.apply(_variant, axis=1))
    order = [v for v in ["serial_2", "strict_1", "strict_2", "strict_4", "free_1", "free_2", "free_4"]
             if v in set(runs["variant"])]  # fmt: skip
    curves = _curves(hist, runs, M.EVAL_RETURN_MEAN, "variant")
    fig, axes = plt.subplots(1, 3, figsize=(19, 4.6))
    palette = dict(zip(order, sns.color_palette("tab10", len(order))))
    for v in order:
        c = curves[curves["variant"] == v].sort_values(M.ENV_STEPS)
        ls = "--" if v.startswith("free") else "-"
        axes[0].plot(c[M.ENV_STEPS], c["iqm"], ls=ls, color=palette[v], label=v)
        axes[0].fill_between(c[M.ENV_STEPS], c["low"], c["high"], color=palette[v], alpha=0.12)
    axes[0].set(xlabel="env steps", ylabel="greedy return (IQM over seeds, 95% CI band)", title="learning curves")
    axes[0].legend(fontsize=8)
    utd = runs.assign(ratio=_final(runs, M.UTD_REALISED) / runs["utd"])
    sns.barplot(utd, x="variant", y="ratio", order=order, ax=axes[1], estimator=iqm, errorbar=("ci", 95), palette=palette,
                hue="variant", legend=False)  # fmt: skip
    axes[1].axhline(1.0, color="black", lw=1, ls="--")
    axes[1].set(xlabel="", ylabel="realised UTD / requested UTD", title="the replay ratio actually trained at")
    axes[1].tick_params(axis="x", rotation=30)
    md = ["| collection | realised UTD (median over seeds) | final return IQM [95% CI] | vs serial: IQM difference "
          "[95% CI] | vs serial: P(improvement) [95% CI] |", "|---|---|---|---|---|"]  # fmt: skip
    base = returns_of(runs[runs["variant"] == "serial_2"]) if "serial_2" in order else np.array([])
    f = _iqm_by(runs, "variant", order)
    for v, point in zip(order, f[["iqm", "low", "high"]].itertuples(index=False)):
        sub = runs[runs["variant"] == v]
        realised = float(np.median(_final(sub, M.UTD_REALISED)))
        if v == "serial_2" or not len(base):
            md.append(f"| {v} | {realised:.3f} | {_fmt(*point)} | — | — |")
        else:
            x = returns_of(sub)
            d = difference_ci([x], [base], reps=1000)
            p = probability_of_improvement([x], [base], reps=1000)
            md.append(f"| {v} | {realised:.3f} | {_fmt(*point)} | {_fmt(*d)} | {_fmt(*p, digits=2)} |")
    _learned_panel(axes[2], f, "variant")
    fig.suptitle("Does collecting in parallel change what is learned at the same replay ratio? (CartPole-v1, UTD 1, "
                 "10 seeds per cell)")  # fmt: skip
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_parallel.png")


# --- finding 2: heterogeneous workers ---------------------------------------------------------------------------
def _workers_variant(row: pd.Series) -> str:
    slow = bool(str(row.get("worker_step_delay_s", "")).strip("() ,0."))
    long = bool(str(row.get("worker_max_episode_steps", "")).strip("() ,0"))
    return {(False, False): "homogeneous", (True, False): "one_slow", (False, True): "one_long_episodes",
            (True, True): "slow_and_long"}[(slow, long)]  # fmt: skip


def finding_workers(runs: pd.DataFrame) -> Finding:
    runs = runs.assign(variant=runs.apply(_workers_variant, axis=1))
    order = [v for v in ["homogeneous", "one_slow", "one_long_episodes", "slow_and_long"] if v in set(runs["variant"])]
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
    sns.barplot(shares, x="bar", y="share", hue="share of", ax=axes[0], estimator=iqm, errorbar=("ci", 95))
    axes[0].set(xlabel="", ylabel="share (fraction, end of run)")
    axes[0].set_title("env steps produced / resident / sampled, and episodes finished, per worker", pad=28)
    sns.move_legend(axes[0], "lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(M.SHARE_KINDS), title=None,
                    frameon=False)  # fmt: skip
    axes[0].tick_params(axis="x", labelsize=8)
    md = ["| workers | worker 1 produced | worker 1 resident | worker 1 sampled | worker 1 episodes | "
          "final return IQM [95% CI] | vs homogeneous: P(improvement) [95% CI] |",
          "|---|---|---|---|---|---|---|"]  # fmt: skip
    base = returns_of(runs[runs["variant"] == "homogeneous"])
    f = _iqm_by(runs, "variant", order)
    for v, point in zip(order, f[["iqm", "low", "high"]].itertuples(index=False)):
        sub = runs[runs["variant"] == v]
        share = {k: float(np.median(sub[c])) if (c := f"final_{M.worker_share(1, k)}") in sub else math.nan
                 for k in M.SHARE_KINDS}  # fmt: skip
        x = returns_of(sub)
        vs = "—" if v == "homogeneous" else _fmt(*probability_of_improvement([x], [base], reps=1000), digits=2)
        md.append(f"| {v} | {share['produced']:.3f} | {share['resident']:.3f} | {share['sampled']:.3f} | "
                  f"{share['episodes']:.3f} | {_fmt(*point)} | {vs} |")  # fmt: skip
    _learned_panel(axes[1], f, "variant")
    fig.suptitle("Are a slow worker's or a long-episode worker's transitions ignored? (CartPole-v1, UTD 1, 2 workers, "
                 "10 seeds per cell; shares: medians over seeds, 95% CI)")  # fmt: skip
    fig.tight_layout()
    return Finding("\n".join(md), fig, "finding_workers.png")


# --- finding 1: one writer, nothing overwritten ------------------------------------------------------------------
WRITERS_ORDER = ["single", "hogwild", "local_copies"]


def owed_updates(runs: pd.DataFrame) -> pd.Series:
    """What the limiter owes each run at its end: ``floor(utd * (total_env_steps - learning_starts))``."""
    return np.floor(runs["utd"] * (runs["total_env_steps"] - runs["learning_starts"]) + 1e-9)


def finding_writers(runs: pd.DataFrame) -> Finding:
    """The single learner beside the naive writers, per cell (writers x workers x UTD): final return,
    divergence, lost-update fraction (``local_copies``) and raced-write fraction (``hogwild``)."""
    runs = runs.assign(diverged=runs["collapse"].eq("diverged"),
                       cell=runs.apply(lambda r: f"{int(r['num_workers'])} workers, UTD {r['utd']:g}", axis=1))  # fmt: skip
    cells = sorted(runs["cell"].unique(), key=lambda c: (float(c.split("UTD ")[1]), c))
    order = [w for w in WRITERS_ORDER if w in set(runs["writers"])]
    fig, axes = plt.subplots(1, 3, figsize=(19, 4.6))
    width = 0.8 / len(order)
    md = ["| cell | writers | seeds | final return IQM [95% CI] | diverged | lost-update fraction (median [min, max]) | "
          "raced-write fraction (median) | updates = owed | vs single: P(improvement) [95% CI] |",
          "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for j, w in enumerate(order):
        xs = np.arange(len(cells)) + (j - (len(order) - 1) / 2) * width
        f = _iqm_by(runs[runs["writers"] == w], "cell", cells)
        axes[0].errorbar(xs, f["iqm"], yerr=[f["iqm"] - f["low"], f["high"] - f["iqm"]], fmt="o", capsize=3, label=w)
        lost = [runs[(runs["writers"] == w) & (runs["cell"] == c)] for c in cells]
        axes[1].bar(xs, [float(np.median(_final(g, M.LOST_UPDATE_FRAC))) if len(g) else np.nan for g in lost], width,
                    label=f"{w}: lost updates")  # fmt: skip
        axes[1].scatter(xs, [float(np.median(_final(g, M.RACED_WRITE_FRAC))) if len(g) else np.nan for g in lost],
                        marker="x", color="black", zorder=3, label="raced writes" if j == 0 else None)  # fmt: skip
        axes[2].bar(xs, [g["diverged"].mean() if len(g) else np.nan for g in lost], width, label=w)
    base = {c: returns_of(runs[(runs["writers"] == "single") & (runs["cell"] == c)]) for c in cells}
    for c in cells:
        for w in order:
            g = runs[(runs["writers"] == w) & (runs["cell"] == c)]
            if g.empty:
                continue
            x = returns_of(g)
            point = bootstrap_ci(x, reps=1000) if len(x) else (math.nan,) * 3
            lost = _final(g, M.LOST_UPDATE_FRAC)
            exact = int((_final(g, M.UPDATES) == owed_updates(g)).sum())
            vs = ("—" if w == "single" or not len(x) or not len(base[c])
                  else _fmt(*probability_of_improvement([x], [base[c]], reps=1000), digits=2))  # fmt: skip
            md.append(f"| {c} | {w} | {len(g)} | {_fmt(*point)} | {int(g['diverged'].sum())}/{len(g)} | "
                      f"{np.median(lost):.3f} [{lost.min():.3f}, {lost.max():.3f}] | "
                      f"{np.median(_final(g, M.RACED_WRITE_FRAC)):.3f} | {exact}/{len(g)} | {vs} |")  # fmt: skip
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python analysis/findings.py", description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results", help="the studies' results folder (mlflow.db)")
    p.add_argument("--out", default="docs", help="where the figures go")
    names = ["writers", "workers", "parallel", "replay_ratio", "target_period", "sample_efficiency"]
    p.add_argument("--only", nargs="*", choices=names, help="which findings (default: all whose studies exist)")
    args = p.parse_args(argv)
    uri = f"sqlite:///{Path(args.results).resolve() / 'mlflow.db'}"
    out = Path(args.out)
    want = set(args.only or names)
    sections = []

    def study(experiment: str, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        try:
            return load(uri, experiment, name)
        except ValueError:  # the experiment was never run here
            return pd.DataFrame(), pd.DataFrame()

    def add(title: str, finding: Finding) -> None:
        save(finding.figure, out / finding.filename)
        sections.append(f"## {title}\n{finding.text}")

    if "writers" in want:
        # the naive grid runs as one study per UTD (`--axis utd=1 --study-name writers-naive-utd1`, and
        # utd4); never also read an interrupted `writers-naive`: the same seeds of the same cells would
        # count twice
        parts = [study("writers", name)[0] for name in ("writers-single", "writers-naive-utd1", "writers-naive-utd4")]
        runs = pd.concat([r for r in parts if not r.empty], ignore_index=True) if any(len(r) for r in parts) else None
        if runs is not None:
            add("Finding 1: one writer vs naive writers", finding_writers(runs))
    if "workers" in want:
        runs, _ = study("workers", "workers-default")
        if not runs.empty:
            add("Finding 2: heterogeneous workers", finding_workers(runs))
    if "parallel" in want:
        runs, hist = study("parallel", "parallel-default")
        if not runs.empty:
            add("Finding 3: parallel vs serial", finding_parallel(runs, hist))
    if "replay_ratio" in want:
        studies = {env: study("replay_ratio", f"replay_ratio-{preset}")
                   for env, preset in (("CartPole-v1", "cartpole"), ("Acrobot-v1", "acrobot"))}  # fmt: skip
        studies = {k: v for k, v in studies.items() if not v[0].empty}
        if studies:
            add("Finding 4: replay ratio", finding_replay_ratio(studies))
    if "target_period" in want:
        runs, _ = study("replay_ratio", "replay_ratio-target_period")
        plain, _ = study("replay_ratio", "replay_ratio-cartpole")  # its plain cells: target period 500
        if not plain.empty:
            plain = plain[~plain["layer_norm"].astype(bool) & (plain["reset"] == "none")]
            runs = pd.concat([runs, plain], ignore_index=True) if not runs.empty else runs
        if not runs.empty:
            add("Finding 4b: target period", finding_target_period(runs))
    if "sample_efficiency" in want:
        for name in ("replay_ratio-cartpole", "replay_ratio-sample_efficiency"):
            runs, hist = study("replay_ratio", name)
            if not runs.empty:
                sections.append(f"## Finding 5: sample efficiency ({name})\n" + finding_sample_efficiency(runs, hist))
    out.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join(sections) + "\n"
    (out / "findings_numbers.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
