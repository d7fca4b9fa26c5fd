"""Bringing a cluster up and down as one (PostgreSQL, ``mlflow server``, optuna-dashboard), and what
workers need to reach it.

Bound beyond loopback (``--host``), the MLflow server runs MLflow's basic-auth app: ``up`` makes an
``admin`` and a ``worker`` account with generated passwords (kept in ``services.json``, 0600); every
request without credentials gets 401. optuna-dashboard, which has no login, stays on 127.0.0.1.
Secrets reach the servers through files (``pgpass``, ``mlflow-auth.ini``), never a command line."""

from __future__ import annotations

import secrets
from pathlib import Path

from dqnlab.services.postgres import (
    configure_postgres,
    create_databases,
    create_optuna_schema,
    find_pg_bin,
    init_postgres,
    start_postgres,
    stop_postgres,
    write_pgpass,
)
from dqnlab.services.processes import dashboard_command, group_alive, mlflow_server_command, spawn, stop_group, wait_http
from dqnlab.services.state import (
    AUTH_FILE,
    LOOPBACK,
    MLFLOW_ADMIN,
    MLFLOW_WORKER,
    STATE_FILE,
    ServiceError,
    ServicesState,
    load_state,
    save_state,
)


def up(state: ServicesState) -> ServicesState:
    """Start PostgreSQL, create the databases, start the MLflow server (and the dashboard)."""
    root = Path(state.root)
    state.pg_bin = str(find_pg_bin(state.pg_bin or None))  # before anything is written
    root.mkdir(parents=True, exist_ok=True)
    (root / "mlartifacts").mkdir(exist_ok=True)
    previous = load_state(root)
    if previous is not None:
        if any(group_alive(p) for p in previous.pids.values()):  # a child may outlive its leader
            raise ServiceError(f"services under {root} are already running (pids {previous.pids}); "
                               f"run: python -m dqnlab.services down --root {root}")  # fmt: skip
        state.password = previous.password  # the database was initialised with it
        state.mlflow_admin_password = previous.mlflow_admin_password  # the auth store holds it
        state.mlflow_worker_password = previous.mlflow_worker_password
        state.mlflow_secret_key = previous.mlflow_secret_key
    state.mlflow_secret_key = state.mlflow_secret_key or secrets.token_urlsafe(32)
    state.password = state.password or secrets.token_urlsafe(18)
    state.mlflow_admin_password = state.mlflow_admin_password or secrets.token_urlsafe(18)
    state.mlflow_worker_password = state.mlflow_worker_password or secrets.token_urlsafe(18)
    state.pids = {}
    try:
        init_postgres(state)
        configure_postgres(state)
        start_postgres(state)
        save_state(state)
        create_databases(state)
        create_optuna_schema(state)
        env = {"PGPASSFILE": str(write_pgpass(state))}
        if state.exposed:
            env["MLFLOW_AUTH_CONFIG_PATH"] = str(write_auth_config(state))
            env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = state.mlflow_secret_key
        state.pids["mlflow"] = spawn("mlflow", mlflow_server_command(
            state.database_uri("mlflow", with_password=False), root / "mlartifacts", state.host, state.mlflow_port,
            allowed_hosts(state), state.cors_allowed_origins, auth=state.exposed), root, env)  # fmt: skip
        save_state(state)
        wait_http(f"{state.tracking_uri}/health", "mlflow server", root / "mlflow.log", state.pids["mlflow"])
        if state.exposed:
            ensure_worker_account(state)
        if state.dashboard:
            state.pids["dashboard"] = spawn("dashboard", dashboard_command(state), root, env)
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
        if pid and group_alive(pid):  # its leader may have exited and left a child serving (uvicorn)
            stop_group(pid)
    stop_postgres(state)
    state.pids = {}
    if (Path(state.root) / STATE_FILE).exists():
        save_state(state)


def allowed_hosts(state: ServicesState) -> str | None:
    """MLflow's Host-header allow list (DNS-rebinding protection): the user's ``--allowed-hosts`` plus
    the address it is bound to and this machine's loopback names (MLflow's defaults cover loopback
    and private addresses only while no list is given)."""
    if not state.allowed_hosts and state.host in ("127.0.0.1", "localhost", "0.0.0.0", "::"):
        return None
    own = [f"{h}:{state.mlflow_port}" for h in (state.client_host, "127.0.0.1", "localhost")]
    return ",".join(dict.fromkeys([*filter(None, (state.allowed_hosts or "").split(",")), *own]))


def write_auth_config(state: ServicesState) -> Path:
    """MLflow's basic-auth config (0600): the admin account, the users' store, EDIT for every
    authenticated user (workers create and write runs; unauthenticated requests get 401)."""
    path = Path(state.root) / AUTH_FILE
    path.write_text(f"[mlflow]\ndefault_permission = EDIT\ndatabase_uri = sqlite:///{Path(state.root) / 'mlflow-auth.db'}\n"
                    f"admin_username = {MLFLOW_ADMIN}\nadmin_password = {state.mlflow_admin_password}\n"
                    "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")  # fmt: skip
    path.chmod(0o600)
    return path


def ensure_worker_account(state: ServicesState) -> None:
    """Create the ``worker`` account (or set its password again) through the admin API."""
    import base64
    import json
    import urllib.error
    import urllib.request

    token = base64.b64encode(f"{MLFLOW_ADMIN}:{state.mlflow_admin_password}".encode()).decode()
    body = json.dumps({"username": MLFLOW_WORKER, "password": state.mlflow_worker_password}).encode()
    headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
    for method, path in (("POST", "create"), ("PATCH", "update-password")):
        req = urllib.request.Request(f"{state.tracking_uri}/api/2.0/mlflow/users/{path}", body, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=20):
                return
        except urllib.error.HTTPError as exc:
            if method == "POST" and exc.code in (400, 409):  # exists already (a restart): set its password
                continue
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise ServiceError(f"mlflow server refused to {path} the worker account: HTTP {exc.code} {detail}") from None
    raise ServiceError("mlflow server: could not create or update the worker account")


def describe(state: ServicesState) -> str:
    lines = [
        f"optuna storage:  {state.database_uri('optuna', with_password=False)}   (password: services env)",
        f"mlflow tracking: {state.tracking_uri}   (UI in a browser"
        + (f"; log in as {MLFLOW_ADMIN} or {MLFLOW_WORKER}, passwords in services.json)" if state.exposed else ")"),
    ]
    if state.dashboard:
        lines.append(f"optuna dashboard: {state.dashboard_url}")
    lines.append(f'run a sweep:     eval "$(python -m dqnlab.services env --root {state.root})" && python sweeps/utd.py')
    if state.host not in LOOPBACK:
        lines.append(f"other machines:  the same exports with this machine's address (services bound to {state.host}); "
                     f"PostgreSQL accepts {', '.join(state.allow_from) or 'no other network'}"
                     f"{' over TLS only' if state.tls else ''}; the dashboard only through an SSH tunnel")  # fmt: skip
    return "\n".join(lines)


def exports(state: ServicesState) -> str:
    """What a worker exports: the storage URL (with the database password), the tracking URI and,
    when the server has logins, the worker account that MLflow's client reads from the environment."""
    lines = [f"export DQNLAB_STORAGE='{state.storage}'", f"export DQNLAB_TRACKING_URI='{state.tracking_uri}'"]
    if state.exposed:
        lines += [f"export MLFLOW_TRACKING_USERNAME='{MLFLOW_WORKER}'",
                  f"export MLFLOW_TRACKING_PASSWORD='{state.mlflow_worker_password}'"]  # fmt: skip
    return "\n".join(lines)


