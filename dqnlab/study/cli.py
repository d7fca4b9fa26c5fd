"""The command line every ``sweeps/<study>.py`` shares: presets, ``--axis``/``--set``/``--seeds`` and
the locations flags, ``--dry-run``, the summary it prints, the exit codes (0 done, 2 bad input,
3 a store failed, 130 interrupted)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, get_origin

from dqnlab.config import ConfigError
from dqnlab.config_text import field_types, text_parser
from dqnlab.signals import interrupts_recorded
from dqnlab.study.runner import first_run_params, run_sweep
from dqnlab.study.spec import VARIANT, SweepError, SweepSpec, estimate_trial_s, point_key, validate_spec
from dqnlab.study.storage import SweepFailed, SweepLocations, locations, without_password
from dqnlab.tracking.ui import study_url


def format_summary(summary: dict[str, Any], loc: SweepLocations, spec: SweepSpec) -> str:
    lines = [f"study {spec.study_name}: {len(summary['rows'])}/{summary['grid_size']} grid points complete; "
             f"trial states {summary['states']}"]  # fmt: skip
    for r in summary["rows"]:
        lines.append(f"  trial {r['trial']:>3} {r['status']:<10} objective {r['value']:9.2f}  {r['point']}")
    running, missing = summary["states"].get("RUNNING", 0), summary["grid_size"] - len(summary["rows"])
    if missing and running:  # another sweep's, or left by a killed one whose heartbeat is not yet stale
        lines.append(f"{missing} grid point(s) not complete; {running} trial(s) RUNNING in another sweep process, or "
                     f"left by one that was killed: rerun once their heartbeat is older than --grace-s to retry them")
    if summary["cells"]:
        lines.append("cells (IQM of the objective over seeds; runs without a return are counted, not averaged):")
        for c in summary["cells"]:
            lines.append(f"  IQM {c['iqm']:9.2f}  n {c['n_finite']}/{c['n']}  {c['cell']}")
    lines.append(f"results: {loc.results}")
    experiment_id = summary.get("experiment_id")
    if loc.tracking_uri.startswith("http"):
        lines.append(f"browse runs:   {study_url(loc.tracking_uri, experiment_id, spec.study_name)}")
    else:
        lines.append(f"browse runs:   python -m dqnlab.ui --results {loc.results}   then open")
        lines.append(f"               {study_url('http://127.0.0.1:5000', experiment_id, spec.study_name)}")
    lines.append(f"browse study:  optuna-dashboard '{without_password(loc.storage)}'   (pip install -e '.[cluster]')")
    return "\n".join(lines)


def parse_assignment(text: str, flag: str) -> tuple[str, str]:
    if "=" not in text:
        raise SweepError(f"{flag}: expected NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    return name.strip(), value.strip()


def parse_field_value(name: str, text: str) -> Any:
    types_ = field_types()
    if name not in types_:
        raise SweepError(f"unknown config field or sweep axis {name!r}; allowed: {sorted(types_)}")
    kind, choices = text_parser(types_[name])
    try:
        value = kind(text)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise SweepError(f"{name}: cannot read {text!r} ({exc})") from None
    if choices and value not in choices:
        raise SweepError(f"{name}: got {value!r}; allowed: {choices}")
    return value


def parse_axis(text: str, variants: dict[str, Any] | None = None) -> tuple[str, list[Any]]:
    """``NAME=V1,V2`` (tuple fields: values separated by ``;``); ``variant=A,B`` names the preset's variants."""
    name, values = parse_assignment(text, "--axis")
    if get_origin(field_types().get(name)) is tuple:  # hidden_sizes, conv_channels, worker_step_delay_s, ...
        parts = [v for v in values.split(";") if v.strip()]
    else:
        parts = [v for v in values.split(",") if v.strip()]
    if not parts:
        raise SweepError(f"--axis {name}: no values given")
    if name == VARIANT:
        unknown = [p for p in parts if p not in (variants or {})]
        if unknown:
            raise SweepError(f"--axis variant: got {unknown}; allowed: {sorted(variants or {})}")
        return name, parts
    return name, [parse_field_value(name, p) for p in parts]


def build_parser(prog: str, presets: dict[str, Any], default_preset: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--preset", choices=sorted(presets), default=default_preset)
    p.add_argument("--env", dest="env_id", help="gymnasium id for every trial")
    p.add_argument("--total-steps", type=int, help="env steps per trial")
    p.add_argument("--seeds", type=int, help="seeds 0..N-1 as N replicas of every trial (one stacked learner); "
                   "replaces the preset's seed axis and replicas")  # fmt: skip
    p.add_argument("--axis", action="append", default=[], metavar="NAME=V1,V2",
                   help="replace or add a grid axis (hidden_sizes: 64,64;128,128)")  # fmt: skip
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="fix a config field")
    p.add_argument("--results", default="results", help="results folder (default: ./results, git-ignored)")
    p.add_argument("--storage", default=os.environ.get("DQNLAB_STORAGE"),
                   help="Optuna storage, any SQLAlchemy URL (default: $DQNLAB_STORAGE, else sqlite in --results)")
    p.add_argument("--tracking-uri", default=os.environ.get("DQNLAB_TRACKING_URI"),
                   help="MLflow tracking URI (default: $DQNLAB_TRACKING_URI, else sqlite in --results)")
    p.add_argument("--study-name", help="default: <sweep>-<preset>")
    p.add_argument("--jobs", type=int, help="trial processes side by side on this machine (default: the preset's, else 1)")
    p.add_argument("--heartbeat-s", type=int, default=10, help="Optuna heartbeat interval")
    p.add_argument("--grace-s", type=int, default=30, help="seconds without heartbeat before a trial is stale")
    p.add_argument("--dry-run", action="store_true", help="print the grid and an estimated time; run nothing")
    p.add_argument("--half-width", type=float, metavar="H", help="with --dry-run: the seeds each cell needs for a 95%% "
                   "CI of its IQM within +-H, from the runs of --pilot")  # fmt: skip
    p.add_argument("--pilot", metavar="STUDY", help="the pilot study in the same results/tracking store (default: "
                   "this study)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress lines (CI)")
    p.add_argument("--no-report", action="store_true", help="skip the analysis report at the end")
    return p


def spec_from_args(sweep: str, args: argparse.Namespace, presets: dict[str, Any], objective: str) -> SweepSpec:
    preset = presets[args.preset]
    base = dict(preset["base"])
    grid = {k: list(v) for k, v in preset["grid"].items()}
    variants = dict(preset.get("variants", {}))
    if args.env_id:
        base["env_id"] = args.env_id
    if args.total_steps:
        base["total_env_steps"] = args.total_steps
    for text in args.set:
        name, value = parse_assignment(text, "--set")
        base[name] = parse_field_value(name, value)
    for text in args.axis:
        name, values = parse_axis(text, variants)
        grid[name] = values
    if args.seeds is not None:
        if args.seeds < 1:
            raise SweepError(f"--seeds: got {args.seeds}; allowed: an int >= 1")
        if any(parse_assignment(t, "--axis")[0] == "seed" for t in args.axis):
            raise SweepError("--seeds: given with --axis seed=...; allowed: one of them (--seeds N: seeds 0..N-1 in "
                             "one trial; --set replicas=K --axis seed=0,K,...: blocks of K seeds)")  # fmt: skip
        grid.pop("seed", None)  # N seeds are N replicas of one trial per grid point
        base["seed"] = 0
        base["replicas"] = args.seeds
    fixed = {parse_assignment(t, "--set")[0] for t in args.set}
    clash = sorted(fixed & set(grid))
    if clash:
        raise SweepError(f"--set {clash[0]}: {clash[0]!r} is a grid axis of this preset; use --axis {clash[0]}=VALUE")
    for name in grid:
        base.pop(name, None)
    return SweepSpec(sweep, args.study_name or f"{sweep}-{args.preset}", base, grid, objective, variants)


def completed_points(spec: SweepSpec, loc: SweepLocations) -> set[str]:
    """The keys of the grid points the study already completed ({} before it exists), after the checks a run
    would make first (SweepError: the command changes the study's terms); reads only."""
    from optuna.trial import TrialState

    from dqnlab.study.queue import existing_study, refuse_a_changed_study

    study = existing_study(spec, loc.storage)
    if study is None:
        return set()

    def recorded_params(trial):
        from dqnlab.tracking.mlflow_runs import MlflowClient

        return first_run_params(MlflowClient(loc.tracking_uri), trial)

    refuse_a_changed_study(study, spec, recorded_params)
    return {t.user_attrs.get("grid_point") for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}


def sweep_main(sweep: str, presets: dict[str, Any], default_preset: str, objective: str, argv=None, report=None) -> int:
    """The command line of ``sweeps/<sweep>.py``; ``report(tracking_uri, experiment, study, out)`` runs at the end."""
    parser = build_parser(f"python sweeps/{sweep}.py", presets, default_preset)
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(sweep, args, presets, objective)
        validate_spec(spec)
        loc = locations(args.results, args.storage, args.tracking_uri)
    except (SweepError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.half_width is not None and (not args.dry_run or not args.half_width > 0):
        print(f"error: --half-width: got {args.half_width}; allowed: a number > 0, with --dry-run", file=sys.stderr)
        return 2
    jobs = args.jobs if args.jobs is not None else presets[args.preset].get("jobs", 1)
    points = spec.points()
    if args.dry_run:
        try:
            done = completed_points(spec, loc)
        except SweepError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        left = [p for p in points if point_key(p) not in done]
        total_s = sum(estimate_trial_s(spec.config_for(p)) for p in left) / jobs
        print(f"study {spec.study_name}: {len(points)} grid points over axes {list(spec.grid)}, "
              f"{len(points) - len(left)} of them complete in {loc.results}")  # fmt: skip
        for p in points:
            print(f"  {point_key(p)}{'  (complete)' if point_key(p) in done else ''}")
        print(f"base: {spec.base}")
        print(f"estimated time: {total_s / 60:.1f} min with --jobs {jobs} for the {len(left)} points to run (rough)")
        if args.half_width is not None:
            from dqnlab.study.plan import format_plan, pilot_values, seed_plan

            pilot = pilot_values(loc.tracking_uri, spec.sweep, args.pilot or spec.study_name)
            print(format_plan(seed_plan(spec, pilot, args.half_width), args.half_width, jobs))
        return 0
    from dqnlab.tracking.mlflow_runs import TrackingError

    try:
        with interrupts_recorded():
            summary = run_sweep(spec, loc, jobs=jobs, quiet=args.quiet, heartbeat_s=args.heartbeat_s,
                                grace_s=args.grace_s)  # fmt: skip
    except (SweepError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (TrackingError, SweepFailed) as exc:
        what = "" if isinstance(exc, SweepFailed) else "\nthe trial in progress is marked FAIL with this reason;"
        print(f"error: {exc}{what}\nrerun the same command (once the store is back) to resume the study",
              file=sys.stderr)  # fmt: skip
        return 3
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume the study", file=sys.stderr)
        return 130
    print(format_summary(summary, loc, spec))
    if report is not None and not args.no_report:
        out = report(loc.tracking_uri, spec.sweep, spec.study_name, loc.results / f"report-{spec.study_name}")
        print(f"report:        {out / 'summary.md'} (also on the parent run in MLflow, under report/)")
    return 0
