"""What a study runs: the :class:`SweepSpec` (base config, grid axes, objective), its validation, the
key of a grid point, and a rough cost estimate. No I/O."""

from __future__ import annotations

import itertools
import json
import os
import sys
import typing
from dataclasses import dataclass, field
from typing import Any

from dqnlab.config import Config
from dqnlab.config_text import field_types
from dqnlab.objective import OBJECTIVES


class SweepError(ValueError):
    """A sweep argument is invalid; raised before anything is written."""


VARIANT = "variant"


@dataclass(frozen=True)
class SweepSpec:
    """What one study runs: ``base`` config fields for every trial and the ``grid`` axes.

    ``variants`` names bundles of fields that only make sense together (``{"LayerNorm": {"layer_norm":
    True}, "head reset": {"reset": "head"}}``); the grid axis ``variant`` then takes their names, and a
    point's variant sets its fields."""

    sweep: str  # MLflow experiment name (one per sweep file)
    study_name: str  # Optuna study and MLflow parent run
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    objective: str = "eval"
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)

    def points(self) -> list[dict[str, Any]]:
        axes = list(self.grid)
        return [dict(zip(axes, combo)) for combo in itertools.product(*(self.grid[a] for a in axes))]

    def swept_fields(self) -> list[str]:
        """The config fields the grid varies (a variant axis stands for the fields its bundles set)."""
        fields: list[str] = []
        for axis in self.grid:
            names = sorted({k for b in self.variants.values() for k in b}) if axis == VARIANT else [axis]
            fields += [n for n in names if n not in fields and n != "seed"]
        return fields

    def config_for(self, point: dict[str, Any]) -> Config:
        fields = {k: v for k, v in point.items() if k != VARIANT}
        bundle = self.variants.get(point.get(VARIANT), {})
        return Config.from_flat({**self.base, **bundle, **fields})


def validate_spec(spec: SweepSpec) -> None:
    """Unknown or empty axes, bad values, unknown env ids: SweepError/ConfigError, nothing written."""
    known = set(Config.field_names())
    for name, bundle in spec.variants.items():
        unknown = sorted(set(bundle) - known)
        if unknown:
            raise SweepError(f"variant {name!r}: unknown config field(s) {unknown}; allowed: {sorted(known)}")
    for axis, values in spec.grid.items():
        if axis == VARIANT:
            missing = [v for v in values if v not in spec.variants]
            if missing or not values:
                raise SweepError(f"variant: got {missing or values}; allowed: {sorted(spec.variants)}")
            continue
        if axis not in known:
            raise SweepError(f"unknown sweep axis {axis!r}; allowed: {sorted(known)}")
        if not values:
            raise SweepError(f"sweep axis {axis!r} is empty; give at least one value")
    unknown = sorted(set(spec.base) - known)
    if unknown:
        raise SweepError(f"unknown config field(s) {unknown}; allowed: {sorted(known)}")
    if spec.objective not in OBJECTIVES:
        raise SweepError(f"objective: got {spec.objective!r}; allowed: {OBJECTIVES}")
    from dqnlab.engine import inspect_env

    env_ids = set()
    for point in spec.points():
        config = spec.config_for(point)  # raises ConfigError naming the field
        env_ids.add(config.env.env_id)
        if spec.objective == "throughput" and config.run.replicas > 1:
            # K replicas share one run's processes and clock: one throughput measurement, not K seeds
            raise SweepError(f"replicas: got {config.run.replicas} in a throughput study; allowed: 1. Replicas share "
                             "one run's processes, so K of them give one throughput figure, not K: give seeds as a "
                             "grid axis (--axis seed=0,1,2) instead of --seeds")  # fmt: skip
    for env_id in env_ids:
        inspect_env(env_id)


def point_key(point: dict[str, Any]) -> str:
    return json.dumps({k: encode(v) for k, v in sorted(point.items())}, sort_keys=True)


def encode(value: Any) -> Any:
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


def decode(axis: str, value: Any) -> Any:
    """A grid value back from Optuna's categorical (tuples travel as comma-separated text)."""
    tp = field_types().get(axis)
    if isinstance(value, str) and typing.get_origin(tp) is tuple:
        element = typing.get_args(tp)[0]
        return tuple(element(x) for x in value.split(",") if x.strip())
    return value


def estimate_trial_s(config: Config) -> float:
    """Rough seconds per trial on a 2-core machine with two trials side by side: a stacked update of K
    replicas ~0.33 + 0.14 K ms in the engine (1.6x that with LayerNorm; measured with the default
    preset), an actor ~20k env steps/s, an evaluation episode ~250 steps at ~20 us, ~3 s to start
    the trial process."""
    r, k = config.run, config.run.replicas
    steps = r.total_env_steps
    per_update_s = (3.3e-4 + 1.4e-4 * k) * (1.6 if config.network.layer_norm else 1.0)
    learner = config.agent.utd * max(0, steps - r.learning_starts) * per_update_s
    actors = steps * k / (20_000.0 * config.env.num_workers)
    evals = (steps / r.eval_every_steps + 1) * k * r.eval_episodes * 250 * 2e-5 if r.eval_every_steps else 0.0
    return max(learner, actors) + evals + 3.0


def warn_cpu_budget(spec: SweepSpec, jobs: int) -> None:
    """Warn where trials running side by side will compete for cores: in a throughput study every
    process counts (its figures are the result); elsewhere the learners do (with the strict limiter at
    any UTD above ~0.05 the learner is the bottleneck and the actors mostly wait)."""
    workers = max(spec.config_for(p).env.num_workers for p in spec.points())
    cores = os.cpu_count() or 1
    if spec.objective == "throughput" and jobs * (workers + 1) > cores:
        print(f"warning: --jobs {jobs} x (num_workers {workers} + 1 learner) = {jobs * (workers + 1)} processes "
              f"on {cores} cores: they will compete and throughput figures will be lower", file=sys.stderr)  # fmt: skip
    elif jobs > cores:
        print(f"warning: --jobs {jobs} learners on {cores} cores: they will compete", file=sys.stderr)
