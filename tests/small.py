"""The small run every engine-level test starts from: CartPole with a 32-32 network, a 32-transition
batch and 1,500 env steps, 2 workers, no evaluation: a few seconds a run. Tests override what they
are about (``small_config(utd=4.0, mode="serial")``)."""

from __future__ import annotations

from dqnlab.config import Config

SMALL = dict(total_env_steps=1500, learning_starts=500, batch_size=32, buffer_capacity=10_000, probe_size=64,
             hidden_sizes=(32, 32), log_every=50, eval_every_steps=0, num_workers=2, sync_every=50)  # fmt: skip


def small_config(**overrides) -> Config:
    return Config.from_flat({**SMALL, **overrides})
