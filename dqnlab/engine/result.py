"""What a run returns: :class:`RunResult` (the run) holding one :class:`ReplicaResult` per replica,
and :class:`RunFailed`."""

from __future__ import annotations

from dataclasses import dataclass, field

from dqnlab import metrics as M
from dqnlab.config import Config

SUMMARY_KEYS = [
    (M.ENV_STEPS, "{:.0f}"), (M.UPDATES, "{:.0f}"), (M.UTD_REALISED, "{:.4f}"),
    (M.ENV_STEPS_PER_S_TOTAL, "{:.0f}"), (M.UPDATES_PER_S_TOTAL, "{:.0f}"),
    (M.POLICY_LAG_RUN_MEAN, "{:.1f}"), (M.POLICY_LAG_RUN_MAX, "{:.0f}"), (M.EVAL_RETURN_MEAN, "{:.1f}"),
    (M.EVAL_RETURN_BEST, "{:.1f}"), (M.TD_LOSS, "{:.4g}"), (M.Q_MAX, "{:.2f}"), (M.SRANK, "{:.0f}"),
    (M.DORMANT_FRAC, "{:.3f}"),
]  # fmt: skip
NAIVE_KEYS = {
    "local_copies": [(M.LOST_UPDATES, "{:.0f}"), (M.LOST_UPDATE_FRAC, "{:.3f}")],
    "hogwild": [(M.RACED_WRITE_FRAC, "{:.3f}")],
    "a3c": [(M.RACED_WRITE_FRAC, "{:.3f}"), (M.STALE_GRADIENT_AGE_MEAN, "{:.1f}")],
}
"""What a naive-writers run exists to measure, added to its summary."""


@dataclass
class ReplicaResult:
    """One replica: a run of its own (``config`` has its seed and ``replicas=1``).

    ``history`` holds two kinds of records, in the order they were taken, each stamped with its own
    ``env_steps``/``updates``/``time_s``: log points (every ``log_every`` updates and at the end) and
    evaluation records (every ``eval_every_steps`` env steps and at the end; they carry the
    ``eval_*`` metrics and ``overestimation``). A diverged replica is never evaluated on non-finite
    weights and is frozen: its history ends with the log point that found the divergence."""

    replica: int
    status: str
    """completed | diverged | failed | interrupted"""
    config: Config
    history: list[dict[str, float]] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)
    """The latest value of every metric."""

    @property
    def seed(self) -> int:
        return self.config.run.seed

    def summary_line(self) -> str:
        keys = SUMMARY_KEYS + (NAIVE_KEYS.get(self.config.run.writers, []))
        parts = [f"{k}={fmt.format(self.final[k])}" for k, fmt in keys if k in self.final]
        return f"seed {self.seed} {self.status}: " + " ".join(parts)


@dataclass
class RunResult:
    """Outcome of one run of K replicas. ``status``: completed (the budget was spent; some replicas
    may have diverged) | diverged (every replica diverged, the run ended early) | failed |
    interrupted. ``history``/``final`` are the single replica's when ``replicas == 1``."""

    status: str
    config: Config
    replicas: list[ReplicaResult] = field(default_factory=list)
    error: str | None = None
    wall_s: float = 0.0

    def single(self, replica: int) -> RunResult:
        """Replica ``replica`` as a run of its own (what its tracker records)."""
        rep = self.replicas[replica]
        return RunResult(rep.status, rep.config, [rep], self.error, self.wall_s)

    def _only(self) -> ReplicaResult:
        if len(self.replicas) != 1:
            raise ValueError(f"this run has {len(self.replicas)} replicas: read result.replicas[k].history/.final")
        return self.replicas[0]

    @property
    def history(self) -> list[dict[str, float]]:
        return self._only().history

    @property
    def final(self) -> dict[str, float]:
        return self._only().final

    def summary(self) -> str:
        head = f"run {self.status} in {self.wall_s:.1f}s"
        if len(self.replicas) == 1:
            rep = self.replicas[0]
            line = head + ": " + rep.summary_line().split(": ", 1)[1]
        else:
            lines = [head + f" ({len(self.replicas)} replicas):"] + ["  " + r.summary_line() for r in self.replicas]
            line = "\n".join(lines)
        if self.error:
            line += f"\nerror: {self.error}"
        return line


class RunFailed(RuntimeError):
    """The run crashed; ``result`` holds the status ``failed`` and every metric logged before."""

    def __init__(self, message: str, result: RunResult):
        super().__init__(message)
        self.result = result
