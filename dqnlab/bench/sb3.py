"""Benchmark: end-to-end env steps/s of one dqnlab run against Stable-Baselines3's DQN (prints; not a test).

    pip install -e ".[bench]" && python -m dqnlab.bench.sb3 [--repeats 3] [--quick]

Both train on CartPole-v1 with the same network (64-64 ReLU MLP), batch 128, lr 1e-3, buffer 100k,
gamma 0.99, Huber loss, gradient clipping at 10, learning starts 1,000 env steps, epsilon 1 -> 0.05
over 10k env steps, one torch thread, and the same replay ratio and target delay:
- UTD (gradient updates per env step): SB3 ``train_freq`` / ``gradient_steps`` = (4, 1) for 0.25,
  (1, 1) for 1 and (1, 4) for 4 (SB3 has one env here, so its UTD is ``gradient_steps / train_freq``);
- target delay: dqnlab's ``target_period`` counts gradient updates (500); SB3's
  ``target_update_interval`` counts env steps, so it gets ``500 / utd``.
Where they differ: dqnlab uses double DQN (its default; one more forward per update) and one actor
process beside the learner; SB3 steps its env and trains in one process.

Throughput is measured the same way for both: env steps after ``learning_starts`` divided by the
seconds they took (the steady state, without set-up and the random warm-up). The two alternate
within each repeat, so the ratio compares figures taken minutes apart at most; medians over repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time

from dqnlab import metrics as M
from dqnlab.config import Config
from dqnlab.engine import train
from dqnlab.threads import set_threads

LEARNING_STARTS = 1000
TARGET_PERIOD_UPDATES = 500
SB3_SCHEDULE = {0.25: (4, 1), 1.0: (1, 1), 4.0: (1, 4)}  # utd -> (train_freq, gradient_steps)
STEPS_AFTER_START = {0.25: 24_000, 1.0: 6_000, 4.0: 2_000}  # ~10 s of SB3 each


def sb3_rate(utd: float, steps: int) -> float:
    """Env steps/s of SB3's DQN after its learning starts."""
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        def __init__(self):
            super().__init__()
            self.t_start = None

        def _on_step(self) -> bool:
            if self.t_start is None and self.num_timesteps >= LEARNING_STARTS:
                self.t_start = time.perf_counter()
            return True

    train_freq, gradient_steps = SB3_SCHEDULE[utd]
    total = LEARNING_STARTS + steps
    model = DQN("MlpPolicy", gym.make("CartPole-v1"), learning_rate=1e-3, buffer_size=100_000,
                learning_starts=LEARNING_STARTS, batch_size=128, gamma=0.99, train_freq=(train_freq, "step"),
                gradient_steps=gradient_steps, target_update_interval=int(TARGET_PERIOD_UPDATES / utd),
                exploration_fraction=10_000 / total, exploration_initial_eps=1.0, exploration_final_eps=0.05,
                max_grad_norm=10.0, policy_kwargs=dict(net_arch=[64, 64]), device="cpu", seed=0, verbose=0)  # fmt: skip
    clock = Clock()
    model.learn(total_timesteps=total, callback=clock)
    return (total - LEARNING_STARTS) / (time.perf_counter() - clock.t_start)


def dqnlab_rate(utd: float, steps: int, workers: int = 1) -> tuple[float, float]:
    """Env steps/s of one dqnlab run after its learning starts, and its realised UTD."""
    config = Config.from_flat(num_workers=workers, utd=utd, total_env_steps=LEARNING_STARTS + steps,
                              learning_starts=LEARNING_STARTS, target_period=TARGET_PERIOD_UPDATES,
                              eval_every_steps=0, log_every=max(50, int(steps * utd / 20)))  # fmt: skip
    result = train(config)
    points = [m for m in result.history if M.ENV_STEPS_PER_S in m]
    first = next(m for m in points if m[M.ENV_STEPS] >= LEARNING_STARTS + 100)
    last = points[-1]
    rate = (last[M.ENV_STEPS] - first[M.ENV_STEPS]) / (last[M.TIME_S] - first[M.TIME_S])
    return rate, result.final[M.UTD_REALISED]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dqnlab.bench.sb3", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a quarter of the steps")
    args = parser.parse_args(argv)
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        parser.error('needs Stable-Baselines3: pip install -e ".[bench]"')
    set_threads(1)
    scale = 0.25 if args.quick else 1.0
    sb3, ours, realised = ({u: [] for u in SB3_SCHEDULE} for _ in range(3))
    for _ in range(args.repeats):
        for utd in SB3_SCHEDULE:
            steps = int(STEPS_AFTER_START[utd] * scale)
            sb3[utd].append(sb3_rate(utd, steps))
            rate, real = dqnlab_rate(utd, steps)
            ours[utd].append(rate)
            realised[utd].append(real)
    print(f"{'utd':>5}  {'SB3 env steps/s':>16}  {'dqnlab env steps/s':>19}  {'ratio':>6}  dqnlab realised utd")
    for utd in SB3_SCHEDULE:
        a, b = statistics.median(sb3[utd]), statistics.median(ours[utd])
        print(f"{utd:>5g}  {a:>16.0f}  {b:>19.0f}  {b / a:>5.2f}x  {statistics.median(realised[utd]):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
