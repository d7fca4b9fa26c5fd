"""Fault injection: hung actors, Ctrl-C and SIGTERM to training runs and sweeps, bad input battery.

Every case must end in a recorded state within bounded time, with no process left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import typing
import uuid
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from procs import pids_with
from stores import wait_for_open_trial_runs

from dqnlab import metrics as M
from dqnlab.config import Config
from dqnlab.config_text import field_types
from dqnlab.engine import RunFailed, train
from dqnlab.services.processes import mlflow_server_command, spawn, stop_group, wait_http
from dqnlab.services.state import free_port
from dqnlab.train import main as train_main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


class _Hanging(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)
    steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        type(self).steps += 1
        if type(self).steps > 400:
            time.sleep(3600)  # stops producing and stops answering
        return np.zeros(2, np.float32), 0.0, False, type(self).steps % 50 == 0, {}


gym.register("dqnlab-test/Hanging-v0", entry_point=_Hanging)


class _HangDetector:
    """Fails a run still going after ``limit_s`` (a hang detector for tests that wait for a failure)."""

    def __init__(self, limit_s: float = 300.0):
        self.limit_s = limit_s

    def on_progress(self, env_steps, updates, total, elapsed_s):
        if elapsed_s > self.limit_s:
            raise AssertionError(f"the run went on for {elapsed_s:.0f} s: the failure never came")


def test_a_hung_actor_fails_the_run_once_its_heartbeat_is_older_than_the_timeout_naming_it(leak_guard):
    config = Config.from_flat(env_id="dqnlab-test/Hanging-v0", num_workers=2, total_env_steps=10**6,
                              learning_starts=100, batch_size=32, probe_size=32, eval_every_steps=0,
                              worker_timeout_s=2.0, log_every=50)  # fmt: skip
    with pytest.raises(RunFailed, match=r"worker \d .*hung: no heartbeat for ([0-9.]+)s") as err:
        train(config, [_HangDetector()])
    silent_s = float(re.search(r"no heartbeat for ([0-9.]+)s", str(err.value)).group(1))
    print(f"hung actor (worker_timeout_s 2): failed after {silent_s:.1f} s without a heartbeat")
    assert silent_s >= 2.0  # never before the timeout: a slow actor is not called hung


def signal_state(pid: int) -> dict[str, list[str]]:
    """Which signals process ``pid`` blocks, ignores, catches and has pending (``/proc/PID/status``)."""
    state = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"):
            bits = int(value, 16)
            state[key] = [signal.Signals(n).name for n in (signal.SIGINT, signal.SIGTERM) if bits >> (n - 1) & 1]
    return state


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_a_training_run_stops_it_cleanly(tmp_path, sig):
    marker = f"dqnlab-marker-{uuid.uuid4().hex[:8]}"
    history = tmp_path / f"{marker}.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dqnlab.train", "--total-steps", "1000000", "--workers", "2", "--history-json",
         str(history)], cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len(pids_with(marker)) < 3 and time.monotonic() < deadline:  # learner + 2 actors
        time.sleep(0.1)
    time.sleep(1.0)
    before = signal_state(proc.pid)  # how the run's process holds the signal as it is sent
    proc.send_signal(sig)
    start = time.monotonic()
    try:
        _, err = proc.communicate(timeout=120)  # a hang detector
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{sig!r} did not stop the run; its process held the signal {before} when it was sent, "
                             f"{signal_state(proc.pid)} now; this test process: {signal_state(os.getpid())}") from None
    print(f"signal {sig!r} to dqnlab.train: exit {proc.returncode} after {time.monotonic() - start:.2f} s")
    assert proc.returncode == 130, err[-2000:]
    assert _gone(lambda: pids_with(marker)), "actor processes outlived the run"


def _trial_attrs(results: Path) -> list[tuple[str, dict]]:
    with sqlite3.connect(results / "optuna.db") as db:
        trials = db.execute("select trial_id, state from trials order by number").fetchall()
        out = []
        for trial_id, state in trials:
            rows = db.execute("select key, value_json from trial_user_attributes where trial_id = ?", (trial_id,))
            out.append((state, {k: json.loads(v) for k, v in rows}))
    return out


def _gone(pids, limit_s: float = 120.0) -> bool:
    """Whether ``pids()`` becomes empty (processes a stopped run left exiting on their own: a run's actors
    exit once they see their parent gone); ``limit_s`` is a hang detector."""
    deadline = time.monotonic() + limit_s
    while pids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _wait_for_running_trial(results: Path, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if (results / "optuna.db").exists() and any(s == "RUNNING" for s, _ in _trial_attrs(results)):
                return
        except sqlite3.OperationalError:
            pass
        time.sleep(0.2)
    raise AssertionError("no trial started")


def test_ctrl_c_to_a_sweep_marks_the_trial_and_a_rerun_completes_the_grid(tmp_path):
    # SIGTERM takes the same path (dqnlab.signals; tests/test_signals.py), and a --jobs 2 sweep's below
    sig = signal.SIGINT
    args = [sys.executable, str(ROOT / "sweeps" / "utd.py"), "--preset", "smoke", "--quiet", "--results",
            str(tmp_path), "--axis", "utd=1", "--total-steps", "5000"]  # fmt: skip
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_running_trial(tmp_path, proc)
    wait_for_open_trial_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "utd", proc, results=tmp_path)
    proc.send_signal(sig)
    start = time.monotonic()
    _, err = proc.communicate(timeout=120)
    print(f"signal {sig!r} to a sweep: exit {proc.returncode} after {time.monotonic() - start:.2f} s")
    assert proc.returncode == 130, err[-2000:]
    states = [(state, attrs.get("status")) for state, attrs in _trial_attrs(tmp_path)]
    assert ("FAIL", "interrupted") in states, states
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("utd")
    assert "KILLED" in [r.info.status for r in client.search_runs([exp.experiment_id])]
    rerun = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert [s for s, _ in _trial_attrs(tmp_path)].count("COMPLETE") == 1


def _wrong_value(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "not-a-choice"
    if tp is bool:
        return "maybe"
    if tp is str:
        return ""
    return "abc"


@pytest.mark.parametrize("field", Config.field_names())
def test_every_cli_flag_rejects_a_wrong_value_before_running(field, capsys):
    flag = "--" + field.replace("_", "-")
    try:
        code = train_main([flag, _wrong_value(field_types()[field])])  # our validation: returns 2
    except SystemExit as exc:  # argparse's type/choice check: exits 2
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert field.replace("_", "-") in err or field in err, err


# --- stores that are unreachable or fail mid-sweep, SIGTERM to a multi-process sweep ------------
def _mlflow_server(root: Path, port: int) -> int:
    """A real ``mlflow server`` on an SQLite file under ``root``; returns its pid once it answers."""
    cmd = mlflow_server_command(f"sqlite:///{root / 'mlflow.db'}", root / "mlartifacts", "127.0.0.1", port)
    pid = spawn("mlflow", cmd, root)
    wait_http(f"http://127.0.0.1:{port}/health", "mlflow server", root / "mlflow.log", pid)
    return pid


def test_tracking_server_dying_mid_sweep_fails_the_trial_with_the_reason_and_a_rerun_resumes(tmp_path):
    from mlflow.tracking import MlflowClient

    server_root, results = tmp_path / "server", tmp_path / "results"
    server_root.mkdir()
    port = free_port()
    pid = _mlflow_server(server_root, port)
    args = [sys.executable, str(ROOT / "sweeps" / "utd.py"), "--preset", "smoke", "--quiet", "--no-report",
            "--results", str(results), "--tracking-uri", f"http://127.0.0.1:{port}", "--axis", "utd=1",
            "--axis", "seed=0", "--total-steps", "8000"]  # fmt: skip
    try:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for_running_trial(results, proc)
        wait_for_open_trial_runs(f"http://127.0.0.1:{port}", "utd", proc)
        stop_group(pid)  # the store goes away mid-trial
        start = time.monotonic()
        _, err = proc.communicate(timeout=300)  # a hang detector
        print(f"tracking server killed mid-trial: sweep stopped {time.monotonic() - start:.1f} s later")
        assert proc.returncode == 3, err[-2000:]
        assert "MLflow tracking store failed" in err and "rerun the same command" in err
        (state, attrs), *_ = _trial_attrs(results)
        assert state == "FAIL" and attrs["status"] == "failed", err[-3000:]
        assert "MLflow tracking store failed" in attrs["error"]
        assert _gone(lambda: pids_with(str(results))), "actors outlived the sweep"

        pid = _mlflow_server(server_root, port)  # the store is back: a rerun resumes
        rerun = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        assert [s for s, _ in _trial_attrs(results)].count("COMPLETE") == 1
        client = MlflowClient(f"http://127.0.0.1:{port}")
        exp = client.get_experiment_by_name("utd")
        trial_runs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("dqnlab.role") == "trial"]
        # the run that was cut off is closed as FAILED, with the reason, when the study resumes
        assert sorted(r.info.status for r in trial_runs) == ["FAILED", "FINISHED"]
        failed = next(r for r in trial_runs if r.info.status == "FAILED")
        assert "MLflow tracking store failed" in failed.data.tags["error"]
    finally:
        stop_group(pid)


def test_an_unreachable_tracking_server_fails_fast_and_opens_no_study(tmp_path):
    args = [sys.executable, str(ROOT / "sweeps" / "utd.py"), "--preset", "smoke", "--quiet", "--results",
            str(tmp_path), "--tracking-uri", f"http://127.0.0.1:{free_port()}"]  # fmt: skip
    start = time.monotonic()
    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    print(f"unreachable tracking server: exit {res.returncode} after {time.monotonic() - start:.1f} s")
    assert res.returncode == 2, res.stderr[-2000:]
    assert "--tracking-uri: cannot reach MLflow at 'http://127.0.0.1:" in res.stderr
    assert not (tmp_path / "optuna.db").exists(), "nothing is written to the study before the store answers"


def test_sigterm_between_trials_is_the_ctrl_c_path():
    import os

    from dqnlab.signals import interrupts_recorded

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    for sig in (signal.SIGTERM, signal.SIGINT):
        with interrupts_recorded() as caught:
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), sig)
                time.sleep(5)
            assert caught.signum == sig
            with pytest.raises(KeyboardInterrupt):  # asked again, it is raised again
                caught.reraise()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def _interrupt_this_process_and_swallow_it(seen: list) -> None:
    """SIGINT to this process, its KeyboardInterrupt swallowed here (as CPython swallows one raised inside a
    finalizer); ``seen`` gets ``"swallowed"``."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler runs here and raises; swallowed below
    except KeyboardInterrupt:
        seen.append("swallowed")


def test_an_interrupt_whose_raise_is_swallowed_still_stops_a_run():
    """CPython drops an exception raised inside a finalizer; here a callback swallows the KeyboardInterrupt
    of a SIGINT sent to the run's own process. The learner loop raises it again at its next housekeeping
    point, so the run stops (interrupted) instead of running to its budget."""
    from dqnlab.config import Config
    from dqnlab.engine import train

    seen = []

    class SwallowsTheFirstInterrupt:
        def on_progress(self, env_steps, *rest):
            if not seen:
                seen.append(env_steps)
                _interrupt_this_process_and_swallow_it(seen)

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    config = Config.from_flat(dict(total_env_steps=20_000, mode="serial", eval_every_steps=0))
    with pytest.raises(KeyboardInterrupt):
        train(config, [SwallowsTheFirstInterrupt()])
    assert seen[1] == "swallowed"


def test_a_second_signal_while_a_run_stops_does_not_cut_its_last_record_short(monkeypatch):
    """Ctrl-C in a terminal reaches a trial twice: SIGINT to the process group and the SIGTERM the sweep
    forwards. The second landed while the first's stop joined the actors, so the run's last log point and
    ``on_end("interrupted")`` were never written. Here the stop itself sends the second signal."""
    from dqnlab.config import Config
    from dqnlab.engine import train
    from dqnlab.engine.workers import ActorPool

    real_stop = ActorPool.stop

    def stop_under_a_second_signal(pool):
        os.kill(os.getpid(), signal.SIGTERM)
        real_stop(pool)

    monkeypatch.setattr(ActorPool, "stop", stop_under_a_second_signal)
    ended = []

    class InterruptsOnce:
        def on_progress(self, *args):
            if not ended:
                ended.append("sent")
                os.kill(os.getpid(), signal.SIGINT)

        def on_end(self, result):
            ended.append(result.status)

    config = Config.from_flat(dict(total_env_steps=20_000, mode="serial", eval_every_steps=0))
    with pytest.raises(KeyboardInterrupt):
        train(config, [InterruptsOnce()])
    assert ended == ["sent", "interrupted"]


def test_an_interrupt_whose_raise_is_swallowed_still_stops_a_sweep(tmp_path, monkeypatch):
    """CPython only prints an exception raised inside a finalizer or weakref callback, and SQLAlchemy runs
    such callbacks inside the store's calls: a Ctrl-C landing there was lost and the sweep ran on (seen under
    load: `exit 0` after SIGINT). Here the creation of the trial's first run swallows the KeyboardInterrupt
    of a SIGINT sent to the sweep's own process; the sweep raises it again before the trial process starts,
    so it stops, the trial is marked interrupted and its run closed."""
    from mlflow.tracking import MlflowClient

    from dqnlab.study.runner import run_sweep
    from dqnlab.study.spec import SweepSpec
    from dqnlab.study.storage import locations
    from dqnlab.tracking import mlflow_runs

    real, seen = mlflow_runs.start_trial_run, []

    def swallows_the_first_interrupt(*args, **kwargs):
        run_id = real(*args, **kwargs)
        if not seen:
            seen.append(run_id)
            _interrupt_this_process_and_swallow_it(seen)
        return run_id

    monkeypatch.setattr(mlflow_runs, "start_trial_run", swallows_the_first_interrupt)
    spec = SweepSpec("swallow", "swallow-test", dict(total_env_steps=20_000, learning_starts=100, batch_size=32,
                     probe_size=32, hidden_sizes=(16,), eval_every_steps=0, num_workers=1), {"utd": [1.0]})  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, locations(tmp_path, None, None), quiet=True)
    assert seen[1:] == ["swallowed"]
    assert [(state, attrs.get("status")) for state, attrs in _trial_attrs(tmp_path)] == [("FAIL", "interrupted")]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(seen[0])
    assert run.info.status == "KILLED" and not client.get_metric_history(run.info.run_id, M.display_key(M.TD_LOSS))


def test_sigterm_to_a_multi_process_sweep_stops_every_process_and_a_rerun_completes(tmp_path):
    args = [sys.executable, str(ROOT / "sweeps" / "utd.py"), "--preset", "smoke", "--quiet", "--no-report",
            "--results", str(tmp_path), "--axis", "utd=1,2", "--total-steps", "6000", "--jobs", "2"]  # fmt: skip
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_running_trial(tmp_path, proc)
    wait_for_open_trial_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "utd", proc, results=tmp_path)
    proc.send_signal(signal.SIGTERM)
    start = time.monotonic()
    _, err = proc.communicate(timeout=120)  # a hang detector
    print(f"SIGTERM to a --jobs 2 sweep: exit {proc.returncode} after {time.monotonic() - start:.1f} s")
    assert proc.returncode == 130, err[-2000:]
    # trial processes (spawned) and their actors (forked) all have command lines naming tmp_path
    assert _gone(lambda: pids_with(str(tmp_path))), "sweep workers or actors outlived the sweep"
    statuses = [(s, a.get("status")) for s, a in _trial_attrs(tmp_path)]
    assert ("FAIL", "interrupted") in statuses, statuses
    assert not [s for s, _ in statuses if s == "RUNNING"], statuses
    rerun = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert [s for s, _ in _trial_attrs(tmp_path)].count("COMPLETE") == 2


def test_an_mlflow_store_failure_is_not_reported_as_an_optuna_storage_failure():
    # MLflow on SQLite raises MlflowException from SQLAlchemy's OperationalError: walking the cause chain
    # past our TrackingError found it, and the sweep said "Optuna storage failed ... the trial stays RUNNING"
    # where the trial was already marked FAIL with its reason
    import optuna
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import OperationalError

    from dqnlab.study.storage import storage_failure
    from dqnlab.tracking.mlflow_runs import TrackingError

    def chained(*errors):
        for outer, inner in zip(errors, errors[1:]):
            outer.__cause__ = inner
        return errors[0]

    locked = OperationalError("INSERT ...", {}, Exception("database is locked"))
    tracking = chained(TrackingError("MLflow tracking store failed"), MlflowException("store"), locked)
    assert storage_failure(tracking) is None
    optuna_side = chained(RuntimeError("while handling"), optuna.exceptions.StorageInternalError("x"), locked)
    assert storage_failure(optuna_side) is locked
