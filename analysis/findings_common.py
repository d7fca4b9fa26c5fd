"""What every finding returns, and how its numbers are written."""

from __future__ import annotations

import math
from typing import NamedTuple

from matplotlib.figure import Figure


class Finding(NamedTuple):
    """What a finding shows: its numbers as Markdown, its figure, the file name it is saved as, and the
    families of contrasts its numbers hold (:class:`analysis.family.Family`, set by the page generator)."""

    text: str
    figure: Figure
    filename: str
    families: tuple = ()


def fmt_ci(point: float, low: float, high: float, digits: int = 0) -> str:
    """``point [low, high]``; a dash where there is no value."""
    if math.isnan(point):
        return "—"
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
