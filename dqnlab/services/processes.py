"""The server processes of a cluster: started in their own session (so one signal stops a server and its
workers), waited for over HTTP, stopped by process group."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from dqnlab.services.state import ServiceError, ServicesState


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_alive(pgid: int) -> bool:
    """Whether any live process is in process group ``pgid``."""
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
            continue
    return False


def spawn(name: str, cmd: list[str], root: Path, env: dict[str, str] | None = None) -> int:
    """Start a server in its own session (so :func:`stop_group` stops its whole process group),
    logging to ``root/<name>.log``; returns its pid. ``env``: extra variables (paths to secret files:
    secrets never go on a command line, where ``ps`` shows them)."""
    # MLflow's job runner (GenAI evaluation jobs: eight more processes) is of no use to a sweep.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
           **(env or {})}  # fmt: skip
    with open(Path(root) / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=root, env=env)  # fmt: skip
    return proc.pid


def mlflow_server_command(backend_uri: str, artifacts: Path, host: str, port: int, allowed_hosts: str | None = None,
                          cors_allowed_origins: str | None = None, auth: bool = False) -> list[str]:  # fmt: skip
    """``mlflow server`` on ``backend_uri`` with artifacts proxied to the folder ``artifacts``; with
    ``auth``, MLflow's basic-auth app (its config: ``MLFLOW_AUTH_CONFIG_PATH``)."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri, "--serve-artifacts",
           "--artifacts-destination", str(artifacts), "--host", host, "--port", str(port), "--workers", "2"]  # fmt: skip
    if auth:
        cmd += ["--app-name", "basic-auth"]
    if allowed_hosts:
        cmd += ["--allowed-hosts", allowed_hosts]
    if cors_allowed_origins:
        cmd += ["--cors-allowed-origins", cors_allowed_origins]
    return cmd


def dashboard_command(state: ServicesState) -> list[str]:
    exe = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    if exe is None:
        raise ServiceError("optuna-dashboard not installed: pip install -e '.[cluster]' (or pass --no-dashboard)")
    # optuna-dashboard has no login: it never binds beyond loopback (reach it through an SSH tunnel)
    return [exe, state.database_uri("optuna", with_password=False), "--host", "127.0.0.1", "--port",
            str(state.dashboard_port)]  # fmt: skip


def wait_http(url: str, name: str, log: Path, pid: int, timeout_s: float = 120.0) -> None:
    """Until ``url`` answers 200; fails early if the server process exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            raise ServiceError(f"{name} exited during start-up; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise ServiceError(f"{name} did not answer {url} within {timeout_s:.0f} s; see {log}")


def stop_group(pid: int, timeout_s: float = 20.0) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL what is left after ``timeout_s``."""
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)  # reap if it is our child
            except ChildProcessError:
                pass
            if not group_alive(pid):
                return
            time.sleep(0.1)


# --- up / down -----------------------------------------------------------------------------------


