"""The parts of one run, as :func:`dqnlab.engine.build.build` wires them and the loops drive them (a
module of its own: the builder, the loops and the metrics window all read it, none imports another)."""

from __future__ import annotations

from dataclasses import dataclass

from dqnlab.agent.layers import NetworkSpec
from dqnlab.agent.learner import Learner
from dqnlab.config import Config
from dqnlab.engine.actor import ActorBoard
from dqnlab.engine.limiter import RateLimiter
from dqnlab.engine.naive import NaiveShared
from dqnlab.engine.replay import SharedReplay
from dqnlab.engine.shared import SharedArena
from dqnlab.engine.weights import WeightBroadcast
from dqnlab.engine.workers import ActorPool


@dataclass
class EngineParts:
    config: Config
    limiter: RateLimiter
    learner: Learner
    spec: NetworkSpec
    """The network every part builds from; the broadcast holds ``replicas`` vectors of its layout back to back."""
    replay: SharedReplay
    weights: WeightBroadcast
    board: ActorBoard
    pool: ActorPool
    arena: SharedArena
    naive: NaiveShared | None = None
    """The shared vector and counters of a naive setup (``writers`` != ``single``)."""

    def publish(self) -> None:
        """Copy the learner's parameters to the actors' broadcast, versioned by its update count (one
        copy from a CPU learner's parameter matrix)."""
        self.weights.publish(self.learner.net.host_vector(), self.learner.updates)
