"""The audit examples a user recognises (``examples/``): on the naive copies it finds exactly the updates
the example's own ledger says were overwritten; with one learner it finds none; a CleanRL-style script
gets its realised UTD."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _run(script: str, *args: str) -> str:
    res = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True,
                         timeout=600, cwd=ROOT)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return res.stdout


def test_naive_copies_the_audit_counts_exactly_the_overwritten_updates_of_the_examples_ledger(tmp_path):
    out = _run("naive_copies.py", "--workers", "3", "--steps", "1800", "--folder", str(tmp_path))
    applied, kept, lost = map(int, re.search(r"ledger: (\d+) updates applied, (\d+) held by the final parameters: "
                                             r"(\d+) lost", out).groups())  # fmt: skip
    assert int(re.search(r"audit:\s+(\d+) lost", out).group(1)) == lost == applied - kept
    assert 0.5 < lost / applied < 0.8, out  # about 1 - 1/3 with 3 copies written back in turn


def test_one_learner_loses_no_update_and_holds_the_replay_ratio(tmp_path):
    out = _run("single_learner.py", "--workers", "2", "--steps", "1600", "--folder", str(tmp_path))
    assert "lost updates: 0 (0.0%" in out and "realised UTD 1.0000" in out, out


def test_a_cleanrl_style_script_gets_its_realised_utd_and_q_signs(tmp_path):
    out = _run("cleanrl_dqn.py", "--total-timesteps", "3000", "--learning-starts", "1000", "--audit", str(tmp_path))
    assert re.search(r"realised UTD 0\.0\d+", out) and "srank_current" in out, out
