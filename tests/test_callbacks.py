"""The callback interface: known hooks reach every callback that has them; a misspelt hook raises."""

import pytest

from dqnlab.tracking.callbacks import HOOKS, CallbackList


def test_hooks_reach_the_callbacks_that_define_them_and_a_misspelt_hook_raises():
    seen = []

    class Logs:
        def on_log(self, replica, metrics):
            seen.append(metrics)

    class Nothing:
        pass

    callbacks = CallbackList([Logs(), Nothing()])
    callbacks.on_log(0, {"td_loss": 1.0})
    callbacks.on_end(None)  # a hook no callback defines: nothing happens
    assert seen == [{"td_loss": 1.0}]
    assert set(HOOKS) == {"on_start", "on_log", "on_progress", "on_end"}
    with pytest.raises(AttributeError, match="not a callback hook"):
        callbacks.on_logg(0, {"td_loss": 1.0})
