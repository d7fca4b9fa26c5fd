"""Process look-ups in /proc for tests that start subprocesses."""

from __future__ import annotations

from pathlib import Path

from dqnlab.procfs import live_pids


def pids_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``marker``."""
    pids = []
    for pid in live_pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd:
            pids.append(pid)
    return pids
