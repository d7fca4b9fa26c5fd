"""The trial server (dqnlab/engine/trial_server.py): a trial it forks runs exactly what a fresh interpreter runs,
is stopped by the signals that stop one, dies with the server, and leaves no process behind."""

import os
import signal
import threading

import gymnasium as gym
import pytest
from small import small_config

from dqnlab.engine.fresh_process import Outcome, TrialRequest, run_trial
from dqnlab.engine.trial_server import TrialServer, TrialServerError
from dqnlab.metrics import EVAL_RETURN_MEAN, TD_LOSS

pytestmark = pytest.mark.slow


class Events:
    """Records the events a trial sends; ``on_log`` may raise once (a tracker that failed) or call ``act``."""

    def __init__(self, fail_at_log: int | None = None, act=None):
        self.logs, self.ends, self.fail_at_log, self.act = 0, 0, fail_at_log, act

    def on_log(self, replica, metrics):
        self.logs += 1
        if self.act is not None and self.logs == 1:
            self.act()
        if self.logs == self.fail_at_log:
            raise RuntimeError("injected: the store failed")

    def on_end(self, result):
        self.ends += 1


def request(**overrides) -> TrialRequest:
    config = small_config(mode="serial", utd=1.0, eval_every_steps=500, eval_episodes=2, log_every=100, **overrides)
    return TrialRequest(config, quiet=True, env_spec=gym.spec(config.env.env_id))


def curve(result):
    return [(m.get(TD_LOSS), m.get(EVAL_RETURN_MEAN)) for m in result.history]


def test_a_forked_trial_runs_exactly_what_a_fresh_interpreter_runs_and_the_server_ends_with_its_block():
    fresh = run_trial(request(), [Events()])
    events = Events()
    with TrialServer() as server:
        forked = [run_trial(request(), [events], server) for _ in range(2)]  # one server, two trials
        pid = server._proc.pid
    assert fresh.kind is Outcome.RESULT and fresh.result.status == "completed"
    for outcome in forked:
        assert outcome.kind is Outcome.RESULT and curve(outcome.result) == curve(fresh.result)  # serial: bit for bit
    assert events.logs > 0 and events.ends == 2
    assert server._proc.returncode == 0 and not os.path.exists(f"/proc/{pid}")


def test_a_forked_trial_is_stopped_by_sigterm_when_its_tracker_fails_and_reports_its_exit():
    with TrialServer() as server:
        outcome = run_trial(request(total_env_steps=20_000), [Events(fail_at_log=2)], server)
        assert outcome.kind is Outcome.TRACKING and "injected" in outcome.message
        again = run_trial(request(), [Events()], server)  # the server goes on with the next trial
    assert again.kind is Outcome.RESULT and again.result.status == "completed"


def test_a_trial_dies_with_its_server_and_stops_like_an_interrupted_run():
    server = TrialServer()
    killed = threading.Event()

    def kill_server():
        os.kill(server._proc.pid, signal.SIGKILL)
        killed.set()

    outcome = run_trial(request(total_env_steps=50_000), [Events(act=kill_server)], server)
    assert killed.is_set()
    assert outcome.kind is Outcome.INTERRUPTED  # SIGTERM from the kernel (PR_SET_PDEATHSIG): it sent its events
    server.close()
    assert server._proc is None or server._proc.returncode == -signal.SIGKILL


def test_a_server_that_cannot_fork_is_closed_and_the_trial_runs_in_a_fresh_interpreter(monkeypatch):
    def refuse(self, events_fd):
        raise TrialServerError("injected: the trial server has 2 threads")

    monkeypatch.setattr(TrialServer, "fork", refuse)
    with TrialServer() as server, pytest.warns(UserWarning, match="fresh interpreter"):
        outcome = run_trial(request(), [Events()], server)
    assert outcome.kind is Outcome.RESULT and outcome.result.status == "completed"
