"""A cluster's state: its folder, addresses, ports, pids and generated passwords, kept in
``services.json`` (mode 0600) under ``--root``; and the files that carry secrets to the servers
without putting them on a command line (``pgpass``, ``mlflow-auth.ini``, both mode 0600)."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

DB_USER = "dqnlab"
DATABASES = ("optuna", "mlflow")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
STATE_FILE = "services.json"
PGPASS_FILE = "pgpass"
AUTH_FILE = "mlflow-auth.ini"
MLFLOW_ADMIN = "admin"
MLFLOW_WORKER = "worker"


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
    allow_from: list[str] = field(default_factory=list)
    """Networks (CIDR) other than this machine whose PostgreSQL logins are accepted; none by default."""
    tls: bool = False
    """PostgreSQL offers TLS (self-signed certificate made at ``up``) and requires it off this machine."""
    mlflow_admin_password: str = ""
    mlflow_worker_password: str = ""
    mlflow_secret_key: str = ""
    """The MLflow server's CSRF key (its basic-auth app refuses to start without one)."""
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def exposed(self) -> bool:
        """Bound beyond loopback: the MLflow server then runs with its basic-auth app."""
        return self.host not in LOOPBACK

    # --- addresses clients use (host as given; 0.0.0.0 is reached as 127.0.0.1 from this machine)
    @property
    def client_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host

    def database_uri(self, db: str, with_password: bool = True) -> str:
        """The SQLAlchemy URL of database ``db``; without the password for the servers, which read it
        from ``pgpass`` (so that it never shows in a command line)."""
        secret = f":{self.password}" if with_password else ""
        query = "?sslmode=require" if self.tls else ""
        return f"postgresql+psycopg2://{DB_USER}{secret}@{self.client_host}:{self.pg_port}/{db}{query}"

    @property
    def storage(self) -> str:
        return self.database_uri("optuna")

    @property
    def tracking_uri(self) -> str:
        return f"http://{self.client_host}:{self.mlflow_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"  # never bound beyond loopback


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


