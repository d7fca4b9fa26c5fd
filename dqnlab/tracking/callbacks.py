"""Where run metrics go: a small callback interface (trackers and the console plug into it).

A callback is any object with some of the hooks ``on_start(config)``, ``on_log(replica, metrics)``,
``on_progress(env_steps, updates, total_env_steps, elapsed_s)``, ``on_end(result)``; every hook is
optional. ``on_start`` receives the run's config; ``on_log`` a replica's index and the
flat metrics dict of one record of its history (names from :mod:`dqnlab.metrics`); ``on_progress`` a
cheap heartbeat ten times a second; ``on_end`` the final :class:`~dqnlab.engine.result.RunResult` on
every exit path (completed, diverged, failed, interrupted).
"""

from __future__ import annotations

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
