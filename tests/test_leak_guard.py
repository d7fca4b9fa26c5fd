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
    os.environ["DQNLAB_LEAK_GRACE_S"] = "1"  # the inner guard's hang detector: the leak never ends by itself
    try:
        result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", "no:xdist")
    finally:
        del os.environ["DQNLAB_LEAK_GRACE_S"]
    result.assert_outcomes(passed=1, errors=1)  # the test body passes; the guard's teardown errors
    result.stdout.fnmatch_lines(["*processes left behind*"])


def test_a_test_that_leaves_a_dev_shm_entry_fails(pytester):
    from pathlib import Path

    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(
        test_leaky="""
import uuid
from pathlib import Path

def test_leaks():
    path = Path("/dev/shm") / f"dqnlab-test-{uuid.uuid4().hex}"
    path.write_bytes(b"x")
    Path("leaked-name").write_text(path.name)
"""
    )
    os.environ["DQNLAB_LEAK_GRACE_S"] = "1"
    try:
        result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", "no:xdist")
    finally:
        del os.environ["DQNLAB_LEAK_GRACE_S"]
        name = (pytester.path / "leaked-name").read_text()
        (Path("/dev/shm") / name).unlink(missing_ok=True)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*shared-memory entries left in /dev/shm*"])


def test_an_entry_another_live_process_holds_is_not_the_tests():
    """A parallel test or a study beside the suite may create /dev/shm entries while a test runs: one a
    live process outside the test holds (open or mapped) is theirs; once that process is ours, it is not."""
    import sys
    import uuid

    from conftest import _held_by_others

    name = f"dqnlab-test-{uuid.uuid4().hex}"
    holder = subprocess.Popen([sys.executable, "-c", f"import mmap, os, sys\nf = open('/dev/shm/{name}', 'w+b')\n"
                               "f.write(bytes(4096)); f.flush(); m = mmap.mmap(f.fileno(), 4096); f.close()\n"
                               "print('ready', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert _held_by_others({name}, {os.getpid()}) == {name}  # mapped by a process outside the test
        assert _held_by_others({name}, {os.getpid(), holder.pid}) == set()  # ... unless it is the test's own
    finally:
        holder.stdin.close()
        holder.wait()
        os.unlink(f"/dev/shm/{name}")
    assert _held_by_others({name}, {os.getpid()}) == set()
