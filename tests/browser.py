"""Headless Chromium for the UI tests: a page's DOM after its scripts ran, as text, and screenshots.
Every call of one test shares a fresh profile (``profile``), as a user's browser keeps its storage."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
         "--window-size=2600,1000"]  # fmt: skip


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def dom(url: str, profile: Path, *, screenshot: Path | None = None) -> str:
    """The rendered DOM of ``url`` (or, with ``screenshot``, a PNG of it and an empty string)."""
    cmd = [chromium(), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000"]
    cmd += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    return subprocess.run([*cmd, url], capture_output=True, text=True, timeout=120).stdout


def text_of(html: str) -> str:
    html = re.sub(r"<script.*?</script>|<style.*?</style>", " ", html, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def page_text(url: str, profile: Path, expect: str, limit_s: float = 300) -> tuple[str, str]:
    """``(text, html)`` of a page, retried while the single-page app is still loading: it fetches from a
    server that a busy machine may answer slowly (``limit_s`` is a hang detector, not a timing bound)."""
    deadline = time.monotonic() + limit_s
    while expect not in text_of(html := dom(url, profile)) and time.monotonic() < deadline:
        time.sleep(1)
    return text_of(html), html


def screenshot(url: str, profile: Path, out: Path, min_bytes: int = 20_000, limit_s: float = 300) -> int:
    """A PNG of ``url`` at ``out``, retaken while it is near blank (under ``min_bytes``: the page still
    loading); its size in bytes. ``limit_s`` is a hang detector."""
    deadline = time.monotonic() + limit_s
    while True:
        dom(url, profile, screenshot=out)
        size = out.stat().st_size if out.exists() else 0
        if size > min_bytes or time.monotonic() > deadline:
            return size
