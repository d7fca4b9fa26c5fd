"""Finding 1: are updates from different processes overwriting each other? The single learner
beside the naive setups, measured on the same env, network and replay ratio.

    python sweeps/writers.py --preset single   # the design: 10 seeds per cell as replicas
    python sweeps/writers.py --preset naive    # hogwild and local_copies, 10 seeds as 10 trials each
    python sweeps/writers.py --preset naive --axis utd=1 --study-name writers-naive-utd1   # what docs/findings.md ran,
    python sweeps/writers.py --preset naive --axis utd=4 --study-name writers-naive-utd4   # one study per UTD
    python sweeps/writers.py --preset smoke

CartPole-v1, 10,000 env steps, 2 and 4 workers, UTD 1 and 4 (the single learner also at UTD 1/4 and
1/2, to test the explanation the finding gives); target copied every 500 env steps; 20 evaluations
of 10 greedy episodes. Trials run one at a time: how often writes race depends on the cores each
worker gets.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.report import build_report  # noqa: E402
from dqnlab.study.cli import sweep_main  # noqa: E402

BASE = dict(env_id="CartPole-v1", total_env_steps=10_000, learning_starts=1000, eval_every_steps=500, eval_episodes=10,
            log_every=250, target_period=500, target_unit="env_steps")  # fmt: skip
# the target period in env steps: a lower UTD (the single learner at 1/N) keeps the same copies per env step

PRESETS = {
    # UTD 1/4 and 1/2 test finding 1's explanation: local copies of N workers at UTD 1 keep ~1/N of their
    # updates, so they should score like the single learner at UTD 1/N
    "single": {
        "base": dict(BASE, writers="single", replicas=10),
        "grid": {"num_workers": [2, 4], "utd": [0.25, 0.5, 1.0, 4.0]},
        "jobs": 1,
    },
    "naive": {
        "base": dict(BASE, replicas=1),
        "grid": {"writers": ["hogwild", "local_copies", "a3c"], "num_workers": [2, 4], "utd": [1.0, 4.0],
                 "seed": list(range(10))},  # fmt: skip
        "jobs": 1,
    },
    "smoke": {
        "base": dict(env_id="CartPole-v1", total_env_steps=1200, learning_starts=400, batch_size=32,
                     probe_size=64, hidden_sizes=(32, 32), log_every=100, eval_every_steps=400, eval_episodes=2,
                     num_workers=2),  # fmt: skip
        "grid": {"writers": ["single", "local_copies"]},
    },
}

if __name__ == "__main__":
    sys.exit(sweep_main("writers", PRESETS, "naive", report=build_report, objective="eval"))
