"""How many seeds each cell of a sweep needs, planned from a pilot study's runs before the real run.

``python sweeps/utd.py --dry-run --half-width 25 --pilot utd-pilot`` prints, beside each grid point,
the pilot's seeds there, the seeds the cell needs for a 95% CI of its IQM no wider than ``+-25``
(:func:`dqnlab.statistics.seeds_for_half_width`; a contrast of two such cells needs about twice as
many a side), and the estimated wall time of the grid at those seeds on this machine.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from dqnlab.metrics import OBJECTIVE, display_key
from dqnlab.statistics import MIN_PILOT_SEEDS, seeds_for_half_width
from dqnlab.study.spec import SweepSpec, estimate_trial_s, point_key


@dataclass(frozen=True)
class CellPlan:
    """One grid point's plan: its key, the pilot's finite objective values there, and the seeds needed
    (None where the pilot has fewer than :data:`~dqnlab.statistics.MIN_PILOT_SEEDS` finite values)."""

    key: str
    pilot_seeds: int
    seeds: int | None
    estimated_s: float | None


def cell_key(key: str) -> str:
    """A grid point's key without its seed (a pilot with a seed axis and one with replicas name a cell alike)."""
    return json.dumps({k: v for k, v in json.loads(key).items() if k != "seed"}, sort_keys=True)


def pilot_values(tracking_uri: str, experiment: str, study: str) -> dict[str, list[float]]:
    """The objective of every finished seed run of ``study`` (in the MLflow ``experiment``), by cell key; a
    seed a grid point ran twice (rerun after its record was cut short) counts once, as ``analysis.load``
    counts it: its finished run of the lowest trial number."""
    from dqnlab.tracking.mlflow_runs import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return {}
    name = display_key(OBJECTIVE)
    best: dict[tuple[str, str | None], tuple[tuple[int, int], float]] = {}  # (grid point, seed) -> (order, value)
    for run in client.search_runs([exp.experiment_id], filter_string=f"tags.`dqnlab.study` = '{study}'"):
        key, value = run.data.tags.get("grid_point"), run.data.metrics.get(name)
        if key is None or value is None or not math.isfinite(value):
            continue
        order = (int(run.info.status != "FINISHED"), int(run.data.tags.get("trial_number", -1)))
        seed = (key, run.data.params.get("seed"))
        if seed not in best or order < best[seed][0]:
            best[seed] = (order, value)
    out: dict[str, list[float]] = {}
    for (key, _), (_, value) in best.items():
        out.setdefault(cell_key(key), []).append(value)
    return out


def seed_plan(spec: SweepSpec, pilot: dict[str, list[float]], half_width: float) -> list[CellPlan]:
    """Each grid point of ``spec`` (seed axis dropped) with the seeds its cell needs for ``+-half_width``."""
    plans, seen = [], set()
    for point in spec.points():
        key = cell_key(point_key(point))
        if key in seen:
            continue
        seen.add(key)
        values = pilot.get(key, [])
        if len(values) < MIN_PILOT_SEEDS:
            plans.append(CellPlan(key, len(values), None, None))
            continue
        n = seeds_for_half_width([values], half_width)
        config = spec.config_for(point).replace(replicas=n, seed=0)
        plans.append(CellPlan(key, len(values), n, estimate_trial_s(config)))
    return plans


def format_plan(plans: list[CellPlan], half_width: float, jobs: int) -> str:
    lines = [f"seeds a cell needs for a 95% CI of its IQM within +-{half_width:g} (a contrast of two cells: ~2x a side):"]
    for p in plans:
        if p.seeds is None:
            lines.append(f"  {p.key}: pilot has {p.pilot_seeds} finite seed(s); needs >= {MIN_PILOT_SEEDS} to plan")
        else:
            lines.append(f"  {p.key}: pilot {p.pilot_seeds} seeds -> {p.seeds} seeds (~{p.estimated_s / 60:.1f} min)")
    total = sum(p.estimated_s for p in plans if p.estimated_s is not None) / jobs
    lines.append(f"estimated time at those seeds: {total / 60:.1f} min with --jobs {jobs} (rough)")
    return "\n".join(lines)
