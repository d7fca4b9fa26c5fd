"""Where run metrics go: a small callback interface (trackers and the console plug into it).

Every hook is optional. ``on_log`` receives the flat metrics dict of one log point (names in
:data:`dqnlab.metrics.METRICS`), ``on_progress`` a cheap heartbeat about twice a second, ``on_end``
the final :class:`~dqnlab.run.RunResult` on every exit path (completed, diverged, failed,
interrupted).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol, TextIO


class Callback(Protocol):
    def on_start(self, config: Any) -> None: ...
    def on_log(self, metrics: dict[str, float]) -> None: ...
    def on_progress(self, env_steps: int, updates: int, total_env_steps: int, elapsed_s: float) -> None: ...
    def on_end(self, result: Any) -> None: ...


class CallbackList:
    """Calls each hook on every callback that defines it."""

    def __init__(self, callbacks) -> None:
        self.callbacks = list(callbacks)

    def __getattr__(self, hook: str):
        def call(*args, **kwargs):
            for cb in self.callbacks:
                fn = getattr(cb, hook, None)
                if fn is not None:
                    fn(*args, **kwargs)

        return call


class ConsoleProgress:
    """One self-overwriting progress line on a terminal (plain lines otherwise) and a summary."""

    def __init__(self, stream: TextIO | None = None, min_interval_s: float = 0.5):
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._metrics: dict[str, float] = {}
        self._tty = self.stream.isatty()

    def on_log(self, metrics: dict[str, float]) -> None:
        self._metrics = {**self._metrics, **metrics}  # keep the last eval between evaluations

    def on_progress(self, env_steps: int, updates: int, total_env_steps: int, elapsed_s: float) -> None:
        now = time.monotonic()
        # off a terminal, plain lines at most every 10 s (``--quiet`` raises the interval past any run)
        if now - self._last < (self.min_interval_s if self._tty else max(10.0, self.min_interval_s)):
            return
        self._last = now
        frac = env_steps / total_env_steps
        width = 24
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        m = self._metrics
        eta = elapsed_s / frac - elapsed_s if frac > 0 else float("nan")
        line = (
            f"[{bar}] {100 * frac:5.1f}% steps {env_steps}/{total_env_steps} upd {updates} "
            f"sps {env_steps / max(elapsed_s, 1e-9):7.0f} utd {m.get('utd_realised', float('nan')):.3f} "
            f"eval {m.get('eval_return_mean', float('nan')):6.1f} loss {m.get('td_loss', float('nan')):.3g} "
            f"eta {eta:5.0f}s"
        )
        self.stream.write(("\r" + line) if self._tty else line + "\n")
        self.stream.flush()

    def on_end(self, result: Any) -> None:
        if self._tty:
            self.stream.write("\n")
        self.stream.write(result.summary() + "\n")
        self.stream.flush()
