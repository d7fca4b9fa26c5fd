"""The sweep's live display: on a terminal, rich redraws the study line and one line per running trial in
place; in a log, plain lines at most every ``plain_every_s`` and at every trial's end."""

from __future__ import annotations

import io
import re

from dqnlab.study.progress import ProgressEvent, SweepDisplay


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _feed(display: SweepDisplay) -> None:
    display.handle(ProgressEvent("start", 0, 7, label="utd=4.0", cost_s=10.0))
    display.handle(ProgressEvent("progress", 0, 7, frac=0.5, env_steps_per_s=1234.0, eval_return=42.0))
    display.handle(ProgressEvent("end", 0, 7, status="completed"))
    display.close()


def test_on_a_terminal_the_lines_are_redrawn_in_place_and_end_with_the_study_complete():
    out = _Terminal()
    display = SweepDisplay("utd-smoke", total_points=1, done_points=0, cost_left_s=10.0, stream=out)
    assert display.live
    _feed(display)
    text = out.getvalue()
    assert "\x1b[" in text  # redrawn in place (cursor moves), not appended
    assert "job 0: trial   7  50.0%    1234 env steps/s eval    42.0  utd=4.0" in text
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    last = [line for line in plain.splitlines() if line.startswith("utd-smoke [")][-1]
    assert "1/1 grid points" in last  # the last frame: the study complete


def test_in_a_log_the_lines_are_plain_and_each_trial_end_is_said():
    out = io.StringIO()
    display = SweepDisplay("utd-smoke", total_points=1, done_points=0, cost_left_s=10.0, stream=out,
                           plain_every_s=1e9)  # fmt: skip
    assert not display.live
    _feed(display)
    text = out.getvalue()
    assert "\x1b[" not in text
    assert "trial 7 completed: utd=4.0" in text and text.rstrip().splitlines()[-1].startswith("utd-smoke [")
    assert "1/1 grid points" in text.rstrip().splitlines()[-1]
