"""Shared fixtures. ``leak_guard`` runs around every test and fails one that leaves a process or a
/dev/shm entry behind.

Two nets catch processes. Direct children of the test process (forked actors of an in-process
run) are found by parent pid. Everything a test starts through ``subprocess`` inherits a per-test
environment tag, and so do their own children (the forked actors of a sweep it started), even
after they are orphaned and adopted by init: any live process still carrying the tag is a leak.
Leaked processes are killed, so that one leak does not spill into later tests.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

pytest_plugins = ["pytester"]

TAG = "DQNLAB_TEST_TAG"


# /dev/shm entries that are not ours: the database server of tests/test_cluster.py's module-scoped
# cluster (which checks itself that they are gone once the cluster is down).
FOREIGN_SHM_PREFIXES = ("PostgreSQL.",)


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def live(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def children(pid: int) -> set[int]:
    """Live child pids of ``pid``."""
    return {c.pid for c in psutil.Process(pid).children() if live(c)}


def _tagged(tag: str) -> set[int]:
    """Live processes (other than this one) whose environment carries ``TAG=tag``."""
    out = set()
    for proc in psutil.process_iter():
        if proc.pid == os.getpid() or not live(proc):
            continue
        try:
            if proc.environ().get(TAG) == tag:
                out.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


@pytest.fixture(autouse=True)
def leak_guard():
    tag = uuid.uuid4().hex
    previous = os.environ.get(TAG)
    os.environ[TAG] = tag
    before_shm = _shm_entries()
    before_children = children(os.getpid())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TAG, None)
        else:
            os.environ[TAG] = previous
    deadline = time.monotonic() + 5.0
    while True:
        mp.active_children()  # reap finished multiprocessing children
        leaked = (children(os.getpid()) - before_children) | _tagged(tag)
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not leaked, f"processes left behind: {sorted(leaked)}"
    new_shm = {n for n in _shm_entries() - before_shm if not n.startswith(FOREIGN_SHM_PREFIXES)}
    assert not new_shm, f"shared-memory entries left in /dev/shm: {sorted(new_shm)}"


FINDING_STUDIES = ["replay_ratio", "parallel", "workers", "writers"]
"""The finding sweeps whose smoke presets :func:`finding_smokes` runs."""


@pytest.fixture(scope="session")
def finding_smokes(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Each finding sweep's smoke preset, run once per session into one results folder (the sweep tests
    check the runs, the analysis tests read them): ``(results folder, each sweep's stdout)``."""
    root = Path(__file__).resolve().parent.parent
    results = tmp_path_factory.mktemp("finding-smokes")
    stdout = {}
    for study in FINDING_STUDIES:
        res = subprocess.run([sys.executable, str(root / "sweeps" / f"{study}.py"), "--preset", "smoke", "--quiet",
                              "--no-report", "--results", str(results)], capture_output=True, text=True, timeout=300,
                             cwd=root)  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        stdout[study] = res.stdout
    return results, stdout
