"""The console: one progress line (self-overwriting on a terminal, plain lines every 10 s elsewhere)
and the run's summary at the end. An engine callback; it only prints."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from dqnlab.metrics import EVAL_RETURN_MEAN, TD_LOSS, UTD_REALISED


class ConsoleProgress:
    """One self-overwriting progress line on a terminal (plain lines otherwise) and a summary."""

    def __init__(self, stream: TextIO | None = None, min_interval_s: float = 0.5):
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._metrics: dict[int, dict[str, float]] = {}
        self._tty = self.stream.isatty()

    def on_log(self, replica: int, metrics: dict[str, float]) -> None:
        self._metrics[replica] = {**self._metrics.get(replica, {}), **metrics}  # keep the last eval

    def _mean(self, name: str) -> float:
        """``name`` averaged over the replicas that reported it (the line shows the run, not a seed)."""
        values = [m[name] for m in self._metrics.values() if name in m]
        return sum(values) / len(values) if values else float("nan")

    def on_progress(self, env_steps: int, updates: int, total_env_steps: int, elapsed_s: float) -> None:
        now = time.monotonic()
        # off a terminal, plain lines at most every 10 s (``--quiet`` raises the interval past any run)
        if now - self._last < (self.min_interval_s if self._tty else max(10.0, self.min_interval_s)):
            return
        self._last = now
        frac = env_steps / total_env_steps
        width = 24
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        eta = elapsed_s / frac - elapsed_s if frac > 0 else float("nan")
        line = (
            f"[{bar}] {100 * frac:5.1f}% steps {env_steps}/{total_env_steps} upd {updates} "
            f"sps {env_steps / max(elapsed_s, 1e-9):7.0f} utd {self._mean(UTD_REALISED):.3f} "
            f"eval {self._mean(EVAL_RETURN_MEAN):6.1f} loss {self._mean(TD_LOSS):.3g} "
            f"eta {eta:5.0f}s"
        )
        self.stream.write(("\r" + line) if self._tty else line + "\n")
        self.stream.flush()

    def on_end(self, result: Any) -> None:
        if self._tty:
            self.stream.write("\n")
        self.stream.write(result.summary() + "\n")
        self.stream.flush()
