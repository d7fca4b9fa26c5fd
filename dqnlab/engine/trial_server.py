"""A trial server: one thread-free process that imports the engine once and forks a trial process per trial,
so a sweep's trials skip the ~1.6 s a fresh interpreter takes to import torch (:mod:`dqnlab.engine.fresh_process`).

Why the fork is safe: the server is started by fork + exec from the threaded sweep process (as a fresh trial
process is), imports the engine, and then only reads requests, forks and waits. It never starts a thread, and
checks before every fork that it has exactly one (a server with another refuses, and the trial fails with the
reason). A forked trial is what a fresh interpreter is after the same imports, and runs the same code,
:func:`dqnlab.engine.fresh_process_child.run`.

Lifetime: :class:`TrialServer` starts the server at its first trial and stops it on leaving its block. The
server dies with its caller (``PR_SET_PDEATHSIG``, SIGKILL) and ignores SIGINT and SIGTERM (the terminal or
the caller delivers those to the trial itself); a trial dies with the server (SIGTERM: it stops like an
interrupted run). Closing the caller's end of the socket ends the server once its trial has ended.

Protocol, one trial at a time, over a ``SOCK_SEQPACKET`` socket pair: the caller sends ``trial`` with two
file descriptors (the write end of the trial's event pipe, the read end of its request pipe); the server
forks, closes its copies and answers ``pid N``, waits for the trial and answers ``exit N STATUS`` (a
``waitpid`` status), or ``error REASON`` when it cannot fork.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import traceback
from typing import BinaryIO

PDEATHSIG = 1  # prctl(PR_SET_PDEATHSIG, sig)
UNKNOWN_EXIT = 255
"""The exit code reported for a trial whose server died before telling its status."""


class TrialServerError(RuntimeError):
    """The trial server could not start a trial (it died, or it found a thread)."""


class ForkedTrial:
    """A trial process the server forked: the part of :class:`subprocess.Popen` that
    :func:`dqnlab.engine.fresh_process.run_trial` uses (``pid``, ``returncode``, ``poll``, ``wait``,
    ``send_signal``, ``kill``). Signals go through a pidfd, so they never reach a later process that
    reuses the pid."""

    def __init__(self, server: TrialServer, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._server = server
        self._pidfd: int | None = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            self._collect(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._collect(timeout):
            raise subprocess.TimeoutExpired(f"trial process {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _collect(self, timeout: float | None) -> bool:
        """Whether the trial's exit status arrived within ``timeout`` seconds (None: no limit)."""
        message = self._server.receive(f"exit {self.pid} ", timeout)
        if message is None:
            return False
        if message:
            self.returncode = os.waitstatus_to_exitcode(int(message.split()[2]))
        else:  # the server is gone: its trial got SIGTERM; wait for the process itself to end
            if not select.select([self._pidfd], [], [], timeout)[0]:
                return False
            self.returncode = UNKNOWN_EXIT
        os.close(self._pidfd)
        self._pidfd = None
        return True


class TrialServer:
    """The caller's handle on a trial server (a context manager; the server starts at the first trial)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> TrialServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fork(self, events_fd: int) -> tuple[ForkedTrial, BinaryIO]:
        """A trial process writing its events to ``events_fd``, and the stream its request is written to."""
        if self._sock is None:
            self._start()
        read_fd, write_fd = os.pipe()
        requests = os.fdopen(write_fd, "wb")
        try:
            socket.send_fds(self._sock, [b"trial"], [events_fd, read_fd])
        except OSError as exc:
            requests.close()
            raise TrialServerError(f"the trial server is gone ({exc})") from exc
        finally:
            os.close(read_fd)
        reply = self.receive(("pid ", "error "), None)
        if not reply or reply.startswith("error "):
            requests.close()
            raise TrialServerError(reply[len("error ") :] if reply else "the trial server is gone")
        return ForkedTrial(self, int(reply.split()[1])), requests

    def receive(self, prefix: str | tuple[str, ...], timeout: float | None) -> str | None:
        """The next message starting with ``prefix`` (others, left by a trial the caller gave up, are
        dropped); ``""`` once the server is gone; None when ``timeout`` seconds pass first."""
        while True:
            if timeout is not None and not select.select([self._sock], [], [], timeout)[0]:
                return None
            try:
                message = self._sock.recv(256).decode()
            except ConnectionResetError:
                message = ""
            if not message or message.startswith(prefix):
                return message

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cmd = [sys.executable, "-m", "dqnlab.engine.trial_server", str(theirs.fileno()), str(os.getpid())]
        try:
            self._proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._sock = ours

    def close(self, timeout_s: float = 60.0) -> None:
        """Close the socket; the server ends once its trial has (killed after ``timeout_s``)."""
        if self._sock is None:
            return
        self._sock.close()
        self._sock = None
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _fork_trial(sock: socket.socket, events_fd: int, requests_fd: int, run) -> int:
    """Fork one trial; in the child, run it and exit. Returns the child's pid (in the server)."""
    server = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        sock.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with os.fdopen(requests_fd, "rb") as requests:
            code = run(events_fd, server, requests)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main(argv: list[str]) -> int:
    sock, caller = socket.socket(fileno=int(argv[0])), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ctypes.CDLL(None, use_errno=True).prctl(PDEATHSIG, signal.SIGKILL)
    if os.getppid() != caller:  # the caller died before prctl took effect
        return 0
    import gymnasium  # noqa: F401  (the trial's imports, made once here)

    import dqnlab.config  # noqa: F401
    import dqnlab.engine  # noqa: F401
    import dqnlab.tracking.console  # noqa: F401
    from dqnlab.engine.fresh_process_child import run

    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 64, 2)
        except ConnectionResetError:
            break
        if not message:  # the caller closed its end
            break
        events_fd, requests_fd = fds
        threads = _threads()
        if threads != 1:
            os.close(events_fd)
            os.close(requests_fd)
            sock.send(f"error the trial server has {threads} threads; a fork would copy their locks".encode())
            continue
        pid = _fork_trial(sock, events_fd, requests_fd, run)
        os.close(events_fd)  # the caller sees the event stream end when the trial's copy closes
        os.close(requests_fd)
        told = _send(sock, f"pid {pid}")
        _, status = os.waitpid(pid, 0)
        if not (told and _send(sock, f"exit {pid} {status}")):
            break  # the caller closed its end
    return 0


def _send(sock: socket.socket, message: str) -> bool:
    try:
        sock.send(message.encode())
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
