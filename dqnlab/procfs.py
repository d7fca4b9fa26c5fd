"""Process look-ups in Linux's /proc (the engine needs ``fork``, so Linux is assumed anyway)."""

from __future__ import annotations

import os
from pathlib import Path


def stat_fields(pid: int | str) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...); None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def live_pids() -> list[int]:
    """Every process that exists and is not a zombie."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(entry)
            if fields and fields[0] != "Z":
                out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def children(pid: int) -> set[int]:
    """Live child pids of ``pid``."""
    return {p for p in live_pids() if (f := stat_fields(p)) and int(f[1]) == pid}


def group_alive(pgid: int) -> bool:
    """Whether any live process is in process group ``pgid``."""
    return any((f := stat_fields(p)) and int(f[2]) == pgid for p in live_pids())
