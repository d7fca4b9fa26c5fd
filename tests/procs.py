"""Process look-ups for tests that start subprocesses."""

from __future__ import annotations

import psutil


def pids_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``marker``."""
    pids = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and marker in " ".join(proc.cmdline()):
                pids.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return pids
