"""Calibration: dqnlab at two published DQN baselines' own settings, on CartPole-v1, 10 seeds each.

    python sweeps/calibration.py --preset cleanrl         # CleanRL dqn.py: MSE loss, 500k env steps (~5 min)
    python sweeps/calibration.py --preset cleanrl_huber   # the same with the Huber loss (it diverges)
    python sweeps/calibration.py --preset rlzoo           # RL Baselines3 Zoo hyperparams/dqn.yml, ported literally
    python sweeps/calibration.py --preset rlzoo_bursts    # the same with SB3's effective target period
    python sweeps/calibration.py --preset rlzoo_bursts_64 # ... and a 64-64 network
    python sweeps/calibration.py --preset rlzoo_acrobot   # RL Zoo's DQN on Acrobot-v1 (finding 4's Acrobot base)
    python sweeps/calibration.py --preset smoke

A study departs from a calibrated baseline, never from an unchecked one. Each preset copies the
publication's settings (below, with where they come from) into dqnlab's config; where dqnlab cannot
copy one exactly the line says so. Each run reports the return as the publication reports it
(training episodes under the epsilon-greedy policy: ``train_return_last10`` and
``train_return_last100``) beside greedy evaluations (10 episodes every 25k / 5k env steps and at the
end). ``docs/findings.md`` sets them against the published figures.

CleanRL ``cleanrl/dqn.py`` (Args defaults; published CartPole-v1 488.69 +- 16.11 over 3 seeds,
training-episode return): MLP 120-84, ReLU; Adam lr 2.5e-4 (eps 1e-8); MSE loss; no gradient
clipping; no double DQN; buffer 10,000; batch 128; gamma 0.99; learning starts 10,000; one update
every 10 env steps (UTD 0.1); hard target copy every 500 env steps; epsilon 1 -> 0.05 linearly over
250,000 env steps (from step 0); 500,000 env steps; one env; bootstraps through truncation.

RL Zoo ``hyperparams/dqn.yml`` CartPole-v1 (published 500.0 +- 0.0 over 300 greedy episodes of the
final model, one seed): MLP 256-256; Adam lr 2.3e-3; SB3's Huber loss and gradient clip 10; no double
DQN; buffer 100,000; batch 64; gamma 0.99; learning starts 1,000; 128 gradient steps every 256 env
steps, i.e. a mean UTD of 0.5 (dqnlab spreads the updates evenly: the same mean); target copied every
10 env steps; epsilon 1 -> 0.04 over 8,000 env steps (SB3 acts uniformly at random for the first
1,000 steps; dqnlab's epsilon is 0.89-1.0 there); 50,000 env steps; one env.

Ported literally (``rlzoo``: a copy every 10 env steps, i.e. every 5 evenly spread updates), this
diverges: SB3 copies the target every 10 env steps *of collection*, and no update happens during
collection, while its 128 updates of a burst all run against the same target. Its effective target
period is therefore 128 updates: ``rlzoo_bursts`` copies every 256 env steps (128 updates at UTD 0.5).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.report import build_report  # noqa: E402
from dqnlab.study.cli import sweep_main  # noqa: E402

CLEANRL = dict(env_id="CartPole-v1", num_workers=1, envs_per_worker=1, hidden_sizes=(120, 84), lr=2.5e-4, loss="mse",
               max_grad_norm=1e30, double_dqn=False, buffer_capacity=10_000, batch_size=128, gamma=0.99,
               learning_starts=10_000, utd=0.1, target_update="hard", target_period=500, target_unit="env_steps",
               epsilon_start=1.0, epsilon_end=0.05, epsilon_decay_steps=250_000, total_env_steps=500_000,
               eval_every_steps=25_000, eval_episodes=10, log_every=1000, replicas=10)  # fmt: skip

RLZOO = dict(env_id="CartPole-v1", num_workers=1, envs_per_worker=1, hidden_sizes=(256, 256), lr=2.3e-3, loss="huber",
             max_grad_norm=10.0, double_dqn=False, buffer_capacity=100_000, batch_size=64, gamma=0.99,
             learning_starts=1000, utd=0.5, target_update="hard", target_period=10, target_unit="env_steps",
             epsilon_start=1.0, epsilon_end=0.04, epsilon_decay_steps=8000, total_env_steps=50_000,
             eval_every_steps=5000, eval_episodes=10, log_every=1000, replicas=10)  # fmt: skip

# RL Zoo hyperparams/dqn.yml Acrobot-v1 (benchmark.md: -76.639 +- 11.752 over 1,932 greedy episodes of one
# seed's final model): train_freq 4 with gradient_steps -1 is 4 updates every 4 env steps (UTD 1); SB3 copies its
# target every 250 env steps of collection, i.e. every 250 updates here too (a burst is only 4 updates long);
# learning starts at 256 env steps (RL Zoo: 0; dqnlab draws its probe batch of 256 first)
RLZOO_ACROBOT = dict(RLZOO, env_id="Acrobot-v1", lr=6.3e-4, batch_size=128, buffer_capacity=50_000, learning_starts=256,
                     utd=1.0, target_period=250, epsilon_end=0.1, epsilon_decay_steps=12_000, total_env_steps=100_000,
                     eval_every_steps=10_000)  # fmt: skip

PRESETS = {
    "cleanrl": {"base": CLEANRL, "grid": {"loss": ["mse"]}, "jobs": 1},
    "cleanrl_huber": {"base": CLEANRL, "grid": {"loss": ["huber"]}, "jobs": 1},
    "rlzoo": {"base": RLZOO, "grid": {"loss": ["huber"]}, "jobs": 1},
    # SB3's target as it acts: frozen through each burst of 128 updates (copied every 256 env steps)
    "rlzoo_bursts": {"base": dict(RLZOO, target_period=256), "grid": {"loss": ["huber"]}, "jobs": 1},
    # one departure, measured: the same with a 64-64 network (the studies' width, ~4x cheaper an update)
    "rlzoo_bursts_64": {"base": dict(RLZOO, target_period=256, hidden_sizes=(64, 64)), "grid": {"loss": ["huber"]},
                        "jobs": 1},  # fmt: skip
    # the same port on Acrobot-v1: the base finding 4's Acrobot grid departs from (64-64, 20k env steps there)
    "rlzoo_acrobot": {"base": RLZOO_ACROBOT, "grid": {"loss": ["huber"]}, "jobs": 1},
    "smoke": {
        "base": dict(CLEANRL, total_env_steps=2000, learning_starts=500, epsilon_decay_steps=1000, eval_every_steps=1000,
                     eval_episodes=2, log_every=20, replicas=2, buffer_capacity=2000, probe_size=64),  # fmt: skip
        "grid": {"loss": ["mse", "huber"]},
    },
}

if __name__ == "__main__":
    sys.exit(sweep_main("calibration", PRESETS, "cleanrl", report=build_report, objective="eval"))
