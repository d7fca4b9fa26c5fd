"""What a run returns: :class:`RunResult` (status, history, final values) and :class:`RunFailed`."""

from __future__ import annotations

from dataclasses import dataclass, field

from dqnlab import metrics as M
from dqnlab.config import Config


class RunFailed(RuntimeError):
    """The run crashed; ``result`` holds the status ``failed`` and every metric logged before."""

    def __init__(self, message: str, result: RunResult):
        super().__init__(message)
        self.result = result


@dataclass
class RunResult:
    """Outcome of one run. ``status``: completed | diverged | failed | interrupted.

    ``history`` holds two kinds of records, in the order they were taken, each stamped with its own
    ``env_steps``/``updates``/``time_s``: log points (every ``log_every`` updates and at the end) and
    evaluation records (every ``eval_every_steps`` env steps and at the end; they carry the
    ``eval_*`` metrics and ``overestimation``). A diverged run is never evaluated on non-finite
    weights, so its evaluations are those taken before divergence."""

    status: str
    config: Config
    history: list[dict[str, float]] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    wall_s: float = 0.0

    def summary(self) -> str:
        f = self.final
        keys = [
            (M.ENV_STEPS, "{:.0f}"), (M.UPDATES, "{:.0f}"), (M.UTD_REALISED, "{:.4f}"),
            (M.ENV_STEPS_PER_S_TOTAL, "{:.0f}"), (M.UPDATES_PER_S_TOTAL, "{:.0f}"),
            (M.POLICY_LAG_RUN_MEAN, "{:.1f}"), (M.POLICY_LAG_RUN_MAX, "{:.0f}"), (M.EVAL_RETURN_MEAN, "{:.1f}"),
            (M.EVAL_RETURN_BEST, "{:.1f}"), (M.TD_LOSS, "{:.4g}"), (M.Q_MAX, "{:.2f}"), (M.SRANK, "{:.0f}"),
            (M.DORMANT_FRAC, "{:.3f}"),
        ]  # fmt: skip
        parts = [f"{k}={fmt.format(f[k])}" for k, fmt in keys if k in f]
        line = f"run {self.status} in {self.wall_s:.1f}s: " + " ".join(parts)
        if self.error:
            line += f"\nerror: {self.error}"
        return line


