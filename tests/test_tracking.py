"""A run's MLflow tracker: buffered log points reach the store in full batches, on time, and when the run is
cut off (a buffered point is part of the run's record)."""

from dqnlab.metrics import ENV_STEPS, METRICS, display_key


def test_buffered_log_points_reach_the_store_in_full_batches_and_when_the_run_is_cut_off(tmp_path):
    from dqnlab.tracking.mlflow_runs import METRICS_PER_BATCH, MlflowClient, MlflowRunTracker, flush_interval_s

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = client.create_run(client.create_experiment("tracking")).info.run_id
    tracker = MlflowRunTracker(client, run_id, flush_every_s=1e9, params_logged=True)  # no flush on time
    names = [n for n in sorted(METRICS) if n != ENV_STEPS][:59]  # 60 metrics a point, about what a real run logs
    per_point = len(names) + 1
    full = -(-METRICS_PER_BATCH // per_point)  # the log point that fills a batch (17)

    def log(i: int) -> None:
        tracker.on_log({ENV_STEPS: float(i * 250), **{n: float(i) for n in names}})

    def stored() -> int:
        return len(client.get_metric_history(run_id, display_key(names[0])))

    for i in range(full - 1):
        log(i)
    assert stored() == 0  # buffered: one batch not yet full
    log(full - 1)
    assert stored() == full  # the batch filled: sent at once
    for i in range(full, full + 3):
        log(i)
    assert stored() == full
    tracker.close_unended("failed", "cut off")
    assert stored() == full + 3  # the points still buffered were sent before the run was closed
    run = client.get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["status"] == "failed"
    assert flush_interval_s(1) == 10.0 and flush_interval_s(110) == 55.0
