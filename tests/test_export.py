"""The data path behind every finding: what analysis/export.py writes and reads back, and the counts read from
it, are the run's own record (constructed runs; no sweep)."""

import numpy as np
import pandas as pd

from dqnlab import metrics as M


def _checks(run_id: str, end_pair: tuple[float, float]) -> list[tuple]:
    """A run's soft-divergence checks: every 2,500 env steps at 0, then the final evaluation's and the final
    log point's checks at one stamp (50,000 env steps, 196,000 updates), in that order."""
    rows = [(run_id, s, s * 4, M.SOFT_DIVERGENCE, 0.0) for s in range(2500, 50_000, 2500)]
    return rows + [(run_id, 50_000, 196_000, M.SOFT_DIVERGENCE, v) for v in end_pair]


def test_soft_divergence_at_the_end_is_the_last_check_recorded_whatever_the_frames_size():
    """The final evaluation and the final log point both check at one stamp; "at the end" is the last of
    them, as the collapse label reads it. An unstable sort on the step alone took either (finding 4r's
    tables printed 71 of 110 where 73 ended diverged)."""
    from analysis.curves import soft_divergence_counts

    ids = [f"r{i}" for i in range(40)]
    hist = pd.DataFrame([row for i, r in enumerate(ids) for row in _checks(r, (0.0, 1.0) if i % 2 else (1.0, 0.0))],
                        columns=["run_id", M.ENV_STEPS, M.UPDATES, "metric", "value"])  # fmt: skip
    runs = pd.DataFrame({"run_id": ids, "status": "completed"})
    assert soft_divergence_counts(runs, hist) == (40, 20)


def test_records_sharing_a_stamp_come_back_as_recorded_and_a_round_trip_keeps_whole_numbers(tmp_path):
    """read_study gives back the records load() gave: the final evaluation's check and the final log point's
    at one stamp stay two checks (one had overwritten the other); a finished run with no history is `failed`,
    as load() says; a whole number of a float column (NaN beside it) keeps every digit; a metric that both
    the evaluation and the log lists keep is written once per record."""
    from analysis.export import EVAL_METRICS, LOG_METRICS, export_study, read_study
    from analysis.stats import soft_divergence_checks
    from dqnlab.config import Config

    both = sorted(set(EVAL_METRICS) & set(LOG_METRICS))
    assert both  # what the last assertion is about
    config = Config.from_flat(env_id="CartPole-v1").to_flat()
    runs = pd.DataFrame({"run_id": ["a", "b"], "study": "s", "trial_number": 0, "grid_point": "{}",
                         "status": "completed", "outcome": "completed", "mlflow_status": "FINISHED", "seed": [0, 1],
                         "final_updates": [1_234_567.0, np.nan]})  # fmt: skip
    stamp = (100, 400)
    hist = pd.DataFrame([("a", *stamp, M.EVAL_RETURN_MEAN, 20.0), ("a", *stamp, M.SOFT_DIVERGENCE, 1.0),
                         ("a", *stamp, both[0], 7.0), ("a", *stamp, M.SOFT_DIVERGENCE, 0.0), ("a", *stamp, M.TD_LOSS, 0.5),
                         ("a", *stamp, M.Q_LIMIT, 150.0)],
                        columns=["run_id", M.ENV_STEPS, M.UPDATES, "metric", "value"])  # fmt: skip
    export_study(runs, hist, {"a": config, "b": config}, tmp_path, "s")
    back, curves = read_study(tmp_path, "s")
    assert back.loc[back["run_id"] == "a", "collapse"].item() == "healthy"  # ended below the bound
    assert back.loc[back["run_id"] == "b", "collapse"].item() == "failed"  # no history at all
    assert back.loc[back["run_id"] == "a", "final_updates"].item() == 1_234_567
    from analysis.export import _records_by_run

    assert soft_divergence_checks(_records_by_run(curves)["a"]) == (True, False)
    assert len(curves[curves["metric"] == both[0]]) == 1
