"""The actors of a run and their health: started as forked processes (``parallel``) or kept as
objects the learner steps itself (``serial``); stopped on every exit path; watched for death,
exceptions and hangs.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from collections.abc import Callable

from dqnlab.config import Config
from dqnlab.engine.actor import Actor, ActorBoard, actor_main
from dqnlab.engine.replay import GO, STOP, SharedReplay
from dqnlab.engine.weights import WeightBroadcast

JOIN_TIMEOUT_S = 3.0


class WorkerFailed(RuntimeError):
    """An actor died, raised or hung. ``worker`` is its id; ``traceback`` its own, when it had one."""

    def __init__(self, worker: int, reason: str, traceback: str = ""):
        self.worker, self.reason, self.traceback = worker, reason, traceback
        msg = f"worker {worker} {reason}"
        super().__init__(msg + (f"\n--- worker {worker} traceback ---\n{traceback}" if traceback else ""))


class ActorPool:
    """The run's actors. ``parallel``: one forked process each (anonymous shared memory is inherited;
    the caller guarantees the process has no other thread). ``serial``: :class:`Actor` objects that
    :meth:`step_one` steps in the learner's process, round-robin, through the same code path."""

    def __init__(self, config: Config, replay: SharedReplay, weights: WeightBroadcast, spec, board: ActorBoard,
                 worker_main: Callable[..., None] = actor_main):  # fmt: skip
        """``worker_main(worker, config, replay, weights, spec, board)`` is a forked worker's body:
        :func:`~dqnlab.engine.actor.actor_main`, or a naive setup's worker that also learns."""
        self.config, self.replay, self.weights, self.spec, self.board = config, replay, weights, spec, board
        self.worker_main = worker_main
        self.procs: list[mp.Process] = []
        self.actors: list[Actor] = []
        self.stopped = False
        self._next = 0

    @property
    def serial(self) -> bool:
        return bool(self.actors)

    def start(self) -> None:
        c = self.config
        self.board.heartbeat[:] = time.monotonic()
        if c.run.mode == "serial":
            self.actors = [
                Actor(w, c, self.replay, self.weights, self.spec, self.board, None)
                for w in range(c.env.num_workers)
            ]
            return
        ctx = mp.get_context("fork")
        for w in range(c.env.num_workers):
            p = ctx.Process(
                target=self.worker_main,
                args=(w, c, self.replay, self.weights, self.spec, self.board),
                name=f"dqnlab-actor-{w}",
                daemon=True,
            )
            p.start()
            self.procs.append(p)

    def step_one(self) -> int:
        """Serial mode: step the next actor that the limiter lets go; GO if one stepped, else the last
        code (WAIT or STOP)."""
        code = STOP
        for _ in range(len(self.actors)):
            code = self.actors[self._next].try_step()
            self._next = (self._next + 1) % len(self.actors)
            if code == GO:
                return GO
        return code

    def stop(self) -> None:
        """Ask every actor to stop, join them (SIGKILL after ``JOIN_TIMEOUT_S``), close envs. Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        self.replay.request_stop()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(1.0)
        for p in self.procs:
            if p.exitcode is not None:
                p.close()
        for actor in self.actors:
            actor.close()

    def health_check(self) -> None:
        """Raise WorkerFailed if an actor exited with an error, was killed, or stopped beating."""
        now = time.monotonic()
        timeout = self.config.run.worker_timeout_s
        for w, p in enumerate(self.procs):
            code = p.exitcode
            if code is not None and code != 0:
                if code < 0:
                    reason = f"(pid {p.pid}) was killed by {signal.Signals(-code).name}"
                else:
                    reason = f"(pid {p.pid}) exited with code {code}"
                raise WorkerFailed(w, reason, self.board.read_error(w))
            if code is None and now - self.board.heartbeat[w] > timeout:
                p.kill()
                raise WorkerFailed(w, f"(pid {p.pid}) hung: no heartbeat for {now - self.board.heartbeat[w]:.1f}s")
