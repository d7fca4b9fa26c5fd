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


def study_terms(spec: SweepSpec) -> dict[str, Any]:
    """What every trial of the study shares, whatever its grid point: the axes, the objective, and per
    variant (``""`` without a variant axis) each config field no axis sets, resolved (the variant's
    bundle and the defaults included), in the JSON form the study stores. A study keeps its terms for
    life; only its axes' values may grow (see :func:`terms_conflicts`)."""
    first = spec.points()[0]
    names = list(spec.variants) if VARIANT in spec.grid else [""]
    configs = {}
    for name in names:
        resolved = spec.config_for({**first, VARIANT: name} if name else first).to_flat()
        configs[name] = {k: encode(v) for k, v in resolved.items() if k not in spec.grid}
    return json.loads(json.dumps({"axes": sorted(spec.grid), "objective": spec.objective, "configs": configs}))


def terms_conflicts(stored: dict[str, Any], mine: dict[str, Any]) -> list[str]:
    """How ``mine`` departs from a study's ``stored`` terms, one line each ([]: the same study).
    A variant, or a field, that one side does not know (a field added to the config since) is no conflict."""
    out = []
    if stored["axes"] != mine["axes"]:
        out.append(f"axes {mine['axes']} (the study's: {stored['axes']})")
    if stored["objective"] != mine["objective"]:
        out.append(f"objective {mine['objective']!r} (the study's: {stored['objective']!r})")
    for variant in [v for v in mine["configs"] if v in stored["configs"]]:
        old, new = stored["configs"][variant], mine["configs"][variant]
        where = f"variant {variant!r}: " if variant else ""
        out += [f"{where}{k} = {new[k]!r} (the study's: {old[k]!r})" for k in new if k in old and new[k] != old[k]]
    return list(dict.fromkeys(out))


def point_from_key(key: str) -> dict[str, Any]:
    """The grid point a :func:`point_key` names."""
    return {a: decode(a, v) for a, v in json.loads(key).items()}


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
    check_seed_blocks(spec)


def check_seed_blocks(spec: SweepSpec, queued: list[dict[str, Any]] = ()) -> None:
    """A seed axis with replicas K splits each cell into blocks of seeds ``seed .. seed+K-1`` (one trial each;
    the analysis pools a cell's seeds whatever trial ran them, a cell being a config without its seed and
    replicas, as each seed's run records it): the blocks of a cell must not overlap, or a seed would count
    twice; neither within the grid nor with the ``queued`` points (those an earlier command put in the study)."""
    if "seed" not in spec.grid:
        return
    blocks: dict[str, list[tuple[int, int, str]]] = {}
    points = {point_key(p): p for p in [*queued, *spec.points()] if p.get(VARIANT, "") in ("", *spec.variants)}
    for point in points.values():
        config = spec.config_for(point)
        cell = point_key({k: v for k, v in config.to_flat().items() if k not in ("seed", "replicas")})
        shown = point_key({k: v for k, v in point.items() if k != "seed"})
        blocks.setdefault(cell, []).append((config.run.seed, config.run.seed + config.run.replicas, shown))
    for spans in blocks.values():
        spans.sort()
        for (a, end, shown), (b, _, _) in zip(spans, spans[1:]):
            if b < end:
                raise SweepError(f"seed: blocks {a}..{end - 1} and {b}.. overlap (replicas {end - a} a trial) in "
                                 f"cell {shown}; allowed: seed values at least replicas apart, e.g. "
                                 f"--axis seed={a},{a + (end - a)}")  # fmt: skip


def point_key(point: dict[str, Any]) -> str:
    return json.dumps({k: encode(v) for k, v in sorted(point.items())}, sort_keys=True)


def encode(value: Any) -> Any:
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


def decode(axis: str, value: Any) -> Any:
    """A grid value back from its key's text (tuples travel as comma-separated text)."""
    tp = field_types().get(axis)
    if isinstance(value, str) and typing.get_origin(tp) is tuple:
        element = typing.get_args(tp)[0]
        return tuple(element(x) for x in value.split(",") if x.strip())
    return value


RUN_UPDATE_S = (2.1e-4, 1.6e-10)
"""Seconds per run-update (one replica's update) in a trial's engine: a fixed part plus one per multiply-add
of the batch's forward (``batch_size`` x :func:`mlp_macs`): ~262 us at batch 64 and ~315 us at batch 128 with
the 64-64 network, the batch draws and logging in. Fitted (non-negative least squares on the relative error,
the env's steps at :data:`ENV_STEP_S`) to the committed serial studies of finding 4r
(``docs/data/replay_ratio-rerun_*``: 10 and 110 replicas, 64-64 networks, two trials side by side on this
2-core machine)."""
LAYER_NORM_COST = 1.25
"""The update's cost with LayerNorm over without (end to end, 32 replicas: ~1.2-1.35x)."""
ENV_STEP_S = {"CartPole-v1": 1e-5, "Acrobot-v1": 4e-5}
"""Seconds per step of one gymnasium env on this machine (measured: CartPole ~10-12 us, Acrobot's Python
integrator ~40-48 us); another env counts as Acrobot. A serial trial steps each replica's env in turn, for
collection and for every evaluation episode (~250 steps each)."""


def mlp_macs(hidden_sizes: tuple[int, ...], io: int = 8) -> int:
    """Multiply-adds of one sample's forward through the hidden layers, the observation and action layers
    counted as ``io`` units wide (classic control: 2-6)."""
    widths = (io, *hidden_sizes, io)
    return sum(a * b for a, b in zip(widths, widths[1:]))


def estimate_trial_s(config: Config) -> float:
    """Seconds a trial takes on this 2-core machine with two trials side by side (:data:`RUN_UPDATE_S`: a
    fitted model: 0.78-1.14x of every committed serial trial of finding 4r, ``tests/test_statistics.py``;
    fitted on 64-64 networks in serial mode only: the committed parallel-mode trials of older engines, and
    their 256-256 networks, took 0.2-8x of it). Actors in parallel mode: ~20k env steps/s a worker, beside
    the learner; ~3 s to start the trial process."""
    r, k = config.run, config.run.replicas
    steps = r.total_env_steps
    fixed, per_mac = RUN_UPDATE_S
    run_update = fixed + per_mac * config.agent.batch_size * mlp_macs(config.network.hidden_sizes)
    run_update *= LAYER_NORM_COST if config.network.layer_norm else 1.0
    learner = config.agent.utd * max(0, steps - r.learning_starts) * k * run_update
    env_step = ENV_STEP_S.get(config.env.env_id, ENV_STEP_S["Acrobot-v1"])
    evals = (steps / r.eval_every_steps + 1) * k * r.eval_episodes * 250 * env_step if r.eval_every_steps else 0.0
    if r.mode == "serial":
        return learner + steps * k * env_step + evals + 3.0
    return max(learner, steps * k / (20_000.0 * config.env.num_workers)) + evals + 3.0


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
