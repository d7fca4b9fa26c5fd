"""The data behind the findings, in the repository: one command writes a study's runs from MLflow into
two compressed CSV files under ``docs/data/``, and :func:`read_study` reads them back in the shapes
:func:`analysis.load.load` gives (so every finding, table and notebook reads the same files, on a
fresh clone, without rerunning hours of studies).

    python analysis/export.py --results results --experiment calibration --study calibration-cleanrl

- ``<study>.runs.csv.gz``: one row per seed run: its typed config (``config``: the run's
  ``config.json``, the one parser :class:`dqnlab.config.Config` reads back), trial, seed, status,
  outcome, and the final value of the metrics the findings read (``final_<metric>``).
- ``<study>.curves.csv.gz``: the long table ``(run_id, env_steps, updates, metric, value)``: every
  evaluation record (greedy return, overestimation, the soft-divergence check) and the log-point
  diagnostics the findings draw, thinned to at most :data:`MAX_LOG_POINTS` log points a run.

Labels and scores (final return, area under the curve, collapse label) are not stored: the analysis
computes them from these rows, so that a change of definition never needs a rerun.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dqnlab import metrics as M  # noqa: E402
from dqnlab.config import Config  # noqa: E402

MAX_LOG_POINTS = 40
RUN_FIELDS = ("run_id", "study", "trial_number", "grid_point", "status", "outcome", "mlflow_status")
EVAL_METRICS = (*M.EVAL_METRICS, M.EVAL_RETURN_BEST, M.SOFT_DIVERGENCE, M.Q_LIMIT, M.Q_PROBE_ABS_MAX,
                M.Q_ABS_MAX_CURRENT)  # fmt: skip
"""What an evaluation record keeps (all of it)."""
LOG_METRICS = (M.TD_LOSS, M.Q_MAX, M.Q_PROBE_ABS_MAX, M.Q_ABS_MAX_CURRENT, M.Q_ABOVE_BOUND, M.Q_BOUND, M.SRANK,
               M.SRANK_CURRENT, M.DORMANT_FRAC, M.DORMANT_CURRENT[0.1], M.DORMANT_CURRENT[0.0], M.UTD_REALISED,
               M.TARGET_UPDATES, M.RESETS, M.TRAIN_RETURN_LAST[10], M.TRAIN_RETURN_LAST[100], M.TRAIN_RETURN_MEAN,
               M.POLICY_LAG_RUN_MEAN, M.LOST_UPDATE_FRAC, M.RACED_WRITE_FRAC, M.HARD_DIVERGENCE)  # fmt: skip
"""What the findings draw from the log points (thinned)."""


def _final_columns(runs: pd.DataFrame) -> list[str]:
    keep = {f"final_{m}" for m in (*EVAL_METRICS, *LOG_METRICS, M.ENV_STEPS, M.UPDATES, M.ENV_STEPS_PER_S_TOTAL,
                                   M.UPDATES_PER_S_TOTAL, M.POLICY_LAG_RUN_MAX, M.ACTOR_STALENESS_RUN_MEAN,
                                   M.LOST_UPDATES, M.TRAIN_EPISODES_UNREAD, M.STALE_GRADIENT_AGE_MEAN)}  # fmt: skip
    shares = {c for c in runs.columns if c.startswith("final_worker")}
    return [c for c in runs.columns if c in keep or c in shares]


def _thin(records: pd.DataFrame) -> pd.DataFrame:
    """At most :data:`MAX_LOG_POINTS` log points of one run, evenly spaced, the last one kept."""
    steps = np.sort(records[M.ENV_STEPS].unique())
    if len(steps) <= MAX_LOG_POINTS:
        return records
    keep = steps[np.unique(np.linspace(0, len(steps) - 1, MAX_LOG_POINTS).round().astype(int))]
    return records[records[M.ENV_STEPS].isin(keep)]


def export_study(runs: pd.DataFrame, hist: pd.DataFrame, configs: dict[str, dict], out: Path, study: str) -> list[Path]:
    """Write ``<study>.runs.csv.gz`` and ``<study>.curves.csv.gz`` under ``out``; ``configs``: run id ->
    the run's flat config."""
    out.mkdir(parents=True, exist_ok=True)
    table = runs[[c for c in RUN_FIELDS if c in runs] + ["seed"] + _final_columns(runs)].copy()
    table.insert(1, "config", [json.dumps(configs[r]) for r in table["run_id"]])
    for c in table.columns:  # whole numbers stay exact (a float column, NaN beside them, would print 1.23457e+06)
        col = table[c]
        if col.dtype.kind == "f" and np.all(np.mod(col.dropna(), 1) == 0) and col.notna().any():
            table[c] = col.astype("Int64")
    evals = hist[hist["metric"].isin(EVAL_METRICS)]
    logs = hist[hist["metric"].isin(set(LOG_METRICS) - set(EVAL_METRICS))]  # a metric of both is kept whole, once
    logs = pd.concat([_thin(g) for _, g in logs.groupby("run_id")]) if not logs.empty else logs
    curves = pd.concat([evals, logs]).sort_values(["run_id", M.ENV_STEPS, "metric"])
    paths = [out / f"{study}.runs.csv.gz", out / f"{study}.curves.csv.gz"]
    table.to_csv(paths[0], index=False, float_format="%.6g", compression={"method": "gzip", "mtime": 0})
    curves.to_csv(paths[1], index=False, float_format="%.6g", compression={"method": "gzip", "mtime": 0})
    return paths


def read_study(data: Path, study: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(runs, hist)`` of a study from its exported files: runs with every config field typed (from the
    ``config`` column), ``final_return`` and ``collapse`` computed from the curves, as
    :func:`analysis.load.load` gives them."""
    from analysis.stats import collapse_label, final_return

    runs = pd.read_csv(Path(data) / f"{study}.runs.csv.gz")
    # files exported before 2026-12-07 hold each log point of the two Q metrics in both lists twice; read once
    hist = pd.read_csv(Path(data) / f"{study}.curves.csv.gz").drop_duplicates(ignore_index=True)
    typed = pd.DataFrame([Config.from_flat(json.loads(c)).to_flat() for c in runs["config"]], index=runs.index)
    runs = pd.concat([runs.drop(columns=["config", "seed"]), typed], axis=1)
    records = _records_by_run(hist)
    runs["final_return"] = [final_return(records.get(r.run_id, []), r.status) if r.outcome != "failed" else np.nan
                            for r in runs.itertuples()]  # fmt: skip
    runs["collapse"] = [collapse_label(records[r.run_id], r.status) if r.outcome != "failed" and records.get(r.run_id)
                        else "failed" for r in runs.itertuples()]  # fmt: skip  # no history: as load() says
    return runs, hist


def _records_by_run(hist: pd.DataFrame) -> dict[str, list[dict[str, float]]]:
    """Each run's history records back from the long table: run id -> its records, in stamp order (one
    pass over the table; rows without a stamp are not records). Records that share an (env_steps, updates)
    stamp (the final evaluation and the final log point) come back as many: a metric's k-th row at a stamp
    goes to that stamp's k-th record, in the file's order (the order they were recorded in), so neither
    record's value of a metric both hold (a soft-divergence check) overwrites the other's."""
    h = hist.dropna(subset=[M.ENV_STEPS, M.UPDATES]).sort_values(["run_id", M.ENV_STEPS, M.UPDATES], kind="stable")
    out: dict[str, list[dict[str, float]]] = {}
    stamp, at_stamp = None, []
    columns = (h[c].to_numpy() for c in ("run_id", M.ENV_STEPS, M.UPDATES, "metric", "value"))
    for run_id, steps, updates, metric, value in zip(*columns):
        if (run_id, steps, updates) != stamp:
            stamp, at_stamp = (run_id, steps, updates), []
        record = next((r for r in at_stamp if metric not in r), None)
        if record is None:
            record = {M.ENV_STEPS: steps, M.UPDATES: updates}
            at_stamp.append(record)
            out.setdefault(run_id, []).append(record)
        record[metric] = value
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python analysis/export.py", description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results", help="the results folder holding mlflow.db")
    p.add_argument("--tracking-uri", default=None, help="default: sqlite:///<results>/mlflow.db")
    p.add_argument("--experiment", required=True, help="the sweep (MLflow experiment), e.g. calibration")
    p.add_argument("--study", required=True, action="append", help="a study of it (repeatable)")
    p.add_argument("--out", default="docs/data")
    args = p.parse_args(argv)
    from analysis.load import load_with_configs

    uri = args.tracking_uri or f"sqlite:///{Path(args.results).resolve() / 'mlflow.db'}"
    for study in args.study:
        runs, hist, configs = load_with_configs(uri, args.experiment, study)
        if runs.empty:
            print(f"error: --study: no runs of {study!r} in experiment {args.experiment!r} at {uri}", file=sys.stderr)
            return 2
        for path in export_study(runs, hist, configs, Path(args.out), study):
            print(f"{path} ({path.stat().st_size / 1024:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
