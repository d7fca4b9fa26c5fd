"""The life of a forked worker process, whatever the worker does (collect, or collect and learn):
signals left to the parent, one torch thread, the parent's death noticed, the error posted to the
actor board, and an ``os._exit`` that never runs the parent's atexit hooks."""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Callable
from typing import Any

WorkerBody = Callable[[Callable[[], None]], Any]
"""``body(parent_alive)`` runs the worker until it is done and returns what must be closed (an object
with ``close()``, or None). ``parent_alive()`` raises ``SystemExit(3)`` once the parent is gone."""


def run_worker_process(worker: int, board, body: WorkerBody) -> None:
    """Entry point of a forked worker: run ``body``; on an error, post its traceback on ``board`` and
    exit 1; never return."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from dqnlab.threads import set_threads

    set_threads(1)
    parent = os.getppid()

    def parent_alive() -> None:
        if os.getppid() != parent:  # orphaned: the learner died without stopping us
            raise SystemExit(3)

    closeable = None
    exit_code = 0
    try:
        closeable = body(parent_alive)
    except SystemExit as exc:
        exit_code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        board.write_error(worker, traceback.format_exc())
        exit_code = 1
    try:
        if closeable is not None:
            closeable.close()
    finally:
        # _exit: a forked child must not run the parent's atexit hooks or flush its buffers.
        os._exit(exit_code)
