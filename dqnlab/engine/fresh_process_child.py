"""The trial process's side of :mod:`dqnlab.engine.fresh_process`: ``python -m
dqnlab.engine.fresh_process_child EVENTS_FD PARENT_PID`` reads a pickled
:class:`~dqnlab.engine.fresh_process.TrialRequest` from stdin, runs it with
:func:`dqnlab.engine.train`, and streams every callback event and the outcome to ``EVENTS_FD``. It dies
with its parent (``PR_SET_PDEATHSIG``); SIGTERM stops the run like Ctrl-C. A trial forked by the trial
server (:mod:`dqnlab.engine.trial_server`) runs the same :func:`run`."""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
from typing import Any, BinaryIO

from dqnlab.engine.fresh_process import Outcome, TrialOutcome, TrialRequest
from dqnlab.engine.trial_server import PDEATHSIG


class _Forward:
    """Engine callback sending every hook's arguments to the calling process."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream

    def _send(self, hook: str, payload: Any) -> None:
        data = pickle.dumps((hook, payload))
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # never cut an event in half
        try:
            self.stream.write(data)
            self.stream.flush()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def on_start(self, config: Any) -> None:
        self._send("on_start", (config,))

    def on_log(self, replica: int, metrics: dict[str, float]) -> None:
        self._send("on_log", (replica, metrics))

    def on_progress(self, env_steps: int, updates: int, total_env_steps: int, elapsed_s: float) -> None:
        self._send("on_progress", (env_steps, updates, total_env_steps, elapsed_s))

    def on_end(self, result: Any) -> None:
        self._send("on_end", (result,))


def _die_with_parent(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before prctl took effect
        raise KeyboardInterrupt("the sweep process is gone")


def _execute(request: TrialRequest, forward: _Forward) -> TrialOutcome:
    import gymnasium as gym

    from dqnlab.config import ConfigError
    from dqnlab.engine import RunFailed, train
    from dqnlab.tracking.console import ConsoleProgress

    spec = request.env_spec
    if spec is not None and spec.id not in gym.registry:
        gym.registry[spec.id] = spec
    callbacks = [forward] if request.quiet else [forward, ConsoleProgress()]
    try:
        return TrialOutcome(Outcome.RESULT, train(request.config, callbacks))
    except ConfigError as exc:
        return TrialOutcome(Outcome.CONFIG, None, str(exc))
    except RunFailed as exc:
        return TrialOutcome(Outcome.FAILED, exc.result, str(exc))
    except KeyboardInterrupt:
        return TrialOutcome(Outcome.INTERRUPTED, None, "interrupted (SIGINT/SIGTERM)")


def _interrupt(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def main(argv: list[str]) -> int:
    return run(int(argv[0]), int(argv[1]), sys.stdin.buffer)


def run(events_fd: int, parent: int, requests: BinaryIO) -> int:
    """The trial process's whole life, in a fresh interpreter (:func:`main`) or forked from the trial server
    (:mod:`dqnlab.engine.trial_server`): die with ``parent``, read the request from ``requests``, run it,
    stream its events and outcome to ``events_fd``. Returns the exit code (130: interrupted)."""
    signal.signal(signal.SIGTERM, _interrupt)
    with os.fdopen(events_fd, "wb") as stream:
        forward = _Forward(stream)
        try:
            _die_with_parent(parent)
            request = requests.read()
            if not request:  # the caller gave up before sending it (interrupted)
                raise KeyboardInterrupt("no request")
            sys_path, payload = pickle.loads(request)
            sys.path[:] = sys_path  # the caller's path: the modules its pickled request refers to
            outcome = _execute(pickle.loads(payload), forward)
        except KeyboardInterrupt:
            outcome = TrialOutcome(Outcome.INTERRUPTED, None, "interrupted before the run started")
        forward._send("outcome", outcome)
    return 130 if outcome.kind is Outcome.INTERRUPTED else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
