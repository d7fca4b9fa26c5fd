"""Finding 3: does collecting in parallel change what is learned at the same replay ratio?

    python sweeps/parallel.py              # serial vs 1, 2, 4 workers (strict), and 1, 2, 4 workers (free)
    python sweeps/parallel.py --preset smoke

CartPole-v1 at UTD 1, 10 seeds per cell as replicas of one trial. ``strict`` holds the UTD exactly
whatever the workers; ``free`` lets actors run and shows what an unthrottled setup does to the
realised UTD and to the return.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.report import build_report  # noqa: E402
from dqnlab.study.cli import sweep_main  # noqa: E402

COLLECTION = {
    "serial_2": {"mode": "serial", "num_workers": 2, "limiter": "strict"},
    "strict_1": {"mode": "parallel", "num_workers": 1, "limiter": "strict"},
    "strict_2": {"mode": "parallel", "num_workers": 2, "limiter": "strict"},
    "strict_4": {"mode": "parallel", "num_workers": 4, "limiter": "strict"},
    "free_1": {"mode": "parallel", "num_workers": 1, "limiter": "free"},
    "free_2": {"mode": "parallel", "num_workers": 2, "limiter": "free"},
    "free_4": {"mode": "parallel", "num_workers": 4, "limiter": "free"},
}

PRESETS = {
    "default": {
        "base": dict(env_id="CartPole-v1", total_env_steps=20_000, learning_starts=1000, eval_every_steps=1000,
                     eval_episodes=10, log_every=250, utd=1.0, target_period=500, target_unit="env_steps",
                     replicas=10),  # fmt: skip
        "grid": {"variant": list(COLLECTION)},
        "variants": COLLECTION,
        "jobs": 1,  # one trial at a time: a free run's realised UTD depends on the cores it gets
    },
    "smoke": {
        "base": dict(env_id="CartPole-v1", total_env_steps=1200, learning_starts=400, batch_size=32, probe_size=64,
                     hidden_sizes=(32, 32), log_every=100, eval_every_steps=400, eval_episodes=2, replicas=2),  # fmt: skip
        "grid": {"variant": ["serial_2", "free_2"]},
        "variants": COLLECTION,
    },
}

if __name__ == "__main__":
    sys.exit(sweep_main("parallel", PRESETS, "default", report=build_report, objective="eval"))
