"""Read a sweep's MLflow runs into tidy DataFrames.

``load_runs``: one row per trial run: run ids, status, ``outcome`` (``completed``, ``diverged`` or
``failed``: crashed, interrupted or killed), every config field as a typed column, the final value of
every metric (prefixed ``final_``), ``final_return`` (NaN for a failed or hard-diverged run: neither
has a policy to score) and the ``collapse`` label. One row per seed: a trial of K replicas has K child
runs (each with its own ``seed``). A seed of a grid point rerun after a failure counts once, with its
finished run; a failed run whose point was never rerun stays, as failed.
``load`` gives both: the runs and the long table ``(run_id, env_steps, updates, metric, value)``.
Configs and histories come from each run's ``config.json`` and ``history.json`` artifacts (one
download per run, not one call per metric); config fields are typed as the config types them.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import pandas as pd  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from analysis.stats import collapse_label, final_return  # noqa: E402
from dqnlab.config import Config  # noqa: E402
from dqnlab.config_text import field_types, text_parser  # noqa: E402
from dqnlab.metrics import ENV_STEPS, UPDATES  # noqa: E402
from dqnlab.tracking.mlflow_runs import CONFIG_ARTIFACT, HISTORY_ARTIFACT  # noqa: E402

TAG_STUDY, TAG_ROLE = "dqnlab.study", "dqnlab.role"


def _client_and_experiment(tracking_uri: str, experiment: str):
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ValueError(f"experiment {experiment!r} not found at {tracking_uri}")
    return client, exp.experiment_id


def _trial_runs(client, experiment_id: str, study: str | None):
    flt = f"tags.`{TAG_ROLE}` = 'trial'"
    if study:
        flt += f" and tags.`{TAG_STUDY}` = '{study}'"
    return client.search_runs([experiment_id], filter_string=flt, max_results=50_000)


def _artifacts(client, run_id: str) -> tuple[dict | None, list[dict[str, float]]]:
    """The run's typed config (``config.json``; None if it has none) and its history (``history.json``;
    empty for a run killed before it wrote one), in one download."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            root = Path(client.download_artifacts(run_id, "", tmp))
        except Exception:  # no artifact at all
            return None, []
        config = root / CONFIG_ARTIFACT
        history = root / HISTORY_ARTIFACT
        return (json.loads(config.read_text()) if config.exists() else None,
                json.loads(history.read_text()) if history.exists() else [])  # fmt: skip


def run_outcome(mlflow_status: str, status: str | None) -> str:
    """``completed`` / ``diverged`` for a FINISHED run, ``failed`` for anything else (FAILED, KILLED, or
    a run left RUNNING by a process that died)."""
    if mlflow_status != "FINISHED":
        return "failed"
    return "diverged" if status == "diverged" else "completed"


def typed_config(config_json: dict | None, params: dict[str, str]) -> dict:
    """Every config field, typed as :class:`~dqnlab.config.Config` types it (tuples as tuples): from the
    run's ``config.json``, else (runs from before it was written at creation) its string params read by
    the command line's own parser (:func:`dqnlab.config_text.text_parser`). Fields a run does not name keep
    their defaults."""
    if config_json is None:
        types_ = field_types()
        config_json = {k: text_parser(types_[k])[0](v) for k, v in params.items() if k in types_}
    return Config.from_flat(config_json).to_flat()


def load(tracking_uri: str, experiment: str, study: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(runs, histories)`` of the trial runs of ``experiment`` (optionally one study)."""
    runs, hist, _ = load_with_configs(tracking_uri, experiment, study)
    return runs, hist


def load_with_configs(tracking_uri: str, experiment: str,
                      study: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, dict]]:  # fmt: skip
    """:func:`load` and each run's flat config (``run_id -> {field: value}``, JSON-ready)."""
    client, experiment_id = _client_and_experiment(tracking_uri, experiment)
    rows, long_rows, configs = [], [], {}
    for run in _trial_runs(client, experiment_id, study):
        run_id = run.info.run_id
        config_json, history = _artifacts(client, run_id)
        status = run.data.tags.get("status")
        outcome = run_outcome(run.info.status, status)
        row = {
            "run_id": run_id,
            "study": run.data.tags.get(TAG_STUDY),
            "trial_number": int(run.data.tags.get("trial_number", -1)),
            "grid_point": run.data.tags.get("grid_point"),
            "status": status,
            "outcome": outcome,
            "mlflow_status": run.info.status,
            **typed_config(config_json, run.data.params),
        }
        configs[run_id] = {k: list(v) if isinstance(v, tuple) else v for k, v in
                           typed_config(config_json, run.data.params).items()}  # fmt: skip
        final: dict[str, float] = {}
        for m in history:
            final.update(m)
        row.update({f"final_{k}": v for k, v in final.items()})
        row["final_return"] = final_return(history, status) if outcome != "failed" else float("nan")
        row["collapse"] = collapse_label(history, status) if history and outcome != "failed" else "failed"
        rows.append(row)
        for m in history:
            for k, v in m.items():
                if k not in (ENV_STEPS, UPDATES):
                    long_rows.append((run_id, m[ENV_STEPS], m[UPDATES], k, v))
    runs = pd.DataFrame(rows)
    if not runs.empty:
        # A grid point rerun after a crash has one finished run; count each point once.
        finished_first = (runs["mlflow_status"] != "FINISHED").astype(int)
        runs = runs.assign(_order=finished_first).sort_values(["_order", "trial_number"])
        runs = runs.drop_duplicates(["study", "grid_point", "seed"], keep="first").drop(columns="_order")
        runs = runs.sort_values(["study", "trial_number"]).reset_index(drop=True)
    hist = pd.DataFrame(long_rows, columns=["run_id", ENV_STEPS, UPDATES, "metric", "value"])
    hist = hist[hist["run_id"].isin(set(runs.get("run_id", [])))].reset_index(drop=True)
    return runs, hist, {r: configs[r] for r in runs.get("run_id", [])}


def load_runs(tracking_uri: str, experiment: str, study: str | None = None) -> pd.DataFrame:
    return load(tracking_uri, experiment, study)[0]
