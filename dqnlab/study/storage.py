"""Where a study lives: the results folder, the Optuna storage (any SQLAlchemy URL) and the MLflow
tracking URI, validated before anything is written; Optuna's RDB storage with heartbeats; the lock
that serialises study set-up between sweep processes; recognising a storage failure."""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dqnlab.study.spec import SweepError


class SweepFailed(RuntimeError):
    """The sweep stopped part-way (a store failed, a worker process died); rerunning resumes it."""


@dataclass
class SweepLocations:
    results: Path
    storage: str
    tracking_uri: str
    artifacts: Path | None


def without_password(url: str) -> str:
    """``url`` with its password masked (for messages: they end up in terminals and CI logs)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: nothing to mask that we could find
        return url


def validate_storage_url(url: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise SweepError(f"--storage: {url!r} is not an SQLAlchemy URL ({exc}); e.g. sqlite:///results/optuna.db "
                         "or postgresql+psycopg2://user@host/db") from None  # fmt: skip
    try:
        parsed.get_dialect().import_dbapi()
    except Exception as exc:  # NoSuchModuleError, ImportError
        raise SweepError(f"--storage: no database driver for {parsed.drivername!r} ({exc}); for PostgreSQL use "
                         "postgresql+psycopg2://... after pip install -e '.[cluster]'") from None  # fmt: skip
    if parsed.drivername.startswith("sqlite") and parsed.database and parsed.database != ":memory:":
        parent = Path(parsed.database).expanduser().resolve().parent
        if parent.exists() and not os.access(parent, os.W_OK):
            raise SweepError(f"--storage: folder {parent} is not writable")


TRACKING_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")


def validate_tracking_uri(uri: str) -> None:
    scheme = uri.split(":", 1)[0].split("+", 1)[0] if ":" in uri else ""
    if scheme not in TRACKING_SCHEMES:
        raise SweepError(
            f"--tracking-uri: got {uri!r}; allowed: a database URI (sqlite:////abs/path/mlflow.db, "
            "postgresql://...) or a tracking server (http://host:port). The file store is refused by MLflow."
        )


def locations(results: str | Path, storage: str | None, tracking_uri: str | None) -> SweepLocations:
    root = Path(results).expanduser().resolve()
    loc = SweepLocations(
        results=root,
        storage=storage or f"sqlite:///{root / 'optuna.db'}",
        tracking_uri=tracking_uri or f"sqlite:///{root / 'mlflow.db'}",
        artifacts=root / "mlartifacts" if not (tracking_uri or "").startswith("http") else None,
    )
    validate_storage_url(loc.storage)
    validate_tracking_uri(loc.tracking_uri)
    return loc


def make_storage(url: str, heartbeat_s: int, grace_s: int):
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    storage = optuna.storages.RDBStorage(
        url,
        heartbeat_interval=heartbeat_s,
        grace_period=grace_s,
        heartbeat_stale_trial_callback=retry_callback(),
        engine_kwargs=engine_kwargs(url),
    )
    if url.startswith("sqlite"):
        _begin_immediate(storage.engine)
    return storage


def _begin_immediate(engine) -> None:
    """Every transaction on ``engine`` (SQLite) takes the write lock when it begins, not at its first write.
    Optuna pops a WAITING trial by reading its state, then writing RUNNING; its row lock (``FOR UPDATE``)
    is a no-op on SQLite, so two processes popping at once both read WAITING and both ran the trial (the
    second then died telling a COMPLETE trial). Begun IMMEDIATE, the second reads after the first commits.
    (SQLAlchemy's pysqlite recipe: the driver's own implicit BEGIN off, ours emitted.)"""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _driver_begins_nothing(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners: closed, so every later one has them


def readers_never_block_writers(url: str) -> None:
    """Put an SQLite store (Optuna's or MLflow's) in write-ahead-log mode, once (the mode is kept in the file).
    In SQLite's default mode a reader holding a read transaction (the MLflow UI, a notebook, an analysis
    query on a running study) keeps every writer from committing; MLflow's writes wait 5 s for the lock,
    then the trial fails ``database is locked`` (2026-12-06: a 110-seed trial lost after 15 min to a
    progress query). With the log, readers read a snapshot and never block the writer; writers still take
    turns. Not a network filesystem's file (SQLite's rule for the log). A store another process holds
    locked past 60 s keeps its mode (the next sweep sets it); one it cannot open is left to the store to report."""
    import sqlite3

    from sqlalchemy.engine import make_url

    if not url.startswith("sqlite"):
        return
    path = make_url(url).database
    if not path or path == ":memory:":
        return
    with contextlib.suppress(sqlite3.OperationalError):  # a file it cannot open: the store's own opening says so
        with contextlib.closing(sqlite3.connect(path, timeout=60)) as con:
            con.execute("PRAGMA journal_mode=WAL")


def engine_kwargs(url: str) -> dict[str, Any] | None:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}  # seconds a writer waits for the file lock
    if url.startswith("postgresql+psycopg2") or url.startswith("postgresql://"):
        return {"connect_args": {"connect_timeout": 20}, "pool_pre_ping": True}
    return None


def claims_engine_for(url: str, create: bool = False):
    """The grid-claims table's engine on the study's own database (:mod:`dqnlab.study.claims`);
    ``create`` (the set-up, under its lock) makes the table."""
    from dqnlab.study.claims import claims_engine

    return claims_engine(url, engine_kwargs(url), create)


def retry_callback():
    """Re-enqueue the point of a trial whose process stopped beating (Optuna's own callback)."""
    import optuna

    cls = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
    return cls(max_retry=3)


SETUP_LOCK_KEY = 0x64716E6C6162  # "dqnlab": the PostgreSQL advisory lock that serialises sweep set-up


@contextlib.contextmanager
def setup_lock(loc: SweepLocations):
    """Held while a sweep process creates or joins the study. On PostgreSQL it is an advisory lock in
    the study's database, so sweep processes on different machines queue for it (and a process that
    dies releases it with its connection); otherwise an flock on the results folder of this machine."""
    if not loc.storage.startswith("postgresql"):
        with open(loc.results / ".setup.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(loc.storage, poolclass=NullPool, **(engine_kwargs(loc.storage) or {}))
    try:
        conn = engine.connect()
    except Exception as exc:
        raise SweepError(f"--storage: cannot open Optuna storage {without_password(loc.storage)!r}: {exc}") from None
    try:
        conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SETUP_LOCK_KEY})
        conn.commit()
        yield
    finally:
        conn.close()  # ends the session, which releases the lock
        engine.dispose()


def storage_failure(exc: BaseException) -> BaseException | None:
    """The Optuna database error behind ``exc`` (Optuna may raise another error while handling it), or None.
    An MLflow store's failure (a TrackingError, whose causes are SQLAlchemy's too when MLflow runs on SQLite)
    is not Optuna's: None, and the trial it ended was already marked FAIL with its reason."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    from dqnlab.tracking.mlflow_runs import TrackingError

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, TrackingError):
            return None
        if isinstance(exc, SQLAlchemyError | optuna.exceptions.StorageInternalError):
            inner = exc.__cause__
            return inner if isinstance(inner, SQLAlchemyError) else exc
        exc = exc.__cause__ or exc.__context__
    return None
