"""Replay-ratio study: what does a higher UTD do, once the target's copy rate no longer moves with it?

    python sweeps/utd.py                  # default: UTD {0.25, 1, 4} x target period unit, 8 seeds a cell
    python sweeps/utd.py --preset smoke   # CI, about a minute
    python sweeps/utd.py --preset full    # hours: the real study
    python sweeps/utd.py --dry-run --axis utd=1,4,16 --seeds 3

Objective: mean greedy eval return over the last quarter of each run's evaluations.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.report import build_report  # noqa: E402
from dqnlab.study.cli import sweep_main  # noqa: E402

PRESETS = {
    "smoke": {
        "base": dict(
            env_id="CartPole-v1",
            total_env_steps=1500,
            learning_starts=500,
            batch_size=32,
            probe_size=64,
            hidden_sizes=(32, 32),
            log_every=100,
            eval_every_steps=500,
            eval_episodes=2,
            num_workers=1,
            target_period=100,
        ),  # fmt: skip
        "grid": {"utd": [1.0, 4.0], "layer_norm": [False], "reset": ["none"], "seed": [0]},
    },
    "default": {
        "base": dict(
            env_id="CartPole-v1",
            total_env_steps=20_000,
            learning_starts=1000,
            eval_every_steps=2000,
            eval_episodes=5,
            log_every=250,
            num_workers=2,
            mode="serial",  # the two actors stepped in turn: a cell's seeds depend on their seeds alone (a rerun
            # gives the same numbers; no sitting effect shared by a trial's replicas) and it is ~12% faster here
            target_period=500,
            reset="none",
            replicas=8,  # 8 seeds per trial, one stacked learner
        ),  # fmt: skip
        # the question the findings answer: what does the replay ratio do once the target's copy rate is held?
        # A period of 500 counted in updates copies the target `utd` times as often per env step; counted in
        # env steps it copies at one rate at every UTD (docs/findings.md, finding 4)
        "grid": {"utd": [0.25, 1.0, 4.0], "target_unit": ["updates", "env_steps"]},
        "jobs": 2,  # two trials side by side: each learner is the bottleneck of its trial and takes a core
    },
    "full": {
        "base": dict(
            env_id="CartPole-v1",
            total_env_steps=100_000,
            learning_starts=2000,
            eval_every_steps=5000,
            eval_episodes=10,
            log_every=500,
            replicas=10,
        ),  # fmt: skip
        "grid": {
            "num_workers": [1, 2, 4],
            "utd": [0.25, 1.0, 4.0, 16.0],
            "target_period": [100, 500, 2000],
            "layer_norm": [False, True],
            "reset": ["none", "head", "shrink_perturb"],
        },
        "jobs": 2,
    },
}

if __name__ == "__main__":
    sys.exit(sweep_main("utd", PRESETS, "default", report=build_report, objective="eval"))
