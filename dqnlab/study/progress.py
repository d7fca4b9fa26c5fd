"""The sweep's one live display: a line for the study (grid points complete, elapsed, ETA) and a line
per running trial (its grid point, progress, env steps/s, last greedy return), however many trial
processes (``--jobs N``) feed it. On a terminal the lines are redrawn in place by rich's live display;
elsewhere (a log file, CI) they are printed as plain lines at most every ``plain_every_s`` seconds and
whenever a trial ends. It only prints: the trial processes send it events (:class:`ProgressEvent`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class ProgressEvent:
    """What a trial process tells the display. ``kind``: ``start`` (``label`` set), ``progress``
    (``frac``, ``env_steps_per_s``, ``eval_return`` set), ``end`` (``status`` set)."""

    kind: str
    job: int
    trial: int
    label: str = ""
    frac: float = 0.0
    env_steps_per_s: float = float("nan")
    eval_return: float = float("nan")
    status: str = ""
    cost_s: float = 0.0
    """The trial's estimated cost (``start``): the study's ETA weighs what is left by it."""


@dataclass
class _Trial:
    trial: int
    label: str
    cost_s: float
    frac: float = 0.0
    env_steps_per_s: float = float("nan")
    eval_return: float = float("nan")


@dataclass
class SweepDisplay:
    """Renders the study line and the running trials' lines; ``live`` (default: the stream is a
    terminal) redraws in place."""

    study: str
    total_points: int
    done_points: int
    cost_left_s: float
    """Estimated seconds of the points not yet complete (:func:`dqnlab.study.spec.estimate_trial_s`)."""
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    live: bool | None = None
    plain_every_s: float = 30.0
    started: float = field(default_factory=time.monotonic)
    running: dict[int, _Trial] = field(default_factory=dict)
    _live: object = None
    """rich's live display, on a terminal, from the first draw to :meth:`close`."""
    _last_plain: float = 0.0
    _cost_done_s: float = 0.0

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = self.stream.isatty()

    def handle(self, event: ProgressEvent) -> None:
        if event.kind == "start":
            self.running[event.job] = _Trial(event.trial, event.label, event.cost_s)
        elif event.kind == "progress" and event.job in self.running:
            t = self.running[event.job]
            t.frac, t.env_steps_per_s = event.frac, event.env_steps_per_s
            if event.eval_return == event.eval_return:  # not NaN: keep the last evaluation
                t.eval_return = event.eval_return
        elif event.kind == "end":
            t = self.running.pop(event.job, None)
            if event.status in ("completed", "diverged"):
                self.done_points += 1
                self._cost_done_s += t.cost_s if t else 0.0
            if not self.live:
                label = t.label if t else f"trial {event.trial}"
                self.stream.write(f"trial {event.trial} {event.status}: {label}\n")
        self.draw(force=event.kind != "progress")

    def lines(self) -> list[str]:
        elapsed = time.monotonic() - self.started
        left = max(self.cost_left_s - self._cost_done_s - sum(t.frac * t.cost_s for t in self.running.values()), 0.0)
        spent = self._cost_done_s + sum(t.frac * t.cost_s for t in self.running.values())
        eta = f"{elapsed / spent * left:6.0f}s" if spent > 0 else "     ?"
        width = 24
        bar = "#" * (width * self.done_points // max(self.total_points, 1))
        out = [f"{self.study} [{bar:<{width}}] {self.done_points}/{self.total_points} grid points, "
               f"elapsed {elapsed:6.0f}s, eta {eta}"]  # fmt: skip
        for job in sorted(self.running):
            t = self.running[job]
            ret = "" if t.eval_return != t.eval_return else f" eval {t.eval_return:7.1f}"
            sps = "" if t.env_steps_per_s != t.env_steps_per_s else f" {t.env_steps_per_s:7.0f} env steps/s"
            out.append(f"  job {job}: trial {t.trial:>3} {100 * t.frac:5.1f}%{sps}{ret}  {t.label}")
        return out

    def draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.live:
            if force or now - self._last_plain >= self.plain_every_s:
                self._last_plain = now
                self.stream.write("\n".join(self.lines()) + "\n")
                self.stream.flush()
            return
        from rich.text import Text

        text = Text("\n".join(self.lines()))
        if self._live is None:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(text, console=Console(file=self.stream, force_terminal=True), auto_refresh=False,
                              transient=False)  # fmt: skip
            self._live.start()
        self._live.update(text, refresh=True)

    def close(self) -> None:
        self.draw(force=True)
        if self._live is not None:
            self._live.stop()
            self._live = None
