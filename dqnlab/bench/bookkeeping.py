"""Benchmark: the per-trial bookkeeping cost of a sweep on SQLite files vs PostgreSQL + an MLflow
server, side by side in one run (prints; not a test).

    python -m dqnlab.bench.bookkeeping [--trials 10] [--log-points 100]

One measured trial is everything a sweep trial does except training: Optuna pops a queued trial
(with its heartbeat thread), the MLflow child run is created with its tags and 40 params,
``--log-points`` log points of every metric a real run logs (about 60) are sent in batches, the
three artifacts are uploaded, the run is terminated and the trial told. The engine run is replaced
by a recorded history, so the figure is pure overhead (seconds per trial; median over trials).
The server path starts its own temporary cluster with :mod:`dqnlab.services` on free ports.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dqnlab.config import Config
from dqnlab.engine import ReplicaResult, RunResult, train
from dqnlab.metrics import ENV_STEPS
from dqnlab.services.cluster import down, up
from dqnlab.services.state import ServicesState, free_port
from dqnlab.study.queue import open_study, top_up_queue
from dqnlab.study.spec import SweepSpec
from dqnlab.study.storage import make_storage
from dqnlab.tracking.mlflow_runs import (
    MlflowClient,
    MlflowRunTracker,
    get_or_create_experiment,
    get_or_create_parent,
    start_trial_run,
)


def recorded_result(log_points: int) -> RunResult:
    """A short real run; its final values of every metric, repeated ``log_points`` times with increasing steps."""
    config = Config.from_flat(env_id="CartPole-v1", total_env_steps=600, learning_starts=200, log_every=200,
                              eval_every_steps=400, eval_episodes=1, mode="serial", probe_size=32)  # fmt: skip
    result = train(config)
    history = [{**result.final, ENV_STEPS: float(i * 250)} for i in range(log_points)]
    replica = ReplicaResult(0, "completed", config, history, dict(history[-1]))
    return RunResult("completed", config, [replica], None, 1.0)


def time_trials(storage_url: str, tracking_uri: str, artifacts: Path | None, result: RunResult, trials: int) -> list[float]:
    """Seconds of bookkeeping per trial, for ``trials`` trials of one study."""
    spec = SweepSpec("bench", f"bench-{time.time_ns()}", {}, {"seed": list(range(trials))})
    study = open_study(spec, make_storage(storage_url, heartbeat_s=10, grace_s=30))
    top_up_queue(study, spec)
    client = MlflowClient(tracking_uri)
    experiment = get_or_create_experiment(client, "bench", artifacts)
    parent = get_or_create_parent(client, experiment, spec.study_name, {})
    times: list[float] = []

    def objective(trial) -> float:
        run_id = start_trial_run(client, experiment, parent, f"trial {trial.number}",
                                 tags={"grid_point": trial.user_attrs["grid_point"]})  # fmt: skip
        tracker = MlflowRunTracker(client, run_id)
        trial.set_user_attr("mlflow_run_ids", [tracker.run_id])
        tracker.on_start(result.config)
        for m in result.history:
            tracker.on_log(m)
        tracker.on_end(result)
        return 0.0

    for _ in range(trials):
        t0 = time.perf_counter()
        study.optimize(objective, n_trials=1, gc_after_trial=False)
        times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dqnlab.bench.bookkeeping", description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--log-points", type=int, default=100, help="log points per trial (default preset: 80)")
    args = p.parse_args(argv)
    result = recorded_result(args.log_points)
    metrics = len(result.history[0])
    print(f"per trial: {args.log_points} log points x {metrics} metrics, 40 params, 3 artifacts")
    rows = []
    base = Path(tempfile.mkdtemp(prefix="dqnlab-bench-", dir="/tmp"))  # reachable by the 'postgres' user
    base.chmod(0o755)
    try:
        sqlite_times = time_trials(f"sqlite:///{base / 'optuna.db'}", f"sqlite:///{base / 'mlflow.db'}",
                                   base / "mlartifacts", result, args.trials)  # fmt: skip
        rows.append(("sqlite files (default)", sqlite_times))
        state = ServicesState(str(base / "svc"), pg_port=free_port(),
                                       mlflow_port=free_port(), dashboard=False)  # fmt: skip
        up(state)
        try:
            server_times = time_trials(state.storage, state.tracking_uri, None, result, args.trials)
            rows.append(("postgresql + mlflow server", server_times))
        finally:
            down(state)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ref = statistics.median(sqlite_times)
    print(f"{'backend':<28} {'median s/trial':>15} {'min':>7} {'max':>7} {'vs sqlite':>10}")
    for name, times in rows:
        med = statistics.median(times)
        print(f"{name:<28} {med:>15.3f} {min(times):>7.3f} {max(times):>7.3f} {med / ref:>9.2f}x")
    print("(the first trial of each backend includes connection and schema warm-up)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
