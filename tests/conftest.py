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
import time
import uuid
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TAG = "DQNLAB_TEST_TAG"


# /dev/shm entries that are not ours: the database server of tests/test_cluster.py's module-scoped
# cluster (which checks itself that they are gone once the cluster is down).
FOREIGN_SHM_PREFIXES = ("PostgreSQL.",)


def _shm_entries(prefixes: tuple[str, ...] | None = None) -> set[str]:
    """Entries of /dev/shm; with ``prefixes``, only those; without, all but the foreign ones."""
    try:
        names = set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()
    if prefixes is not None:
        return {n for n in names if n.startswith(prefixes)}
    return {n for n in names if not n.startswith(FOREIGN_SHM_PREFIXES)}


def _proc_stat(pid: str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> set[int]:
    """Live (non-zombie) child pids of ``pid``, from /proc."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _proc_stat(entry)
            if fields and int(fields[1]) == pid and fields[0] != "Z":
                out.add(int(entry))
    return out


def _tagged(tag: str) -> set[int]:
    """Live processes (other than this one) whose environment carries ``TAG=tag``."""
    marker, out = f"{TAG}={tag}".encode(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:  # gone, or another user's process we may not read
            continue
        fields = _proc_stat(entry)
        if fields and fields[0] != "Z" and marker in environ.split(b"\0"):
            out.add(int(entry))
    return out


@pytest.fixture(autouse=True)
def leak_guard():
    tag = uuid.uuid4().hex
    previous = os.environ.get(TAG)
    os.environ[TAG] = tag
    before_shm = _shm_entries()
    before_children = _children(os.getpid())
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
        leaked = (_children(os.getpid()) - before_children) | _tagged(tag)
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not leaked, f"processes left behind: {sorted(leaked)}"
    new_shm = _shm_entries() - before_shm
    assert not new_shm, f"shared-memory entries left in /dev/shm: {sorted(new_shm)}"
