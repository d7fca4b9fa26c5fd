"""Finding 4: what a higher replay ratio does to a small DQN, and what buys it back.

    python sweeps/replay_ratio.py --preset cartpole        # UTD {0.25,1,4,16} x 4 mitigations (below)
    python sweeps/replay_ratio.py --preset acrobot         # the same on Acrobot-v1
    python sweeps/replay_ratio.py --preset target_period   # UTD {1,4} x target period {100,2000}, plain (500: cartpole)
    python sweeps/replay_ratio.py --preset sample_efficiency   # LayerNorm at UTD 4 and 16 for 25k env steps
    python sweeps/replay_ratio.py --preset smoke           # seconds (tests)

Mitigations: plain, LayerNorm, head reset, shrink-and-perturb (alpha 0.8, as SR-SPR); resets every
20,000 gradient updates (a schedule in updates, as SR-SPR's 40k at replay ratio 8): at UTD 16 every
1,250 env steps, at UTD 4 once, below that never. 10 seeds per cell as replicas of one trial;
budgets in docs/findings.md. Objective: the final greedy return (mean of the last quarter of the
evaluations).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.report import build_report  # noqa: E402
from dqnlab.study.cli import sweep_main  # noqa: E402

MITIGATIONS = {
    "plain": {"layer_norm": False, "reset": "none"},
    "layernorm": {"layer_norm": True, "reset": "none"},
    "head_reset": {"layer_norm": False, "reset": "head"},
    "shrink_perturb": {"layer_norm": False, "reset": "shrink_perturb"},
}
STUDY = dict(total_env_steps=10_000, learning_starts=1000, eval_every_steps=1000, eval_episodes=5, log_every=250,
             num_workers=2, target_period=500, replicas=10, reset_every=20_000, shrink_alpha=0.8)  # fmt: skip

PRESETS = {
    "cartpole": {
        "base": dict(STUDY, env_id="CartPole-v1"),
        "grid": {"utd": [0.25, 1.0, 4.0, 16.0], "variant": list(MITIGATIONS)},
        "variants": MITIGATIONS,
        "jobs": 2,
    },
    "acrobot": {
        "base": dict(STUDY, env_id="Acrobot-v1"),
        "grid": {"utd": [0.25, 1.0, 4.0, 16.0], "variant": list(MITIGATIONS)},
        "variants": MITIGATIONS,
        "jobs": 2,
    },
    "sample_efficiency": {  # finding 5: the best cells of the CartPole study, with a longer budget
        "base": dict(STUDY, env_id="CartPole-v1", total_env_steps=25_000, layer_norm=True, reset="none"),
        "grid": {"utd": [4.0, 16.0]},
        "jobs": 2,
    },
    # Target period 500 is the cartpole preset's plain cell (the same config and seeds): analysis reads it
    # from there. UTD 16 left out: at ~19 min per trial of 10 seeds on 2 cores it did not fit the budget.
    "target_period": {
        "base": dict(STUDY, env_id="CartPole-v1", reset="none", layer_norm=False),
        "grid": {"utd": [1.0, 4.0], "target_period": [100, 2000]},
        "jobs": 2,
    },
    "smoke": {
        "base": dict(env_id="CartPole-v1", total_env_steps=1200, learning_starts=400, batch_size=32, probe_size=64,
                     hidden_sizes=(32, 32), log_every=100, eval_every_steps=400, eval_episodes=2, num_workers=1,
                     replicas=2, reset_every=200),  # fmt: skip
        "grid": {"utd": [1.0], "variant": ["plain", "shrink_perturb"]},
        "variants": MITIGATIONS,
    },
}

if __name__ == "__main__":
    sys.exit(sweep_main("replay_ratio", PRESETS, "cartpole", report=build_report, objective="eval"))
