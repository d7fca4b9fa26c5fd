"""Shared fixtures. ``leak_guard`` fails a test that leaves a child process or a /dev/shm entry."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def _children(pid: int) -> set[int]:
    """Live (non-zombie) child pids of ``pid``, from /proc."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(entry))
    return out


@pytest.fixture
def leak_guard():
    before_shm = _shm_entries()
    before_children = _children(os.getpid())
    yield
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        leaked = _children(os.getpid()) - before_children
        if not leaked:
            break
        time.sleep(0.05)
    mp.active_children()  # reap
    assert not leaked, f"child processes left behind: {sorted(leaked)}"
    new_shm = _shm_entries() - before_shm
    assert not new_shm, f"shared-memory entries left in /dev/shm: {sorted(new_shm)}"
