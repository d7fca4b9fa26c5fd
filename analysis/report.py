"""Report: every plot of :mod:`analysis.plots` and a Markdown summary, logged on the study's parent run.

python analysis/report.py --experiment utd --study utd-default            # local results/
python analysis/report.py --tracking-uri http://127.0.0.1:5000 --experiment utd --out report/

``summary.md``: the per-cell table (IQM of the final return over the seeds of each cell, 95%
bootstrap CI, seeds, collapse counts, failed runs), the comparison along each swept axis (difference
of IQMs with its CI, probability of improvement), and every run (a failed run shows as failed, not
as a return).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

from analysis.cells import axes, axis_family, cell_label, cell_table, comparisons  # noqa: E402
from analysis.load import TAG_ROLE, TAG_STUDY, load  # noqa: E402
from analysis.plots import PLOTS, save  # noqa: E402
from analysis.stats import COLLAPSE_LABELS  # noqa: E402

RUN_COLUMNS = ["trial_number", "seed", "outcome", "collapse", "final_return", "final_utd_realised",
               "final_env_steps_per_s_total"]  # fmt: skip


def _fmt(v) -> str:
    if isinstance(v, float):
        return "—" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def _table(df: pd.DataFrame, columns: list[str]) -> list[str]:
    cols = [c for c in columns if c in df]
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    return lines


def summary_markdown(runs: pd.DataFrame, experiment: str, study: str | None) -> str:
    lines = [f"# {experiment}" + (f" / {study}" if study else ""), ""]
    if runs.empty:
        return "\n".join(lines + ["No runs.", ""])
    swept = axes(runs)
    failed = int((runs["outcome"] == "failed").sum())
    lines += [f"{len(runs)} runs in {runs.groupby(swept).ngroups if swept else 1} cells; swept axes: "
              f"{', '.join(swept) or 'none'}; {failed} failed (crashed or killed, never rerun).", ""]  # fmt: skip
    lines += verdict_lines(runs)
    lines += ["## Cells", "",
              "Final greedy return per cell (a configuration without its seed): IQM over the seeds that have a "
              "return, 95% bootstrap CI over those seeds. Hard-diverged and failed runs have no return: they are "
              "counted (`diverged`, `n_failed`), never averaged.", ""]  # fmt: skip
    cells = cell_table(runs).sort_values("iqm", ascending=False, na_position="last")
    lines += _table(cells, [*swept, "n_seeds", "n_returns", "n_failed", "iqm", "ci_low", "ci_high", *COLLAPSE_LABELS])
    comp = comparisons(runs)
    if not comp.empty:
        lines += ["", "## Along each axis", "",
                  "Each value against the axis's first value, the other axes held fixed: difference of IQMs "
                  "(value minus baseline) with a 95% CI, and the probability that a run of the value beats a run "
                  "of the baseline (rliable's probability of improvement; 0.5 = no difference).", ""]  # fmt: skip
        lines += _table(comp, ["axis", "value", "baseline", "where", "n_value", "n_baseline", "iqm_diff", "diff_low",
                               "diff_high", "p_improvement", "p_low", "p_high"])  # fmt: skip
    lines += ["", "## Runs", ""]
    lines += _table(runs.sort_values([*swept, "seed"] if "seed" in runs else swept),
                    [*swept, *RUN_COLUMNS, "run_id"])  # fmt: skip
    lines += ["", "## Plots", ""] + [f"![{name}]({name}.png)" for name in PLOTS]
    return "\n".join(lines) + "\n"


def verdict_lines(runs: pd.DataFrame) -> list[str]:
    """The report's first section: the verdicts of its declared family (:func:`analysis.cells.axis_family`)
    in plain words, the soft-divergence count per cell, and what a target period in updates means."""
    family = axis_family(runs)
    if family is None:
        return []
    lines = ["## Verdicts", "",
             f"Declared before reading the runs: {family.name}; Holm-corrected over the family, `equivalent` only "
             f"by TOST within ±{family.margin:g}, `inconclusive` when the data cannot say.", ""]  # fmt: skip
    for r in family.results():
        if r["missing"]:
            lines.append(f"- {r['contrast']}: not tested, {r.get('reason', 'no seed with a return on one side')}")
            continue
        lines.append(f"- {r['contrast']}: **{r['verdict']}** ({r['estimate']:+.0f} [{r['low']:.0f}, {r['high']:.0f}], "
                     f"Holm p {r['p_holm']:.3f})")  # fmt: skip
    swept = axes(runs)
    diverged = runs.assign(d=runs["collapse"].eq("diverged")).groupby(swept)["d"].agg(["sum", "count"])
    lines += ["", "Soft or hard divergence per cell (seeds): " + "; ".join(
        f"{cell_label(dict(zip(swept, key if isinstance(key, tuple) else (key,))), swept)} {int(r['sum'])}/{int(r['count'])}"
        for key, r in diverged.iterrows()) + "."]  # fmt: skip
    if "target_unit" in swept or ("target_unit" in runs and runs["target_unit"].eq("updates").all() and "utd" in swept):
        lines += ["", "A target period counted in `updates` copies the target `utd` times as often per env step as "
                  "the same period in `env_steps`: across UTDs it changes the copy rate too; in `env_steps` the copy "
                  "rate is held and only the replay ratio differs (docs/findings.md, finding 4)."]  # fmt: skip
    return lines + [""]


def build_report(tracking_uri: str, experiment: str, study: str | None, out: Path, log_to_parent: bool = True) -> Path:
    """Write ``out/*.png``, ``out/summary.md``, ``out/cells.csv`` and ``out/runs.csv``; log them on the
    study's parent run. Returns ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs, hist = load(tracking_uri, experiment, study)
    for name, plot in PLOTS.items():
        save(plot(runs, hist), out / f"{name}.png")
    (out / "summary.md").write_text(summary_markdown(runs, experiment, study))
    runs.to_csv(out / "runs.csv", index=False)
    if not runs.empty:
        cell_table(runs).to_csv(out / "cells.csv", index=False)
    if log_to_parent and study:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri)
        exp = client.get_experiment_by_name(experiment)
        parents = client.search_runs(
            [exp.experiment_id], filter_string=f"tags.`{TAG_STUDY}` = '{study}' and tags.`{TAG_ROLE}` = 'parent'"
        )
        for parent in parents[:1]:
            client.log_artifacts(parent.info.run_id, str(out), artifact_path="report")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python analysis/report.py", description=__doc__.splitlines()[0])
    p.add_argument("--tracking-uri", default=os.environ.get("DQNLAB_TRACKING_URI",
                                                           f"sqlite:///{Path('results').resolve() / 'mlflow.db'}"))
    p.add_argument("--experiment", required=True, help="MLflow experiment = sweep name (utd, throughput)")
    p.add_argument("--study", help="one study (parent run); default: every run of the experiment")
    p.add_argument("--out", help="default: results/report-<study or experiment>")
    args = p.parse_args(argv)
    out = Path(args.out or Path("results") / f"report-{args.study or args.experiment}")
    try:
        build_report(args.tracking_uri, args.experiment, args.study, out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {out.resolve() / 'summary.md'} ({len(PLOTS)} plots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
