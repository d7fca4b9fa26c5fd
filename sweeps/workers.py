"""Finding 2: are slow workers' and long-episode workers' transitions ignored?

    python sweeps/workers.py               # homogeneous vs one slow worker vs one long-episode worker vs both
    python sweeps/workers.py --preset smoke

CartPole-v1 at UTD 1 with 2 workers, 10 seeds per cell as replicas. The slow worker (1) sleeps 8 ms
after each step (the learner paces each worker at ~1-2 ms a step here, so it is several times slower
than its peer). Long episodes: worker 0's episodes are cut at 20 steps while worker 1 keeps
CartPole's 500, so worker 1's episodes run several to 10x longer (a longer limit alone does not
bind: at these returns episodes end by termination long before 500). The ``episodes`` worker share
measures the difference: a worker with long episodes finishes few of them. Each setup runs with the
default buffer (100,000: larger than the run, nothing is evicted) and with a 4,000-transition buffer
that FIFO eviction turns over four times (``*_evicting``). (dqnlab's actors write into the shared ring
directly: there is no queue between actor and buffer to bound.)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.report import build_report  # noqa: E402
from dqnlab.study.cli import sweep_main  # noqa: E402

WORKERS = {
    "homogeneous": {"worker_step_delay_s": (), "worker_max_episode_steps": ()},
    "one_slow": {"worker_step_delay_s": (0.0, 0.008), "worker_max_episode_steps": ()},
    "one_long_episodes": {"worker_step_delay_s": (), "worker_max_episode_steps": (20, 0)},
    "slow_and_long": {"worker_step_delay_s": (0.0, 0.008), "worker_max_episode_steps": (20, 0)},
}
EVICTING = 4000
"""A buffer a fifth of the run: FIFO eviction turns it over four times (the users' real risk: is a slow
worker's data evicted before it is sampled?)."""
WORKERS.update({f"{name}_evicting": {**fields, "buffer_capacity": EVICTING} for name, fields in list(WORKERS.items())})

PRESETS = {
    "default": {
        "base": dict(env_id="CartPole-v1", total_env_steps=20_000, learning_starts=1000, eval_every_steps=1000,
                     eval_episodes=10, log_every=250, utd=1.0, num_workers=2, target_period=500,
                     target_unit="env_steps", replicas=10),  # fmt: skip
        "grid": {"variant": list(WORKERS)},
        "variants": WORKERS,
        "jobs": 1,  # one trial at a time: worker speeds are the subject
    },
    # Ape-X's question: does prioritized replay change whose transitions are used (a slow worker's, long
    # episodes')? Each setup with uniform and prioritized replay (alpha 0.6, beta 0.4 -> 1, actors' priorities)
    "prioritized": {
        "base": dict(env_id="CartPole-v1", total_env_steps=20_000, learning_starts=1000, eval_every_steps=1000,
                     eval_episodes=10, log_every=250, utd=1.0, num_workers=2, target_period=500,
                     target_unit="env_steps", replicas=10),  # fmt: skip
        "grid": {"variant": ["homogeneous", "one_slow", "one_long_episodes"], "replay": ["uniform", "prioritized"]},
        "variants": WORKERS,
        "jobs": 1,
    },
    "smoke": {
        "base": dict(env_id="CartPole-v1", total_env_steps=1200, learning_starts=400, batch_size=32, probe_size=64,
                     hidden_sizes=(32, 32), log_every=100, eval_every_steps=400, eval_episodes=2, num_workers=2,
                     replicas=2),  # fmt: skip
        "grid": {"variant": ["homogeneous", "one_slow"]},
        "variants": {"homogeneous": WORKERS["homogeneous"], "one_slow": {"worker_step_delay_s": (0.0, 0.002)}},
    },
}

if __name__ == "__main__":
    sys.exit(sweep_main("workers", PRESETS, "default", report=build_report, objective="eval"))
