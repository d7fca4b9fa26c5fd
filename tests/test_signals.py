"""Signals: a sweep's worker holds Ctrl-C and SIGTERM while Optuna makes a trial RUNNING or tells its end,
and delivers them inside the trial (recorded there) or once the bookkeeping is done."""

from __future__ import annotations

import os
import signal
import time

import pytest

from dqnlab.signals import gated_interrupts


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_gate_is_closed_waits_for_the_trial_or_the_end_of_the_bookkeeping(sig):
    before = signal.getsignal(sig)
    with gated_interrupts() as gate:
        reached = []
        with pytest.raises(KeyboardInterrupt):
            with gate.closed():
                os.kill(os.getpid(), sig)  # lands in Optuna's bookkeeping: held
                reached.append("bookkeeping went on")
                with gate.opened():  # the trial starts: the held signal is raised here, inside it
                    reached.append("never")
        assert reached == ["bookkeeping went on"]
        with pytest.raises(KeyboardInterrupt):
            with gate.closed():
                with gate.opened():
                    pass
                os.kill(os.getpid(), sig)  # after the trial, while Optuna tells its state: held ...
                reached.append("told")
        assert reached[-1] == "told"  # ... and raised once the bookkeeping is done
        with pytest.raises(KeyboardInterrupt):  # open: at once
            os.kill(os.getpid(), sig)
    assert signal.getsignal(sig) is before


def test_a_signal_raised_while_the_gate_is_open_is_raised_again_by_check_if_its_raise_was_swallowed():
    """An interrupt raised inside a finalizer is only printed by CPython; the sweep calls ``check`` at points of
    its own, which raises it again. With no signal, ``check`` does nothing."""
    with gated_interrupts() as gate:
        gate.check()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs here and raises
        except KeyboardInterrupt:
            pass  # swallowed, as a finalizer's would be
        with pytest.raises(KeyboardInterrupt):
            gate.check()
