"""PostgreSQL for a study: Debian's server binaries, a cluster of our own under ``--root`` (run as the
``postgres`` user when we are root), the ``optuna`` and ``mlflow`` databases, Optuna's schema.

Who may log in (``pg_hba.conf``, rewritten at every ``up``): this machine over loopback, and the
networks of ``--allow-from`` (none by default), always with the scram-sha-256 password; with
``--tls`` the server offers TLS (a self-signed certificate made at ``up``) and requires it from every
network but loopback (``hostssl``)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from dqnlab.services.processes import alive
from dqnlab.services.state import DATABASES, DB_USER, LOOPBACK, PGPASS_FILE, ServiceError, ServicesState


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
    with open(data / "postgresql.conf", "a") as fh:
        fh.write("\n# dqnlab services: rewritten at every up\ninclude_if_exists = 'dqnlab.conf'\n")


def configure_postgres(state: ServicesState) -> None:
    """Addresses, port, TLS and who may log in, from ``state`` (before every start)."""
    root, user = Path(state.root), _pg_user()
    data = root / "pg"
    listen = "localhost" if state.host in LOOPBACK else state.host
    listen = "*" if listen in ("0.0.0.0", "::") else listen
    conf = [f"listen_addresses = '{listen}'", f"port = {state.pg_port}", f"unix_socket_directories = '{data}'",
            "max_connections = 200", f"ssl = {'on' if state.tls else 'off'}",
            # dynamic shared memory as files in the data folder, not in the machine's /dev/shm: a server
            # killed mid-run leaves nothing machine-wide (its next start clears pg_dynshmem/)
            "dynamic_shared_memory_type = mmap"]  # fmt: skip
    if state.tls:
        make_certificate(data, state.client_host, user)
        conf += [f"ssl_cert_file = '{data / 'server.crt'}'", f"ssl_key_file = '{data / 'server.key'}'"]
    _write(data / "dqnlab.conf", "\n".join(conf) + "\n", user)
    remote = "hostssl" if state.tls else "host"
    hba = ["# dqnlab services: rewritten at every up (python -m dqnlab.services up --allow-from ...)",
           "local all all trust", "host all all 127.0.0.1/32 scram-sha-256"]  # fmt: skip
    hba += [f"{remote} all all {cidr} scram-sha-256" for cidr in state.allow_from]
    _write(data / "pg_hba.conf", "\n".join(hba) + "\n", user)


def make_certificate(folder: Path, host: str, user: str | None) -> None:
    """A self-signed certificate for ``host`` (``server.crt``) and its key (``server.key``, 0600), once."""
    if (folder / "server.crt").exists() and (folder / "server.key").exists():
        return
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"dqnlab services {host}")])
    try:
        alt = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))])
    except ValueError:
        alt = x509.SubjectAlternativeName([x509.DNSName(host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=825)).add_extension(alt, critical=False)
            .sign(key, hashes.SHA256()))  # fmt: skip
    _write(folder / "server.key", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()).decode(), user)  # fmt: skip
    _write(folder / "server.crt", cert.public_bytes(serialization.Encoding.PEM).decode(), user)


def _write(path: Path, text: str, owner: str | None) -> None:
    """Write a private file (0600) the server's account owns."""
    path.write_text(text)
    path.chmod(0o600)
    if owner:
        shutil.chown(path, owner)


def write_pgpass(state: ServicesState) -> Path:
    """``pgpass`` (0600) with the database password, for the servers we start (``PGPASSFILE``)."""
    path = Path(state.root) / PGPASS_FILE
    _write(path, f"*:{state.pg_port}:*:{DB_USER}:{state.password}\n", None)
    return path


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
                            dbname="postgres", connect_timeout=10, sslmode="require" if state.tls else "prefer")  # fmt: skip
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


