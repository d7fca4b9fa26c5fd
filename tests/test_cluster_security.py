"""A study shared across machines lets in only its own workers (loopback only: the services bind
0.0.0.0 and are reached through 127.0.0.2 and ::1, which no login rule but ``--allow-from`` admits).

Bound beyond loopback: the MLflow server refuses requests without credentials and a sweep with the
worker account completes; optuna-dashboard stays on 127.0.0.1; PostgreSQL admits only ``--allow-from``
networks, over TLS with ``--tls``, with the right password; no secret shows in a command line, a log
or MLflow.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from test_cluster import _cli, _reason

from dqnlab.services.state import free_port, load_state

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_reason is not None, reason=_reason or "")]


@pytest.fixture(scope="module")
def secured():
    base = Path(tempfile.mkdtemp(prefix="dqnlab-sec-", dir="/tmp"))
    base.chmod(0o755)  # the PostgreSQL server runs as 'postgres' when we are root
    root = base / "svc"
    ports = [str(free_port()) for _ in range(3)]
    flags = ["--root", str(root), "--host", "0.0.0.0", "--pg-port", ports[0], "--mlflow-port", ports[1],
             "--dashboard-port", ports[2], "--tls"]  # fmt: skip
    up = _cli("up", *flags, "--allow-from", "::1/128")
    state = load_state(root)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield state, flags, up.stdout + up.stderr
    finally:
        down = _cli("down", "--root", str(root))
        assert down.returncode == 0, down.stdout + down.stderr
        shutil.rmtree(base, ignore_errors=True)


def _mlflow(state, path: str, user: str | None = None, password: str | None = None) -> int:
    headers = {}
    if user:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    req = urllib.request.Request(f"http://127.0.0.1:{state.mlflow_port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _worker_env(state) -> dict[str, str]:
    out = _cli("env", "--root", state.root)
    assert out.returncode == 0, out.stderr
    env = dict(os.environ)
    for line in out.stdout.splitlines():
        name, value = line.removeprefix("export ").split("=", 1)
        env[name] = value.strip("'")
    return env


def test_an_exposed_mlflow_server_refuses_requests_without_credentials_and_a_worker_sweep_completes(secured, tmp_path):
    state, _, _ = secured
    search = "/api/2.0/mlflow/experiments/search?max_results=1"
    assert _mlflow(state, search) == 401
    assert _mlflow(state, search, "worker", "not-the-password") == 401
    assert _mlflow(state, search, "worker", state.mlflow_worker_password) == 200
    env = _worker_env(state)
    assert env["MLFLOW_TRACKING_USERNAME"] == "worker" and "sslmode=require" in env["DQNLAB_STORAGE"]
    # the storage and tracking URI come from the environment: nothing secret on the command line
    sweep = subprocess.run([sys.executable, "sweeps/utd.py", "--preset", "smoke", "--quiet", "--results",
                            str(tmp_path / "res"), "--study-name", "secured"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-3000:]
    assert "2/2 grid points complete" in sweep.stdout
    assert state.password not in sweep.stdout + sweep.stderr  # summaries mask the database password
    report = subprocess.run([sys.executable, "analysis/report.py", "--experiment", "utd", "--study", "secured",
                             "--out", str(tmp_path / "rep")], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]


def test_the_dashboard_never_binds_beyond_loopback(secured):
    state, _, _ = secured
    with urllib.request.urlopen(f"http://127.0.0.1:{state.dashboard_port}/api/studies", timeout=20) as resp:
        assert resp.status == 200
    with pytest.raises(urllib.error.URLError):  # another address of this machine: nothing listens there
        urllib.request.urlopen(f"http://127.0.0.2:{state.dashboard_port}/api/studies", timeout=5)


def _pg(state, host: str, sslmode: str, password: str | None = None) -> str:
    import psycopg2

    try:
        conn = psycopg2.connect(host=host, port=state.pg_port, user="dqnlab", password=password or state.password,
                                dbname="optuna", sslmode=sslmode, connect_timeout=10)  # fmt: skip
    except psycopg2.OperationalError as exc:
        return str(exc)
    tls = conn.info.ssl_in_use
    conn.close()
    return f"ok tls={tls}"


def test_postgres_admits_only_its_networks_over_tls_with_the_right_password(secured):
    state, flags, _ = secured
    # ::1 is in --allow-from: admitted over TLS only
    assert _pg(state, "::1", "require") == "ok tls=True"
    assert "no pg_hba.conf entry" in _pg(state, "::1", "disable")
    assert "password authentication failed" in _pg(state, "127.0.0.1", "require", password="wrong")
    # the same cluster brought up for another network: ::1 is now outside --allow-from
    assert _cli("down", "--root", state.root).returncode == 0
    again = _cli_for_the_fixture("up", *flags, "--allow-from", "10.9.0.0/16")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "no pg_hba.conf entry" in _pg(state, "::1", "require")
    assert _pg(state, "127.0.0.1", "require") == "ok tls=True"  # this machine itself, as before
    assert _cli("down", "--root", state.root).returncode == 0
    restored = _cli_for_the_fixture("up", *flags, "--allow-from", "::1/128")
    assert restored.returncode == 0, restored.stdout + restored.stderr


def _cli_for_the_fixture(*args: str) -> subprocess.CompletedProcess:
    """The services command, its servers owned by the module's fixture (which stops them and checks
    nothing is left), not by this test: they do not carry this test's leak-guard tag."""
    from conftest import TAG

    env = {k: v for k, v in os.environ.items() if k != TAG}
    return subprocess.run([sys.executable, "-m", "dqnlab.services", *args], capture_output=True, text=True,
                          timeout=240, cwd=REPO, env=env)  # fmt: skip


def test_secrets_stay_out_of_command_lines_logs_and_mlflow(secured):
    state, _, up_output = secured
    root = Path(state.root)
    assert stat.S_IMODE((root / "services.json").stat().st_mode) == 0o600
    for name in ("pgpass", "mlflow-auth.ini"):
        assert stat.S_IMODE((root / name).stat().st_mode) == 0o600
    secrets = [state.password, state.mlflow_admin_password, state.mlflow_worker_password, state.mlflow_secret_key]
    assert all(len(s) >= 16 for s in secrets)
    for proc in psutil.process_iter():
        try:
            cmdline = " ".join(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        assert not any(s in cmdline for s in secrets), f"a secret on the command line of pid {proc.pid}: {cmdline[:200]}"
    for log in root.glob("*.log"):
        text = log.read_text(errors="replace")
        assert not any(s in text for s in secrets), f"a secret in {log}"
    assert not any(s in up_output for s in secrets)
    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = "worker", secrets[2]
    try:
        client = MlflowClient(state.tracking_uri)
        runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    finally:
        os.environ.pop("MLFLOW_TRACKING_USERNAME")
        os.environ.pop("MLFLOW_TRACKING_PASSWORD")
    recorded = json.dumps([{**r.data.params, **r.data.tags} for r in runs])
    assert not any(s in recorded for s in secrets)
