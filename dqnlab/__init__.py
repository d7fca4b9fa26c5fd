"""dqnlab: parallel-actor DQN with an exact update-to-data ratio and Q-collapse diagnostics.

``from dqnlab import Config, train``. Packages by role: ``agent`` (networks, learner, diagnostics,
evaluation), ``engine`` (shared memory, replay, limiter, weights, actors, the loop), ``tracking``
(callbacks, console, MLflow), ``study`` (sweeps: spec, queue, claims, runner, CLI), ``services``
(PostgreSQL + MLflow server for studies across machines), ``bench``; ``config`` and ``metrics`` (the
vocabulary of every reported number) at the top.
"""

from dqnlab.threads import default_blas_threads

default_blas_threads()  # before numpy or torch load

from dqnlab.config import AgentConfig, Config, ConfigError, EnvConfig, NetworkConfig, RunConfig  # noqa: E402

__all__ = ["AgentConfig", "Config", "ConfigError", "EnvConfig", "NetworkConfig", "RunConfig", "train"]


def __getattr__(name: str):
    if name == "train":  # imported on first use: ``import dqnlab`` stays free of torch
        from dqnlab.engine import train

        return train
    raise AttributeError(f"module 'dqnlab' has no attribute {name!r}")
