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

Protocol, one trial at a time, over a ``SOCK_SEQPACKET`` socket pair: the caller sends ``trial K`` (K numbers
its requests) with two file descriptors (the write end of the trial's event pipe, the read end of its request
pipe); the server forks, closes its copies and answers ``pid K PID``, waits for the trial and answers ``exit K
STATUS`` (a ``waitpid`` status), or ``error K REASON`` when it cannot fork.
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
import warnings
from typing import BinaryIO

PDEATHSIG = 1  # prctl(PR_SET_PDEATHSIG, sig)
UNKNOWN_EXIT = 255
"""The exit code reported for a trial whose server died before telling its status."""


_SERVER = ("import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, "
           "signal.SIG_IGN); from dqnlab.engine.trial_server import main; sys.exit(main(sys.argv[1:]))")
"""The server's command: SIGINT and SIGTERM are ignored before the engine's imports (~1.6 s), so a Ctrl-C
meanwhile never kills it halfway (the caller passes those signals on to the trial itself)."""


class TrialServerError(RuntimeError):
    """The trial server could not start a trial (it died, found a thread, or this kernel has no pidfd)."""


class TrialServerWarning(UserWarning):
    """A sweep's trial server failed: its trials run in fresh interpreters from then on."""


class ForkedTrial:
    """A trial process the server forked: the part of :class:`subprocess.Popen` that
    :func:`dqnlab.engine.fresh_process.run_trial` uses (``pid``, ``returncode``, ``wait``, ``send_signal``,
    ``kill``). Signals go through a pidfd, so they never reach a later process that reuses the pid, and
    sending one reads nothing from the server (safe in a signal handler)."""

    def __init__(self, server: TrialServer, number: int, pid: int):
        self.pid, self.number = pid, number
        self.returncode: int | None = None
        self.server_died = False
        """The server died before telling the trial's status (killed by the kernel: the trial got SIGTERM)."""
        self._server = server
        self._pidfd: int | None = os.pidfd_open(pid)  # the trial waits for its request: it cannot have ended

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
        message = self._server.receive(f"exit {self.number} ", timeout)
        if message is None:
            return False
        if message:
            self.returncode = os.waitstatus_to_exitcode(int(message.split()[2]))
        else:  # the server is gone, and its trial got SIGTERM: wait for the process itself to end
            if not select.select([self._pidfd], [], [], timeout)[0]:
                return False
            self.returncode, self.server_died = UNKNOWN_EXIT, True
        os.close(self._pidfd)
        self._pidfd = None
        return True


class TrialServer:
    """The caller's handle on a trial server (a context manager; the server starts at the first trial).
    Requests are numbered and every reply names its request, so a reply left by a request the caller
    gave up (an interrupt while it waited) is never taken for a later one's. A server that fails is
    closed, with one :class:`TrialServerWarning`, and every later :meth:`fork` raises
    :class:`TrialServerError` at once (the trial then runs in a fresh interpreter)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._requests = 0
        self.failed: str | None = None

    def __enter__(self) -> TrialServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fork(self, events_fd: int) -> tuple[ForkedTrial, BinaryIO]:
        """A trial process writing its events to ``events_fd``, and the stream its request is written to
        (closing it unwritten ends the trial as interrupted before it started)."""
        if self.failed is not None:
            raise TrialServerError(self.failed)
        if self._sock is None:
            self._start()
        self._requests += 1
        number = self._requests
        read_fd, write_fd = os.pipe()
        requests = os.fdopen(write_fd, "wb")
        try:
            try:
                socket.send_fds(self._sock, [f"trial {number}".encode()], [events_fd, read_fd])
            finally:
                os.close(read_fd)
            reply = self.receive((f"pid {number} ", f"error {number} "), None)
            if not reply or reply.startswith("error "):
                raise TrialServerError(reply.split(" ", 2)[2] if reply else "the trial server is gone")
            return ForkedTrial(self, number, int(reply.split()[2])), requests
        except (OSError, TrialServerError) as exc:
            requests.close()
            self._fail(str(exc))
            raise TrialServerError(str(exc)) from exc
        except BaseException:  # interrupted while waiting: the trial, if forked, reads no request and ends
            requests.close()
            raise

    def receive(self, prefix: str | tuple[str, ...], timeout: float | None) -> str | None:
        """The next message starting with ``prefix`` (others, replies to requests given up, are dropped);
        ``""`` once the server is gone; None when ``timeout`` seconds pass first."""
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
        cmd = [sys.executable, "-c", _SERVER, str(theirs.fileno()), str(os.getpid())]
        try:
            self._proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._sock = ours

    def _fail(self, reason: str) -> None:
        self.failed = reason
        warnings.warn(f"the trial server failed ({reason}); this sweep's trials run in fresh interpreters",
                      TrialServerWarning, stacklevel=4)  # fmt: skip
        self.close()

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
    """The server: ``argv`` is the socket's fd and the caller's pid (:data:`_SERVER` runs it)."""
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
        number = message.decode().split()[1]
        events_fd, requests_fd = fds
        try:
            threads = _threads()
            if threads != 1:
                raise OSError(f"the trial server has {threads} threads; a fork would copy their locks")
            pid = _fork_trial(sock, events_fd, requests_fd, run)
        except OSError as exc:
            if not _send(sock, f"error {number} {exc}"):
                break
            continue
        finally:
            os.close(events_fd)  # the caller sees the event stream end when the trial's copy closes
            os.close(requests_fd)
        told = _send(sock, f"pid {number} {pid}")
        _, status = os.waitpid(pid, 0)
        if not (told and _send(sock, f"exit {number} {status}")):
            break  # the caller closed its end
    return 0


def _send(sock: socket.socket, message: str) -> bool:
    try:
        sock.send(message.encode())
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False
