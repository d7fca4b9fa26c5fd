"""What every finding returns, and how its numbers are written."""

from __future__ import annotations

import math
from typing import NamedTuple

from matplotlib.figure import Figure


class Finding(NamedTuple):
    """What a finding shows: its numbers as Markdown, its figure, and the file name it is saved as."""

    text: str
    figure: Figure
    filename: str


def fmt_ci(point: float, low: float, high: float, digits: int = 0) -> str:
    """``point [low, high]``; a dash where there is no value."""
    if math.isnan(point):
        return "—"
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
