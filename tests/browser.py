"""Headless Chromium for the UI tests: a page's DOM after its scripts ran, as text, and screenshots.
Every call of one test shares a fresh profile (``profile``), as a user's browser keeps its storage."""

from __future__ import annotations

import re
import shutil
import subprocess
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


def page_text(url: str, profile: Path, expect: str, tries: int = 3) -> tuple[str, str]:
    """``(text, html)`` of a page, retried while the single-page app is still loading."""
    html = ""
    for _ in range(tries):
        html = dom(url, profile)
        if expect in text_of(html):
            break
    return text_of(html), html
