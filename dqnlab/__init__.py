"""dqnlab: parallel-actor DQN with an exact update-to-data ratio and Q-collapse diagnostics."""

from dqnlab.threads import default_blas_threads

default_blas_threads()

from dqnlab.config import AgentConfig, Config, ConfigError, EnvConfig, NetworkConfig, RunConfig  # noqa: E402

__all__ = ["AgentConfig", "Config", "ConfigError", "EnvConfig", "NetworkConfig", "RunConfig"]
