"""Bringing a cluster up and down as one (PostgreSQL, ``mlflow server``, optuna-dashboard), and what
workers need to reach it."""

from __future__ import annotations

import secrets
from pathlib import Path

from dqnlab.services.postgres import (
    create_databases,
    create_optuna_schema,
    find_pg_bin,
    init_postgres,
    start_postgres,
    stop_postgres,
)
from dqnlab.services.processes import alive, dashboard_command, mlflow_server_command, spawn, stop_group, wait_http
from dqnlab.services.state import LOOPBACK, STATE_FILE, ServiceError, ServicesState, load_state, save_state


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


