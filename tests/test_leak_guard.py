"""The leak guard itself: it must see what a test leaves behind, orphans included."""

from __future__ import annotations

import os
import subprocess
import time

from conftest import TAG, _tagged


def _wait_for(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_guard_sees_an_orphaned_grandchild_of_a_subprocess():
    tag = os.environ[TAG]  # set by the autouse guard for this test
    # sh starts sleep in the background and exits at once: sleep is orphaned and adopted by init
    subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 &"], check=True)
    assert _wait_for(lambda: len(_tagged(tag)) == 1), "the orphan was not seen"
    (pid,) = _tagged(tag)
    os.kill(pid, 9)  # clean up ourselves, so the guard passes
    assert _wait_for(lambda: not _tagged(tag))


def test_each_test_gets_its_own_tag():
    proc = subprocess.run(["sh", "-c", f"echo ${TAG}"], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == os.environ[TAG] and len(proc.stdout.strip()) == 32


def test_a_test_that_leaks_a_process_fails(pytester):
    from pathlib import Path

    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(
        test_leaky="""
import subprocess

def test_leaks():
    subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 &"], check=True)
"""
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)  # the test body passes; the guard's teardown errors
    result.stdout.fnmatch_lines(["*processes left behind*"])
