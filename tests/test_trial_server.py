"""The trial server (dqnlab/engine/trial_server.py): a trial it forks runs exactly what a fresh interpreter runs,
is stopped by the signals that stop one, dies with the server, and leaves no process behind; a request the
caller gave up never confuses a later one; a server that cannot fork hands its trials to fresh interpreters."""

import os
import warnings

import gymnasium as gym
import pytest
from small import small_config

from dqnlab.engine import fresh_process
from dqnlab.engine.fresh_process import Outcome, TrialRequest, run_trial
from dqnlab.engine.trial_server import TrialServer, TrialServerWarning
from dqnlab.metrics import EVAL_RETURN_MEAN, TD_LOSS

pytestmark = pytest.mark.slow
FORKED = pytest.mark.filterwarnings("error::dqnlab.engine.trial_server.TrialServerWarning")  # no silent fallback


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


@FORKED
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


@FORKED
def test_a_forked_trial_is_stopped_by_sigterm_when_its_tracker_fails_and_the_server_goes_on():
    with TrialServer() as server:
        outcome = run_trial(request(total_env_steps=20_000), [Events(fail_at_log=2)], server)
        assert outcome.kind is Outcome.TRACKING and "injected" in outcome.message
        again = run_trial(request(), [Events()], server)
    assert again.kind is Outcome.RESULT and again.result.status == "completed"


@FORKED
def test_a_request_the_caller_gave_up_ends_its_trial_and_never_answers_a_later_one(monkeypatch):
    with TrialServer() as server:
        read_fd, write_fd = os.pipe()
        waiting = server.receive

        def interrupted(prefix, timeout):  # Ctrl-C while the caller waits for the server's reply
            raise KeyboardInterrupt

        monkeypatch.setattr(server, "receive", interrupted)
        with pytest.raises(KeyboardInterrupt):
            server.fork(write_fd)
        monkeypatch.setattr(server, "receive", waiting)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as events:
            last = None
            while (event := fresh_process._next_event(events)) is not None:
                last = event
        assert last[0] == "outcome" and last[1].kind is Outcome.INTERRUPTED  # it read no request, ran nothing
        # its "pid" and "exit" replies are still queued: neither is taken for the next trial's
        outcome = run_trial(request(), [Events()], server)
    assert outcome.kind is Outcome.RESULT and outcome.result.status == "completed"


@FORKED
def test_a_trial_dies_with_its_server_and_is_reported_as_died_not_interrupted():
    server = TrialServer()
    outcome = run_trial(request(total_env_steps=50_000), [Events(act=lambda: server._proc.kill())], server)
    assert outcome.kind is Outcome.DIED and "trial server died" in outcome.message  # SIGTERM via PR_SET_PDEATHSIG
    server.close()
    assert server._proc.returncode == -9


def test_a_server_that_cannot_fork_warns_once_and_its_trials_run_in_fresh_interpreters(monkeypatch):
    def no_pidfd(pid):
        raise OSError(38, "pidfd_open: function not implemented (an old kernel)")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    with warnings.catch_warnings(record=True) as caught, TrialServer() as server:
        warnings.simplefilter("always")
        outcomes = [run_trial(request(), [Events()], server) for _ in range(2)]
        assert server.failed and "pidfd_open" in server.failed and server._sock is None  # closed, not restarted
    assert [o.kind for o in outcomes] == [Outcome.RESULT, Outcome.RESULT]
    assert [w.category for w in caught if issubclass(w.category, TrialServerWarning)] == [TrialServerWarning]
