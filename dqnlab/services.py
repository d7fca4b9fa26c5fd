"""Shared services for a study that spans processes and machines: PostgreSQL (one database for
Optuna, one for MLflow), ``mlflow server`` on it with proxied artifacts, and optuna-dashboard.

    python -m dqnlab.services up --root results/services        # start all three, print the URIs
    python -m dqnlab.services env --root results/services       # the URIs as shell exports
    python -m dqnlab.services down --root results/services      # stop all three (data is kept)

Everything lives under ``--root``: the PostgreSQL data folder (``pg/``), the artifact store
(``mlartifacts/``), the logs, and ``services.json`` (ports, pids, the generated database password;
mode 0600). ``up`` on a root that was stopped starts the same cluster again with its data.

By default every service binds 127.0.0.1. For other machines, pass ``--host 0.0.0.0`` (or the
machine's address): PostgreSQL then accepts password logins from its own subnets (``samenet`` in
pg_hba.conf) and the MLflow server needs ``--allowed-hosts`` (Host headers it answers, e.g.
``10.0.0.5:5000``) and, for browsers on other origins, ``--cors-allowed-origins``.

PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` user that Debian's
package creates, which must be able to reach ``--root`` (e.g. a folder under /tmp or /srv).
The driver is psycopg2 (``pip install -e '.[cluster]'`` installs psycopg2-binary), so storage
URIs read ``postgresql+psycopg2://user:password@host:port/db``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dqnlab.procfs import alive, group_alive

DB_USER = "dqnlab"
DATABASES = ("optuna", "mlflow")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
STATE_FILE = "services.json"


class ServiceError(RuntimeError):
    """A service could not be started or stopped; the message says which and where its log is."""


@dataclass
class ServicesState:
    """What ``up`` started; ``services.json`` under the root. Ports are TCP ports on ``host``."""

    root: str
    host: str = "127.0.0.1"
    pg_port: int = 5433
    mlflow_port: int = 5000
    dashboard_port: int = 8080
    password: str = ""
    pg_bin: str = ""
    allowed_hosts: str | None = None
    cors_allowed_origins: str | None = None
    dashboard: bool = True
    pids: dict[str, int] = field(default_factory=dict)

    # --- addresses clients use (host as given; 0.0.0.0 is reached as 127.0.0.1 from this machine)
    @property
    def client_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host

    def database_uri(self, db: str) -> str:
        return f"postgresql+psycopg2://{DB_USER}:{self.password}@{self.client_host}:{self.pg_port}/{db}"

    @property
    def storage(self) -> str:
        return self.database_uri("optuna")

    @property
    def tracking_uri(self) -> str:
        return f"http://{self.client_host}:{self.mlflow_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.client_host}:{self.dashboard_port}"


# --- state file ----------------------------------------------------------------------------------
def load_state(root: Path) -> ServicesState | None:
    path = root / STATE_FILE
    if not path.exists():
        return None
    return ServicesState(**json.loads(path.read_text()))


def save_state(state: ServicesState) -> None:
    path = Path(state.root) / STATE_FILE
    path.write_text(json.dumps(asdict(state), indent=2))
    path.chmod(0o600)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on now (the OS picks it; free until someone binds it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# --- PostgreSQL ----------------------------------------------------------------------------------
def find_pg_bin(explicit: str | None = None) -> Path:
    """The folder holding initdb and pg_ctl: ``explicit``, ``pg_config --bindir``, or Debian's layout."""
    if explicit:
        if (Path(explicit) / "initdb").exists() and (Path(explicit) / "pg_ctl").exists():
            return Path(explicit)
        raise ServiceError(f"--pg-bin: {explicit} holds no initdb and pg_ctl; allowed: a PostgreSQL bin folder "
                           "such as /usr/lib/postgresql/15/bin")  # fmt: skip
    candidates = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for c in candidates:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists():
            return Path(c)
    raise ServiceError("PostgreSQL server binaries (initdb, pg_ctl) not found; install Debian's package "
                       "(apt-get install -y postgresql) or pass --pg-bin")  # fmt: skip


def _pg_user() -> str | None:
    """The account the PostgreSQL server runs as: ``postgres`` when we are root, else ourselves."""
    return "postgres" if os.geteuid() == 0 else None


def _run_pg(cmd: list[str], user: str | None, log: Path | None = None) -> None:
    with open(log, "a") if log else open(os.devnull, "w") as fh:
        proc = subprocess.run(cmd, user=user, stdout=fh, stderr=subprocess.STDOUT, cwd="/")
    if proc.returncode != 0:
        where = f"; see {log}" if log else ""
        raise ServiceError(f"{Path(cmd[0]).name} failed with exit {proc.returncode}{where}")


def init_postgres(state: ServicesState) -> None:
    """initdb into ``root/pg`` (once), with loopback or subnet password logins on ``host``."""
    root, pg_bin, user = Path(state.root), Path(state.pg_bin), _pg_user()
    data = root / "pg"
    if (data / "PG_VERSION").exists():
        return
    data.mkdir(mode=0o700, exist_ok=True)  # exists already if an earlier initdb failed
    pwfile = root / ".pgpass-init"
    pwfile.write_text(state.password + "\n")
    if user:
        shutil.chown(data, user)
        shutil.chown(pwfile, user)
        probe = subprocess.run(["test", "-w", str(data)], user=user)
        if probe.returncode != 0:
            raise ServiceError(f"--root {root}: the 'postgres' user cannot reach {data}; as root, choose a root "
                               "that every parent folder lets others enter (e.g. under /tmp or /srv)")  # fmt: skip
    try:
        _run_pg([str(pg_bin / "initdb"), "-D", str(data), "-U", DB_USER, f"--pwfile={pwfile}", "-E", "UTF8",
                 "--auth-local=trust", "--auth-host=scram-sha-256"], user, root / "pg-init.log")  # fmt: skip
    finally:
        pwfile.unlink(missing_ok=True)
    listen = "localhost" if state.host in LOOPBACK else state.host
    listen = "*" if listen == "0.0.0.0" else listen
    with open(data / "postgresql.conf", "a") as fh:
        fh.write(f"\n# dqnlab services\nlisten_addresses = '{listen}'\nport = {state.pg_port}\n"
                 f"unix_socket_directories = '{data}'\nmax_connections = 200\n")  # fmt: skip
    if state.host not in LOOPBACK:
        with open(data / "pg_hba.conf", "a") as fh:
            fh.write("host all all samenet scram-sha-256\n")


def start_postgres(state: ServicesState) -> None:
    data, log = Path(state.root) / "pg", Path(state.root) / "pg.log"
    log.touch()
    if _pg_user():
        shutil.chown(log, _pg_user())
    _run_pg([str(Path(state.pg_bin) / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", f"-p {state.pg_port}",
             "-w", "-t", "60", "start"], _pg_user(), log)  # fmt: skip
    pid_line = (data / "postmaster.pid").read_text().splitlines()[0]
    state.pids["postgres"] = int(pid_line)


def stop_postgres(state: ServicesState) -> None:
    data = Path(state.root) / "pg"
    pid_file = data / "postmaster.pid"
    if not pid_file.exists() or not alive(int(pid_file.read_text().splitlines()[0])):
        return  # not running (a stale pid file is cleared by the next start)
    _run_pg([str(Path(state.pg_bin) / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"],
            _pg_user(), Path(state.root) / "pg.log")  # fmt: skip


def create_databases(state: ServicesState) -> None:
    import psycopg2

    conn = psycopg2.connect(host=state.client_host, port=state.pg_port, user=DB_USER, password=state.password,
                            dbname="postgres", connect_timeout=10)  # fmt: skip
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for db in DATABASES:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{db}"')
    finally:
        conn.close()


def create_optuna_schema(state: ServicesState) -> None:
    """Optuna's tables, created here once: sweep processes on many machines then never race to create
    them, and optuna-dashboard (which does not create tables) can start on an empty study list."""
    import optuna

    optuna.storages.RDBStorage(state.storage).engine.dispose()


# --- HTTP services -------------------------------------------------------------------------------
def spawn(name: str, cmd: list[str], root: Path) -> int:
    """Start a server in its own session (so :func:`stop_group` stops its whole process group),
    logging to ``root/<name>.log``; returns its pid."""
    # MLflow's job runner (GenAI evaluation jobs: eight more processes) is of no use to a sweep.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    with open(Path(root) / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=root, env=env)  # fmt: skip
    return proc.pid


def mlflow_server_command(backend_uri: str, artifacts: Path, host: str, port: int, allowed_hosts: str | None = None,
                          cors_allowed_origins: str | None = None) -> list[str]:  # fmt: skip
    """``mlflow server`` on ``backend_uri`` with artifacts proxied to the folder ``artifacts``."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri, "--serve-artifacts",
           "--artifacts-destination", str(artifacts), "--host", host, "--port", str(port), "--workers", "2"]  # fmt: skip
    if allowed_hosts:
        cmd += ["--allowed-hosts", allowed_hosts]
    if cors_allowed_origins:
        cmd += ["--cors-allowed-origins", cors_allowed_origins]
    return cmd


def dashboard_command(state: ServicesState) -> list[str]:
    exe = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    if exe is None:
        raise ServiceError("optuna-dashboard not installed: pip install -e '.[cluster]' (or pass --no-dashboard)")
    return [exe, state.storage, "--host", state.host, "--port", str(state.dashboard_port)]


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
def up(state: ServicesState) -> ServicesState:
    """Start PostgreSQL, create the databases, start the MLflow server (and the dashboard)."""
    root = Path(state.root)
    state.pg_bin = str(find_pg_bin(state.pg_bin or None))  # before anything is written
    root.mkdir(parents=True, exist_ok=True)
    (root / "mlartifacts").mkdir(exist_ok=True)
    previous = load_state(root)
    if previous is not None:
        if any(alive(p) for p in previous.pids.values()):
            raise ServiceError(f"services under {root} are already running (pids {previous.pids}); "
                               f"run: python -m dqnlab.services down --root {root}")  # fmt: skip
        state.password = previous.password  # the database was initialised with it
    state.password = state.password or secrets.token_urlsafe(18)
    state.pids = {}
    try:
        init_postgres(state)
        start_postgres(state)
        save_state(state)
        create_databases(state)
        create_optuna_schema(state)
        state.pids["mlflow"] = spawn("mlflow", mlflow_server_command(
            state.database_uri("mlflow"), root / "mlartifacts", state.host, state.mlflow_port, state.allowed_hosts,
            state.cors_allowed_origins), root)  # fmt: skip
        save_state(state)
        wait_http(f"{state.tracking_uri}/health", "mlflow server", root / "mlflow.log", state.pids["mlflow"])
        if state.dashboard:
            state.pids["dashboard"] = spawn("dashboard", dashboard_command(state), root)
            save_state(state)
            wait_http(f"{state.dashboard_url}/api/studies", "optuna-dashboard", root / "dashboard.log",
                      state.pids["dashboard"])  # fmt: skip
    except BaseException:
        down(state)
        raise
    return state


def down(state: ServicesState) -> None:
    """Stop what ``up`` started, HTTP servers first; the data under the root stays."""
    for name in ("dashboard", "mlflow"):
        pid = state.pids.get(name)
        if pid and alive(pid):
            stop_group(pid)
    stop_postgres(state)
    state.pids = {}
    if (Path(state.root) / STATE_FILE).exists():
        save_state(state)


def describe(state: ServicesState) -> str:
    lines = [
        f"optuna storage:  {state.storage}",
        f"mlflow tracking: {state.tracking_uri}   (UI in a browser)",
    ]
    if state.dashboard:
        lines.append(f"optuna dashboard: {state.dashboard_url}")
    lines.append(f"run a sweep:     python sweeps/utd.py --storage '{state.storage}' --tracking-uri {state.tracking_uri}")
    if state.host not in LOOPBACK:
        lines.append(f"other machines:  the same URIs with this machine's address (services bound to {state.host})")
    return "\n".join(lines)


def exports(state: ServicesState) -> str:
    return f"export DQNLAB_STORAGE='{state.storage}'\nexport DQNLAB_TRACKING_URI='{state.tracking_uri}'"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dqnlab.services", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("up", "down", "status", "env"):
        s = sub.add_parser(name)
        s.add_argument("--root", default="results/services", help="folder for data, logs and services.json")
    u = sub.choices["up"]
    u.add_argument("--host", default="127.0.0.1", help="bind address of all services (0.0.0.0: every interface)")
    u.add_argument("--pg-port", type=int, default=5433)
    u.add_argument("--mlflow-port", type=int, default=5000)
    u.add_argument("--dashboard-port", type=int, default=8080)
    u.add_argument("--allowed-hosts", help="mlflow server --allowed-hosts (needed when other machines connect)")
    u.add_argument("--cors-allowed-origins", help="mlflow server --cors-allowed-origins")
    u.add_argument("--no-dashboard", action="store_true", help="do not start optuna-dashboard")
    u.add_argument("--pg-bin", help="folder with initdb and pg_ctl (default: found)")
    args = p.parse_args(argv)
    root = Path(args.root).expanduser().resolve()
    try:
        if args.command == "up":
            for flag in ("pg_port", "mlflow_port", "dashboard_port"):
                if not 1 <= getattr(args, flag) <= 65535:
                    raise ServiceError(f"--{flag.replace('_', '-')}: got {getattr(args, flag)}; allowed: 1..65535")
            state = ServicesState(
                str(root), args.host, args.pg_port, args.mlflow_port, args.dashboard_port, pg_bin=args.pg_bin or "",
                allowed_hosts=args.allowed_hosts, cors_allowed_origins=args.cors_allowed_origins,
                dashboard=not args.no_dashboard,
            )  # fmt: skip
            up(state)
            print(describe(state))
            return 0
        state = load_state(root)
        if state is None:
            raise ServiceError(f"no services under {root} (no {STATE_FILE}); start them with: "
                               f"python -m dqnlab.services up --root {root}")  # fmt: skip
        if args.command == "down":
            down(state)
            print(f"stopped; data kept under {root}")
        elif args.command == "env":
            print(exports(state))
        else:
            running = {n: pid for n, pid in state.pids.items() if alive(pid)}
            print(describe(state))
            print(f"running: {running or 'nothing'}")
        return 0
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
