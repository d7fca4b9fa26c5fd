"""SIGTERM as Ctrl-C: a training run and a sweep stop the same clean way on either signal."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class CaughtSignal:
    """The signal :func:`interrupts_recorded` caught, if any (``signum``)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def reraise(self) -> None:
        """KeyboardInterrupt if a signal was caught: for a loop to call at a point of its own, so an interrupt
        whose first raise was swallowed (CPython drops an exception raised inside a finalizer) still stops it."""
        if self.signum is not None:
            raise KeyboardInterrupt(signal.Signals(self.signum).name)


@contextlib.contextmanager
def interrupts_recorded() -> Iterator[CaughtSignal]:
    """Inside the block, SIGTERM (and SIGINT where Python's default handler has it) raise KeyboardInterrupt
    once and are recorded on the yielded :class:`CaughtSignal`, which the caller checks again at its own
    points; a later signal is not raised (the stop it would interrupt is bounded: actors are joined, then killed).
    Only the main thread can install handlers; elsewhere nothing is caught."""
    caught = CaughtSignal()
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def handler(signum, frame):
        if caught.signum is not None:  # already stopping: a Ctrl-C in a terminal also brings the SIGTERM a sweep
            return  # forwards, and raising it again would cut the bounded stop and the run's last record short
        caught.signum = signum
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signals = [signal.SIGTERM] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT) is signal.default_int_handler else [])
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield caught
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


class InterruptGate:
    """Ctrl-C and SIGTERM, delivered as KeyboardInterrupt only where the gate is open: while it is closed
    a signal waits, and is raised when the gate opens or once the closed block ends. A sweep's worker keeps
    it closed around Optuna's bookkeeping (a trial made RUNNING, then told its state) and open inside the
    trial, where an interrupt is recorded and the trial's runs closed: no trial is left RUNNING by a
    signal that landed between the two."""

    def __init__(self) -> None:
        self.is_open = True
        self.pending: int | None = None
        self.raised = CaughtSignal()  # a signal raised while open: its raise may have been swallowed

    def handler(self, signum, frame) -> None:
        if self.is_open:
            self.raised.signum = signum
            raise KeyboardInterrupt(signal.Signals(signum).name)
        self.pending = signum

    def check(self) -> None:
        """KeyboardInterrupt if a signal was raised while the gate was open: for the sweep to call at points of
        its own, so an interrupt whose raise CPython swallowed (raised inside a finalizer or a weakref callback,
        such as SQLAlchemy's, it is only printed) still stops the sweep. Called only where no raise of it can
        have been handled already (a handled one ends the sweep)."""
        self.raised.reraise()

    def _deliver(self) -> None:
        if self.pending is not None:
            signum, self.pending = self.pending, None
            raise KeyboardInterrupt(signal.Signals(signum).name)

    @contextlib.contextmanager
    def closed(self) -> Iterator[None]:
        self.is_open = False
        try:
            yield
        finally:
            self.is_open = True
        self._deliver()

    @contextlib.contextmanager
    def opened(self) -> Iterator[None]:
        self.is_open = True
        try:
            self._deliver()
            yield
        finally:
            self.is_open = False


@contextlib.contextmanager
def gated_interrupts() -> Iterator[InterruptGate]:
    """Inside the block, Ctrl-C and SIGTERM go through an :class:`InterruptGate` (open at first). Only the
    main thread can install handlers; elsewhere the gate is returned and the signals are left alone."""
    gate = InterruptGate()
    if threading.current_thread() is not threading.main_thread():
        yield gate
        return
    previous = {s: signal.signal(s, gate.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield gate
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
