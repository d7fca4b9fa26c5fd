"""Where run metrics go: a small callback interface (trackers and the console plug into it).

Every hook is optional. ``on_start`` receives the run's config; ``on_log`` a replica's index and the
flat metrics dict of one record of its history (names from :mod:`dqnlab.metrics`); ``on_progress`` a
cheap heartbeat ten times a second; ``on_end`` the final :class:`~dqnlab.engine.result.RunResult` on
every exit path (completed, diverged, failed, interrupted).
"""

from __future__ import annotations

from typing import Any, Protocol


class Callback(Protocol):
    def on_start(self, config: Any) -> None: ...
    def on_log(self, replica: int, metrics: dict[str, float]) -> None: ...
    def on_progress(self, env_steps: int, updates: int, total_env_steps: int, elapsed_s: float) -> None: ...
    def on_end(self, result: Any) -> None: ...


HOOKS = ("on_start", "on_log", "on_progress", "on_end")


class CallbackList:
    """Calls each hook on every callback that defines it. A hook name outside :data:`HOOKS` raises
    AttributeError (a misspelt hook is a bug, not a silent no-op)."""

    def __init__(self, callbacks) -> None:
        self.callbacks = list(callbacks)

    def __getattr__(self, hook: str):
        if hook not in HOOKS:
            raise AttributeError(f"{hook!r} is not a callback hook; hooks: {HOOKS}")

        def call(*args, **kwargs):
            for cb in self.callbacks:
                fn = getattr(cb, hook, None)
                if fn is not None:
                    fn(*args, **kwargs)

        return call
