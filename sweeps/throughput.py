"""Throughput study: env steps/s, updates/s, realised UTD and policy lag vs workers, envs per worker,
UTD and limiter mode (and learner device where CUDA exists). Trials run one at a time.

    python sweeps/throughput.py [--preset smoke|default] [--dry-run]

Objective: env steps/s over the whole run.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from analysis.report import build_report  # noqa: E402
from dqnlab.study.cli import sweep_main  # noqa: E402

DEVICES = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]

PRESETS = {
    "smoke": {
        "base": dict(
            env_id="CartPole-v1",
            total_env_steps=2000,
            learning_starts=500,
            batch_size=32,
            probe_size=64,
            hidden_sizes=(32, 32),
            log_every=100,
            eval_every_steps=0,
        ),  # fmt: skip
        "grid": {
            "num_workers": [1, 2],
            "envs_per_worker": [1],
            "utd": [0.25],
            "limiter": ["strict", "free"],
            "device": DEVICES[:1],
            "seed": [0],
        },  # fmt: skip
    },
    "default": {
        "base": dict(
            env_id="CartPole-v1", total_env_steps=12_000, learning_starts=1000, log_every=250, eval_every_steps=0
        ),  # fmt: skip
        "grid": {
            "num_workers": [1, 2, 4],
            "envs_per_worker": [1, 8],
            "utd": [0.25, 1.0],
            "limiter": ["strict", "free"],
            "device": DEVICES,
            "seed": [0],
        },  # fmt: skip
    },
}

if __name__ == "__main__":
    sys.exit(sweep_main("throughput", PRESETS, "default", report=build_report, objective="throughput"))
