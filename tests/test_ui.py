"""The path a researcher takes to a study's results: ``python -m dqnlab.ui``, the home page in a fresh
browser, the experiment, the study's view. In headless Chromium (skipped without it, unless
``DQNLAB_REQUIRE_SERVICES=1``, as under ``.ci/run``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from browser import chromium, dom, page_text

from dqnlab.services.state import free_port

ROOT = Path(__file__).resolve().parent.parent
if chromium() is None and os.environ.get("DQNLAB_REQUIRE_SERVICES") == "1":
    raise RuntimeError("DQNLAB_REQUIRE_SERVICES=1 but Chromium was not found (apt-get install -y chromium)")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(chromium() is None, reason="Chromium not found")]


@pytest.fixture
def ui(tmp_path):
    """A smoke sweep's results served by ``python -m dqnlab.ui``: ``(home url, the sweep's stdout)``."""
    sweep = subprocess.run([sys.executable, str(ROOT / "sweeps" / "utd.py"), "--preset", "smoke", "--quiet",
                            "--results", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "dqnlab.ui", "--results", str(tmp_path), "--port", str(port)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(base + "/", timeout=5) as resp:
                if resp.status == 200:
                    break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise
            time.sleep(0.5)
    try:
        yield base, sweep.stdout
    finally:
        server.terminate()  # it stops the MLflow server it started (a process group of its own)
        server.wait(30)


def test_a_fresh_browser_goes_from_the_home_page_to_the_studys_runs_with_its_axes_and_results(ui, tmp_path):
    base, sweep_out = ui
    profile = tmp_path / "fresh-profile"
    home, html = page_text(base + "/", profile, expect="Recent Experiments")
    assert "Recent Experiments" in home, home[:1500]
    assert "Information about UI telemetry" not in home  # the server sends nothing; no notice
    links = dict((name, href) for href, name in re.findall(r'href="(#/experiments/\d+)"[^>]*>([^<]+)<', html))
    assert "utd" in links, links
    experiment, html = page_text(base + "/" + links["utd"], profile, expect="3 matching runs")
    title = re.search(r"<title>(.*?)</title>", html).group(1)
    assert title.startswith("Runs - Experiment"), title  # the classic runs page, not the GenAI overview
    assert "Detect Issues" not in experiment and "3 matching runs" in experiment, experiment[:1500]
    link = re.search(r"(http://127\.0\.0\.1:5000/#/experiments/\d+/runs\?\S+)", sweep_out).group(1)
    view, _ = page_text(link.replace("http://127.0.0.1:5000", base), profile, expect="2 matching runs")
    assert "2 matching runs" in view, view[:2000]  # the study's seed runs, the parent left out
    for column in ("utd", "eval/objective", "eval/eval_return_mean", "status"):
        assert column in view, column
    assert "trial 0 seed 0" in view and "trial 1 seed 0" in view
    keep = os.environ.get("DQNLAB_CI_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        dom(link.replace("http://127.0.0.1:5000", base), profile, screenshot=Path(keep) / "mlflow-ui-study-view.png")
