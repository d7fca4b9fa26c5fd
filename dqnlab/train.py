"""Command line: ``python -m dqnlab.train --env CartPole-v1 --workers 2 --utd 1 --total-steps 50000``.

Every config field has a flag (``--field-name``, underscores as dashes); a few have short aliases.
Prints a progress line and a final summary; ``--history-json PATH`` writes the metric history (per
replica with ``--replicas K``).
"""

from __future__ import annotations

import argparse
import json
import sys

from dqnlab.config import Config, ConfigError
from dqnlab.config_text import field_docs, field_types, text_parser
from dqnlab.tracking.console import ConsoleProgress

ALIASES = {"env_id": ["--env"], "num_workers": ["--workers"], "total_env_steps": ["--total-steps"]}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dqnlab.train", description=__doc__.splitlines()[0])
    docs, types_, defaults = field_docs(), field_types(), Config().to_flat()
    for name in Config.field_names():
        kind, choices = text_parser(types_[name])
        default = defaults[name]
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        parser.add_argument(
            f"--{name.replace('_', '-')}", *ALIASES.get(name, []), dest=name, type=kind, choices=choices,
            default=None, help=f"{docs.get(name, '')} (default: {shown})",
        )  # fmt: skip
    parser.add_argument("--history-json", default=None, help="write the metric history to this JSON file")
    parser.add_argument("--quiet", action="store_true", help="no progress line, summary only")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    values = {k: v for k, v in vars(args).items() if k in Config.field_names() and v is not None}
    return Config.from_flat(values)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from dqnlab.engine import RunFailed, train

    progress = ConsoleProgress(min_interval_s=1e9 if args.quiet else 0.5)
    try:
        result = train(config, [progress])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        result = exc.result
        print(f"error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if args.history_json:
        replicas = [{"seed": r.seed, "status": r.status, "history": r.history} for r in result.replicas]
        out = {"status": result.status, "config": config.to_flat(), "replicas": replicas}
        if len(replicas) == 1:
            out["history"] = replicas[0]["history"]
        with open(args.history_json, "w") as fh:
            json.dump(out, fh)
    return {"completed": 0, "diverged": 0}.get(result.status, 1)


if __name__ == "__main__":
    sys.exit(main())
