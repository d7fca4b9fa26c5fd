"""Finding 4: what a higher replay ratio does to a small DQN, separated from what it drags along.

    python sweeps/replay_ratio.py --preset cartpole        # UTD x target unit x {plain, LayerNorm, head reset}
    python sweeps/replay_ratio.py --preset acrobot         # the same on Acrobot-v1
    python sweeps/replay_ratio.py --preset target_period   # finding 4b: target period (env steps) x UTD, plain
    python sweeps/replay_ratio.py --preset polyak          # finding 4d: UTD x tau per update or per env step, plain
    python sweeps/replay_ratio.py --preset polyak_acrobot  # the same on Acrobot-v1
    python sweeps/replay_ratio.py --preset rerun_cartpole  # finding 4's primary contrasts at power (also
                                                           # rerun_default, rerun_acrobot, rerun_lr_check)
    python sweeps/replay_ratio.py --preset rerun_cartpole --axis utd=0.25,1 \
        --study-name replay_ratio-rerun_cartpole-utd0.25_1  # ... or in two parts, the cheap cells first
        # (then --axis utd=4 --study-name replay_ratio-rerun_cartpole-utd4; finding 4r reads the parts together)
    python sweeps/replay_ratio.py --preset rerun_acrobot --axis utd=4 --set replicas=34 \
        --axis seed=0 --study-name replay_ratio-rerun_acrobot-utd4-seeds0 --jobs 2
        # ~75 min: one block of 34 seeds of both cells (two trials side by side), a part of its own, exported
        # when it ends; then seed=34 as -seeds34, ..., 136 (~6 h in all). A results folder does not outlive
        # its machine: a part sized to one sitting is never lost half run
    python sweeps/replay_ratio.py --preset smoke           # seconds (tests)

Raising the replay ratio (UTD) with the target period fixed in gradient updates also copies the
target ``utd`` times more often per env step, and resets on an update schedule fire more often: two
things change at once. So the grid crosses UTD {0.25, 1, 4, 16} with the unit the target period is
counted in (``target_unit``: ``updates`` or ``env_steps``; the same period, so both agree at UTD 1)
and three variants: plain DQN, LayerNorm, and a head reset every 5,000 env steps with no reset
after 80% of the budget (BBF's ``no_resets_after``; so every UTD gets the same resets and no final
evaluation lands just after one). 10 seeds per cell as replicas of one trial.

Base settings: each env's RL Baselines3 Zoo DQN hyperparameters (``hyperparams/dqn.yml``; Huber loss,
gradient clip 10, no double DQN) with SB3's effective target period (CartPole: 256 env steps, finding
0's ``rlzoo_bursts``) and one departure, a 64-64 network instead of 256-256 (finding 0's
``rlzoo_bursts_64`` measures it), which makes an update ~4x cheaper. Budget: 20,000 env steps, what
UTD 16 affords here (300,000 updates of 10 replicas a trial, ~25 min on this 2-core machine); the
base at UTD 0.5 is still learning there (finding 0), so the study asks what a higher UTD does to a
learning agent within a fixed budget, not to a converged one. Evaluations every 1,000 env steps, 10
greedy episodes each; the area under the curve is reported beside the final return.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.report import build_report  # noqa: E402
from dqnlab.study.cli import sweep_main  # noqa: E402

BUDGET = 20_000
VARIANTS = {
    "plain": {"layer_norm": False, "reset": "none"},
    "layernorm": {"layer_norm": True, "reset": "none"},
    "head_reset": {"layer_norm": False, "reset": "head", "reset_every": 5000, "reset_unit": "env_steps",
                   "no_resets_after_steps": int(0.8 * BUDGET)},  # fmt: skip
}
STUDY = dict(total_env_steps=BUDGET, eval_every_steps=1000, eval_episodes=10, log_every=250, num_workers=1,
             envs_per_worker=1, hidden_sizes=(64, 64), loss="huber", max_grad_norm=10.0, double_dqn=False,
             gamma=0.99, target_update="hard", replicas=10)  # fmt: skip
# RL Zoo hyperparams/dqn.yml (train_freq x gradient_steps as a mean UTD; learning starts >= the probe batch)
# CartPole: SB3 copies its target every 10 env steps of collection but trains in bursts of 128 updates against
# one target: its effective period is 128 updates = 256 env steps at its UTD 0.5 (finding 0); 256 here, in either unit
CARTPOLE = dict(STUDY, env_id="CartPole-v1", lr=2.3e-3, batch_size=64, buffer_capacity=100_000, learning_starts=1000,
                target_period=256, epsilon_start=1.0, epsilon_end=0.04, epsilon_decay_steps=8000)  # fmt: skip
ACROBOT = dict(STUDY, env_id="Acrobot-v1", lr=6.3e-4, batch_size=128, buffer_capacity=50_000, learning_starts=1000,
               target_period=250, epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=12_000)  # fmt: skip
GRID = {"utd": [0.25, 1.0, 4.0, 16.0], "target_unit": ["updates", "env_steps"], "variant": list(VARIANTS)}
POLYAK_GRID = {"utd": GRID["utd"], "target_unit": GRID["target_unit"]}


def polyak_of(base: dict) -> dict:
    """``base`` (plain DQN) with a Polyak target whose mean lag is its hard period C's: tau = 2 / (C + 1)."""
    return dict(base, target_update="polyak", tau=round(2 / (base["target_period"] + 1), 6), layer_norm=False,
                reset="none")  # fmt: skip


# The rerun of finding 4's primary contrasts, declared on 2026-12-06 before any of its data (docs/findings/
# replay_ratio.md, "Power for the rerun"): plain DQN, UTD {0.25, 1, 4} x target unit, each UTD against its
# neighbours, final return and AUC. Serial mode: a cell's seeds are a function of their seeds alone, so an
# identical cell reproduces exactly and no sitting effect is shared by a trial's replicas
# (tests/test_replicas.py). Budgets where the best cell converges or plateaus; seeds a cell from the power
# table (the largest need among the primary contrasts for a 95% CI half-width of 25 return).
RERUN = dict(mode="serial", layer_norm=False, reset="none")
RERUN_GRID = {"utd": [0.25, 1.0, 4.0], "target_unit": ["updates", "env_steps"]}
DEFAULT_BASE = dict(env_id="CartPole-v1", learning_starts=1000, target_period=500, target_unit="env_steps",
                    eval_episodes=10, log_every=250, num_workers=1, envs_per_worker=1)  # finding 1's: Config's own
RERUNS = {
    "rerun_cartpole": dict(CARTPOLE, total_env_steps=50_000, eval_every_steps=2500, replicas=110),
    "rerun_default": dict(DEFAULT_BASE, total_env_steps=50_000, eval_every_steps=2500, replicas=110),  # no pilot
    "rerun_acrobot": dict(ACROBOT, total_env_steps=100_000, eval_every_steps=5000, replicas=170),
    # declared 2026-12-07 before its data: at 50k env steps the RL Zoo base's best cell was still rising
    "rerun_cartpole_100k": dict(CARTPOLE, total_env_steps=100_000, eval_every_steps=5000, replicas=232),
    # declared 2026-12-07 before its data: at 50k env steps the default base's best cell was still moving, and
    # the RL Zoo base's UTD 1 minus 0.25 (target in updates) flipped sign between 50k and 100k
    "rerun_default_100k": dict(DEFAULT_BASE, total_env_steps=100_000, eval_every_steps=5000, replicas=217),
}
"""Seeds: CartPole's primary contrasts need 40-110 a cell at +-25 (its power table), Acrobot's 117-170; the
default base has no pilot at 50k and takes CartPole's largest. The RL Zoo base at 100k env steps takes the
50k rerun as its pilot: its primary contrasts need 162-232 a cell (``seeds_for_half_width`` of each
contrast's two cells at +-25), so 232; the default base at 100k its 50k rerun: 93-217, so 217."""

PRESETS = {
    "cartpole": {"base": CARTPOLE, "grid": GRID, "variants": VARIANTS, "jobs": 2},
    "acrobot": {"base": ACROBOT, "grid": GRID, "variants": VARIANTS, "jobs": 2},
    # finding 4b: does a shorter target period diverge more often at a higher UTD? Plain DQN, periods in env
    # steps around the base's 256 (its cells at period 256 are the cartpole preset's plain env-step cells)
    "target_period": {"base": dict(CARTPOLE, target_unit="env_steps", layer_norm=False, reset="none"),
                      "grid": {"utd": [1.0, 4.0], "target_period": [16, 64, 256, 1024]}, "jobs": 2},
    # van Hasselt et al. 2018 saw more soft divergence with stronger prioritization: plain DQN at UTD {1, 4, 16},
    # uniform vs prioritized replay (alpha 0.6, beta 0.4 -> 1), target period in env steps
    "prioritized": {"base": dict(CARTPOLE, target_unit="env_steps", layer_norm=False, reset="none"),
                    "grid": {"utd": [1.0, 4.0, 16.0], "replay": ["uniform", "prioritized"]}, "jobs": 2},
    # finding 4d: the same question with a Polyak target: plain DQN, tau per update or per env step (near-identical
    # at UTD 1), tau matched to the hard period C's mean target lag, (1 - tau) / tau = (C - 1) / 2 target units
    "polyak": {"base": polyak_of(CARTPOLE), "grid": POLYAK_GRID, "jobs": 2},
    "polyak_acrobot": {"base": polyak_of(ACROBOT), "grid": POLYAK_GRID, "jobs": 2},
    **{name: {"base": dict(base, **RERUN), "grid": RERUN_GRID, "jobs": 1} for name, base in RERUNS.items()},
    # is a UTD effect a step-size effect? 3 learning rates per UTD on tuning seeds (1000-1009: never a verdict's)
    "rerun_lr_check": {"base": dict(RERUNS["rerun_cartpole"], mode="serial", layer_norm=False, reset="none",
                                    target_unit="env_steps", replicas=10, seed=1000),
                       "grid": {"utd": [0.25, 1.0, 4.0], "lr": [1.15e-3, 2.3e-3, 4.6e-3]}, "jobs": 1},
    "smoke": {
        "base": dict(CARTPOLE, total_env_steps=1200, learning_starts=400, batch_size=32, probe_size=64,
                     hidden_sizes=(32, 32), log_every=100, eval_every_steps=400, eval_episodes=2, replicas=2),  # fmt: skip
        "grid": {"utd": [1.0], "target_unit": ["updates", "env_steps"], "variant": ["plain", "head_reset"]},
        "variants": {**VARIANTS, "head_reset": dict(VARIANTS["head_reset"], reset_every=300,
                                                    no_resets_after_steps=1000)},  # fmt: skip
    },
}

if __name__ == "__main__":
    sys.exit(sweep_main("replay_ratio", PRESETS, "cartpole", report=build_report, objective="eval"))
