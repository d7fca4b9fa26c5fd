"""Report: every plot of :mod:`analysis.plots` plus a Markdown summary, logged on the study's parent run.

python analysis/report.py --experiment utd --study utd-default            # local results/
python analysis/report.py --tracking-uri http://127.0.0.1:5000 --experiment utd --out report/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.load import TAG_ROLE, TAG_STUDY, load  # noqa: E402
from analysis.plots import PLOTS  # noqa: E402
from analysis.stats import stratified_bootstrap_ci  # noqa: E402

SUMMARY_COLUMNS = ["trial_number", "num_workers", "utd", "target_period", "layer_norm", "reset", "seed", "status",
                   "collapse", "final_return", "final_utd_realised", "final_env_steps_per_s_total"]  # fmt: skip


def summary_markdown(runs, experiment: str, study: str | None) -> str:
    lines = [f"# {experiment}" + (f" / {study}" if study else ""), "", f"{len(runs)} runs.", ""]
    if not runs.empty:
        counts = runs["collapse"].value_counts().to_dict()
        lines += [f"Outcomes: {counts}", ""]
        point, lo, hi = stratified_bootstrap_ci([runs["final_return"].dropna().to_numpy()])
        lines += [f"IQM final return over all runs: {point:.1f} (95% CI {lo:.1f} to {hi:.1f})", ""]
        cols = [c for c in SUMMARY_COLUMNS if c in runs]
        lines.append("| " + " | ".join(cols) + " | run_id |")
        lines.append("|" + " --- |" * (len(cols) + 1))
        for _, r in runs.iterrows():
            cells = [f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols]
            lines.append("| " + " | ".join(cells) + f" | {r['run_id']} |")
    lines += ["", "## Plots", ""] + [f"![{name}]({name}.png)" for name in PLOTS]
    return "\n".join(lines) + "\n"


def build_report(tracking_uri: str, experiment: str, study: str | None, out: Path, log_to_parent: bool = True) -> Path:
    """Write ``out/*.png`` and ``out/summary.md``; log them on the study's parent run. Returns ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs, hist = load(tracking_uri, experiment, study)
    for name, plot in PLOTS.items():
        plot(runs, hist, out / f"{name}.png")
    (out / "summary.md").write_text(summary_markdown(runs, experiment, study))
    runs.to_csv(out / "runs.csv", index=False)
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
    p.add_argument("--tracking-uri", default=f"sqlite:///{Path('results').resolve() / 'mlflow.db'}")
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
