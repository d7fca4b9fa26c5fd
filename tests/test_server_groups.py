"""A server's whole process group is stopped, also when its leader exited first: ``mlflow server`` runs
uvicorn as a child, which would otherwise live on and keep the port."""

from __future__ import annotations

import subprocess

import psutil

from dqnlab.services.cluster import down
from dqnlab.services.state import ServicesState
from dqnlab.tracking.ui import serve


def _live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _leader_that_leaves_a_child(pid_file) -> list[str]:
    """A 'server' whose leader exits at once and leaves a child serving (its pid written to ``pid_file``)."""
    return ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; exit 0"]


def test_serve_stops_the_child_its_server_left_when_the_leader_exited(tmp_path):
    assert serve(_leader_that_leaves_a_child(tmp_path / "child.pid")) == 0
    assert not _live(int((tmp_path / "child.pid").read_text()))


def test_services_down_stops_a_servers_group_whose_leader_already_exited(tmp_path):
    leader = subprocess.Popen(_leader_that_leaves_a_child(tmp_path / "child.pid"), start_new_session=True)
    leader.wait()
    child = int((tmp_path / "child.pid").read_text())
    assert _live(child)
    down(ServicesState(root=str(tmp_path), pids={"mlflow": leader.pid}))
    assert not _live(child)
