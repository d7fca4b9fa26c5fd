"""One sweep trial in a fresh process, so that actors are never forked from a process with threads.

A sweep process runs Optuna's heartbeat thread (and MLflow's imports start a native allocator
thread); a ``fork`` there copies locks another thread may hold. So the sweep never runs the engine
itself: for each trial it starts ``python -m dqnlab.engine.fresh_process_child`` (``subprocess``: fork +
exec, safe from a threaded parent; :mod:`dqnlab.engine.fresh_process_child` is that process's side of
the protocol, this module the caller's). That process imports the engine only (no Optuna, no MLflow: ~1.6 s
here), runs :func:`dqnlab.engine.entry`, and streams the callbacks' events (``on_start``, ``on_log``,
``on_end``, ``on_progress``) and the outcome back over a pipe; the sweep process feeds them to its
MLflow tracker. :func:`dqnlab.engine.entry` uses the same path whenever it is called from a process
with other threads. A sweep's worker loop imports once instead: its trial server
(:mod:`dqnlab.engine.trial_server`) forks each trial process, which runs the same code.

Signals: Ctrl-C or SIGTERM of the sweep is passed on to the trial process (directly by the terminal
to its process group, or by :func:`run_trial`), which stops like an interrupted run and still sends
its events; if the sweep process dies (SIGKILL), the kernel sends the trial process SIGTERM
(``PR_SET_PDEATHSIG``; a forked trial gets it when the server, killed with the sweep, dies).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, BinaryIO

from dqnlab.engine.trial_server import ForkedTrial, TrialServer, TrialServerError

STOP_GRACE_S = 30.0


@dataclass
class TrialRequest:
    config: Any  # dqnlab.config.Config
    quiet: bool
    env_spec: Any = None
    """The gymnasium EnvSpec of ``config.env.env_id``: re-registered in the trial process when
    missing there, so envs registered by the caller (tests, user modules) work too."""


class Outcome(StrEnum):
    """How a trial process ended."""

    RESULT = "result"
    """The run ended: completed or diverged (its result says which)."""
    FAILED = "failed"
    """The run crashed (its partial result is kept)."""
    CONFIG = "config"
    """This machine refused the configuration (a ConfigError: cuda asked where there is none)."""
    INTERRUPTED = "interrupted"
    """SIGINT or SIGTERM."""
    DIED = "died"
    """The trial process ended without an outcome."""
    TRACKING = "tracking"
    """The caller's tracker failed (set by :func:`run_trial`)."""


@dataclass
class TrialOutcome:
    kind: Outcome
    result: Any = None  # dqnlab.run.RunResult where the run started
    message: str = ""
    exception: BaseException | None = None
    """The callback's exception, for ``tracking`` (set in the calling process, never pickled)."""


def run_trial(request: TrialRequest, callbacks: list[Any], server: TrialServer | None = None) -> TrialOutcome:
    """Run ``request`` in a fresh process, calling ``callbacks``' hooks here with its events: a fresh
    interpreter, or a process ``server`` forks (:mod:`dqnlab.engine.trial_server`: the same code, without
    importing the engine again; a server that cannot fork is closed, with a warning, and its trials run in
    fresh interpreters).

    A callback that raises (the MLflow store failed) stops the trial process and gives the outcome
    ``tracking`` with the error. SIGINT or SIGTERM meanwhile is passed on to the trial process (as
    SIGTERM), whose last events (``on_end`` of an interrupted run) are still delivered; then
    KeyboardInterrupt is raised here. The signals are caught, not raised, while events are read, so
    a signal can never cut an event in half."""
    read_fd, write_fd = os.pipe()
    try:
        proc, requests = _start(write_fd, server)
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    signals: list[int] = []

    def forward(signum, frame):
        signals.append(signum)
        _signal(proc, signal.SIGTERM)

    error: BaseException | None = None
    outcome: TrialOutcome | None = None
    with _handlers(forward), os.fdopen(read_fd, "rb") as events:
        with requests:
            requests.write(pickle.dumps((list(sys.path), pickle.dumps(request))))
        while (event := _next_event(events)) is not None:
            hook, payload = event
            if hook == "outcome":
                outcome = payload
            elif error is None:
                try:
                    for cb in callbacks:
                        fn = getattr(cb, hook, None)
                        if fn is not None:
                            fn(*payload)
                except Exception as exc:  # a callback failed: stop the trial, drain its events
                    error = exc
                    _signal(proc, signal.SIGTERM)
        _wait(proc)
    if signals:
        raise KeyboardInterrupt(f"signal {signal.Signals(signals[0]).name}")
    if error is not None:
        return TrialOutcome(Outcome.TRACKING, outcome.result if outcome else None, str(error), error)
    if outcome is not None and outcome.kind is Outcome.INTERRUPTED and getattr(proc, "server_died", False):
        # no signal here: the kernel stopped the trial when its server died (killed), not a user's interrupt
        return TrialOutcome(Outcome.DIED, outcome.result, "the trial server died, and its trial was stopped with it")
    if outcome is None:
        code = proc.returncode
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return TrialOutcome(Outcome.DIED, None, f"the trial process ended with {how} and no outcome")
    return outcome


def _start(events_fd: int, server: TrialServer | None) -> tuple[subprocess.Popen | ForkedTrial, BinaryIO]:
    """The trial process, and the stream its request is written to."""
    if server is not None:
        with contextlib.suppress(TrialServerError):  # it warned once, when it failed
            return server.fork(events_fd)
    cmd = [sys.executable, "-m", "dqnlab.engine.fresh_process_child", str(events_fd), str(os.getpid())]
    proc = subprocess.Popen(cmd, pass_fds=(events_fd,), stdin=subprocess.PIPE)
    return proc, proc.stdin


@contextlib.contextmanager
def _handlers(handler) -> Iterator[None]:
    """``handler`` for SIGINT and SIGTERM inside the block (main thread only; elsewhere unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _next_event(stream: BinaryIO):
    """The next ``(hook, payload)``; None at the end of the stream (or a stream cut mid-event by a
    process that was killed)."""
    try:
        return pickle.load(stream)
    except (EOFError, pickle.UnpicklingError):
        return None


def _signal(proc: subprocess.Popen | ForkedTrial, sig: int) -> None:
    proc.send_signal(sig)  # a no-op for a process already reaped (Popen polls first; a ForkedTrial has a pidfd)


def _wait(proc: subprocess.Popen | ForkedTrial) -> None:
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
