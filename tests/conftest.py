"""Shared fixtures. ``leak_guard`` runs around every test and fails one that leaves a process or a
/dev/shm entry behind (its own: an entry another live process holds, a parallel test's or a study's
beside the suite, is not the test's).

Two nets catch processes. Direct children of the test process (forked actors of an in-process
run) are found by parent pid. Everything a test starts through ``subprocess`` inherits a per-test
environment tag, and so do their own children (the forked actors of a sweep it started), even
after they are orphaned and adopted by init: any live process still carrying the tag is a leak.
Leaked processes are killed, so that one leak does not spill into later tests.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

pytest_plugins = ["pytester"]


def pytest_configure(config) -> None:
    """Every process of the suite (the controller and each xdist worker) holds SIGINT as a terminal's Python
    does, Python's default handler, whatever its launcher did: a shell without job control starts a
    background job with SIGINT ignored, an ignored signal is inherited by every child, and the tests that
    send SIGINT to a run (in-process or to a command they start) would find it ignored (a run started
    with SIGINT ignored keeps ignoring it, as it should: ``dqnlab.signals``). Before this, such a launch
    failed those tests in whichever worker had not yet run a test that reset the handler."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _temporary_folders_in_memory(config)


MEMORY_FS = Path("/dev/shm")


def _temporary_folders_in_memory(config) -> None:
    """The suite's temporary folders (``tmp_path``, and ``$TMPDIR`` for every command a test starts) in a
    folder of the in-memory ``/dev/shm``, unless ``--basetemp`` or ``$TMPDIR`` says where. The suite makes
    dozens of throwaway SQLite stores (each sweep's Optuna and MLflow files); on disk every commit waits
    for an fdatasync (a new MLflow store alone: ~1,100 of them, ~4 s of a smoke sweep's ~19 s on this
    machine) while in memory it returns at once. Workers inherit ``$TMPDIR`` from the controller. The
    folder is made here, before any test, so the leak guard's listing of /dev/shm has it from the start."""
    if config.option.basetemp or os.environ.get("TMPDIR") or not os.access(MEMORY_FS, os.W_OK):
        return
    root = MEMORY_FS / f"dqnlab-tests-{os.getuid()}"
    root.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = None  # tempfile reads $TMPDIR again

TAG = "DQNLAB_TEST_TAG"


LEAK_GRACE_S = float(os.environ.get("DQNLAB_LEAK_GRACE_S", "120"))
"""How long the guard lets a test's leftover processes and /dev/shm entries go on their own: a hang
detector, not a timing bound (processes stopped by a test may still be exiting; a real leak never
goes). Waited only when something is left, so it costs nothing to a clean test."""


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def live(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def children(pid: int) -> set[int]:
    """Live child pids of ``pid``."""
    return {c.pid for c in psutil.Process(pid).children() if live(c)}


def _tagged(tag: str) -> set[int]:
    """Live processes (other than this one) whose environment carries ``TAG=tag``."""
    out = set()
    for proc in psutil.process_iter():
        if proc.pid == os.getpid() or not live(proc):
            continue
        try:
            if proc.environ().get(TAG) == tag:
                out.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def _held_by_others(names: set[str], ours: set[int]) -> set[str]:
    """The /dev/shm entries among ``names`` that a live process outside ``ours`` (this test's process and
    its leftovers) maps or holds open: another process's (a parallel test, a study beside the suite)."""
    held: set[str] = set()
    for pid in psutil.pids():
        if pid in ours:
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                text = maps.read()
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:  # gone, or not ours to read
            continue
        held |= {n for n in names if f"/dev/shm/{n}" in text or f"/dev/shm/{n}" in links}
    return held


def _leftovers(tag: str, before_children: set[int], before_shm: set[str]) -> tuple[set[int], set[str]]:
    """What this test left: its live child processes and tagged processes (orphans included), and the new
    /dev/shm entries no other live process holds."""
    mp.active_children()  # reap finished multiprocessing children
    procs = (children(os.getpid()) - before_children) | _tagged(tag)
    new = _shm_entries() - before_shm
    return procs, new - _held_by_others(new, procs | {os.getpid()}) if new else set()


@pytest.fixture(autouse=True)
def leak_guard():
    """Fails a test that leaves a process or a /dev/shm entry behind. It checks what the test's own
    processes leave, not what the machine holds: entries another live process holds are not the test's."""
    tag = uuid.uuid4().hex
    previous = os.environ.get(TAG)
    os.environ[TAG] = tag
    before_shm = _shm_entries()
    before_children = children(os.getpid())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TAG, None)
        else:
            os.environ[TAG] = previous
    deadline = time.monotonic() + LEAK_GRACE_S
    while True:
        leaked, new_shm = _leftovers(tag, before_children, before_shm)
        if not (leaked or new_shm) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not leaked, f"processes left behind: {sorted(leaked)}"
    assert not new_shm, f"shared-memory entries left in /dev/shm: {sorted(new_shm)}"


MODULES_IN_ONE_WORKER = ("test_analysis.py", "test_cluster.py", "test_cluster_security.py", "test_ui.py",
                         "test_findings_page.py")
"""Test modules whose tests share a module-scoped server, sweep or computation: each runs whole in one pytest-xdist
worker, so its fixture is made once. Every other test is scheduled on its own."""


LONG_UNMARKED = ("test_verdict_stability.py",)
"""Modules of the ``-m "not slow"`` loop whose tests take ~20-40 s each (every finding re-bootstrapped)."""


def pytest_collection_modifyitems(config, items) -> None:
    """The longest work first, so that the two workers end together: the modules kept whole in one worker
    (:data:`MODULES_IN_ONE_WORKER`, minutes each; pytest-xdist also puts its largest scopes first), then the
    other ``slow`` tests (processes, servers, sweeps) and :data:`LONG_UNMARKED`, then the unit tests, which
    fill the last gaps. In file order a 35-50 s test late in the alphabet (a sweep's, a verdict's) could run
    while the other worker idled. The order changes no test: each has its own temporary folders and
    processes."""

    def weight(item) -> int:
        module = item.nodeid.split("::", 1)[0]
        if module.endswith(MODULES_IN_ONE_WORKER):
            return 0
        return 1 if item.get_closest_marker("slow") or module.endswith(LONG_UNMARKED) else 2

    items.sort(key=weight)  # stable: file order within each weight


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduling with :data:`MODULES_IN_ONE_WORKER` kept whole (its own ``loadgroup`` marks
    no longer take effect under pytest 9, which ignores the node-id suffix they rely on)."""
    if config.getvalue("dist") != "load":  # a --dist the user chose is theirs
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModulesWithFixturesWhole(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module.endswith(MODULES_IN_ONE_WORKER) else nodeid

    return ModulesWithFixturesWhole(config, log)


FINDING_STUDIES = ["replay_ratio", "parallel", "workers", "writers"]
"""The finding sweeps whose smoke presets :func:`finding_smokes` runs."""


@pytest.fixture(scope="session")
def finding_smokes(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Each finding sweep's smoke preset, run once per test session into one results folder (the sweep
    tests check the runs, the analysis tests read them): ``(results folder, each sweep's stdout)``. Under
    pytest-xdist the workers share it: the first to need it makes it under a file lock, the others read it."""
    from filelock import FileLock

    root = Path(__file__).resolve().parent.parent
    # under xdist: the session's folder, common to its workers (one test run: one uid); alone: this
    # session's own folder (the parent would be shared with every later session, which would then reuse it)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    shared = tmp_path_factory.getbasetemp().parent / f"run-{run}" if run else tmp_path_factory.getbasetemp()
    shared.mkdir(exist_ok=True)
    results, record = shared / "finding-smokes", shared / "finding-smokes.json"
    with FileLock(str(record) + ".lock"):
        if record.exists():
            return results, json.loads(record.read_text())
        results.mkdir(exist_ok=True)
        stdout = {}
        for study in FINDING_STUDIES:
            res = subprocess.run([sys.executable, str(root / "sweeps" / f"{study}.py"), "--preset", "smoke", "--quiet",
                                  "--no-report", "--results", str(results)], capture_output=True, text=True,
                                 timeout=600, cwd=root)  # fmt: skip
            assert res.returncode == 0, res.stderr[-3000:]
            stdout[study] = res.stdout
        record.write_text(json.dumps(stdout))
    return results, stdout
