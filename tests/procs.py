"""Process look-ups in /proc for tests that start subprocesses."""

from __future__ import annotations

import os
from pathlib import Path


def pids_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmd and state != "Z":
                pids.append(int(entry))
    return pids
