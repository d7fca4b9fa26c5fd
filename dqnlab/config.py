"""Run configuration: frozen dataclasses, validated in one place.

Four sections (env, network, agent, run) compose one :class:`Config`. Every field name is unique
across sections, so a config also reads and writes as one flat ``{field: value}`` mapping (the
command line, MLflow params and sweep grids all use that flat form).

Units are in the names or the comments: ``*_steps`` are env steps summed over all actors,
``*_updates`` / ``*_every`` on the learner side are gradient updates.
Invalid values raise :class:`ConfigError` naming the field and the allowed values, before any
process starts.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

ResetMode = Literal["none", "head", "full", "shrink_perturb"]
TargetUpdate = Literal["hard", "polyak"]
EpsilonSchedule = Literal["linear", "ladder"]
LimiterMode = Literal["strict", "free"]
RunMode = Literal["parallel", "serial"]
Writers = Literal["single", "hogwild", "local_copies", "a3c"]
Device = Literal["cpu", "cuda"]
ScheduleUnit = Literal["updates", "env_steps"]
Loss = Literal["huber", "mse"]
ReplayKind = Literal["uniform", "prioritized"]
InitialPriority = Literal["actor", "max"]


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and what is allowed."""


@dataclass(frozen=True)
class EnvConfig:
    env_id: str = "CartPole-v1"
    """Any registered gymnasium id with a Box observation and a Discrete action space."""
    num_workers: int = 2
    """Actor processes (>= 1)."""
    envs_per_worker: int = 1
    """Environment instances stepped together by one actor (>= 1); each makes one env step."""
    reward_bound: float | None = None
    """R_max, the largest |reward| the env pays (divergence checks); None: the largest |r| seen in replay."""
    divergence_margin: float = 0.5
    """Soft divergence: max |Q| above (1 + margin) * R_max / (1 - gamma), the most the env can pay plus a
    margin (>= 0), so that an agent whose Q sits on the bound (CartPole's optimum is exactly 100) is not
    labelled diverged."""
    worker_step_delay_s: tuple[float, ...] = ()
    """Seconds worker i sleeps after each of its steps (entry i; missing: 0): a worker slower than its
    peers, for studies of heterogeneous workers."""
    worker_max_episode_steps: tuple[int, ...] = ()
    """Time limit of worker i's envs in env steps (entry i; missing or 0: the env's own): a worker whose
    episodes run longer, for studies of heterogeneous workers."""

    def __post_init__(self) -> None:
        for name in ("worker_step_delay_s", "worker_max_episode_steps"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        _check_types(self)
        _require(bool(self.env_id.strip()), "env_id", "a non-empty gymnasium id", self.env_id)
        _require(self.num_workers >= 1, "num_workers", "an int >= 1", self.num_workers)
        _require(self.envs_per_worker >= 1, "envs_per_worker", "an int >= 1", self.envs_per_worker)
        for name in ("worker_step_delay_s", "worker_max_episode_steps"):
            values = getattr(self, name)
            _require(len(values) <= self.num_workers, name, f"at most num_workers ({self.num_workers}) entries", values)
            _require(all(math.isfinite(v) and 0 <= v <= 1e6 for v in values), name,
                     "finite values in [0, 1e6], one per worker", values)  # fmt: skip
        _require(math.isfinite(self.divergence_margin) and self.divergence_margin >= 0, "divergence_margin",
                 "a finite float >= 0", self.divergence_margin)  # fmt: skip
        if self.reward_bound is not None:
            _require(
                math.isfinite(self.reward_bound) and self.reward_bound > 0,
                "reward_bound",
                "a finite float > 0 or None",
                self.reward_bound,
            )


@dataclass(frozen=True)
class NetworkConfig:
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the hidden layers of the Q-network MLP."""
    layer_norm: bool = False
    """nn.LayerNorm after each hidden linear layer, before the ReLU."""
    conv_channels: tuple[int, ...] = ()
    """Image observations (C, H, W): the output channels of each 2-D convolution (each followed by a ReLU)
    before the hidden layers; empty: none (vector observations)."""
    conv_kernels: tuple[int, ...] = ()
    """Each convolution's square kernel (pixels); empty: 3 for every one."""
    conv_strides: tuple[int, ...] = ()
    """Each convolution's stride (pixels); empty: 1 for every one."""

    def __post_init__(self) -> None:
        for name in ("hidden_sizes", "conv_channels", "conv_kernels", "conv_strides"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        _check_types(self)
        _require(
            len(self.hidden_sizes) >= 1 and all(h >= 1 for h in self.hidden_sizes),
            "hidden_sizes",
            "a non-empty tuple of ints >= 1",
            self.hidden_sizes,
        )
        for name in ("conv_channels", "conv_kernels", "conv_strides"):
            _require(all(v >= 1 for v in getattr(self, name)), name, "a tuple of ints >= 1", getattr(self, name))
        for name in ("conv_kernels", "conv_strides"):
            value = getattr(self, name)
            _require(not value or len(value) == len(self.conv_channels), name,
                     f"empty, or one int per convolution ({len(self.conv_channels)}: conv_channels)", value)  # fmt: skip

    @property
    def conv_layers(self) -> tuple[tuple[int, int, int], ...]:
        """``(channels, kernel, stride)`` of each convolution."""
        n = len(self.conv_channels)
        return tuple(zip(self.conv_channels, self.conv_kernels or (3,) * n, self.conv_strides or (1,) * n))


@dataclass(frozen=True)
class AgentConfig:
    utd: float = 1.0
    """Gradient updates per env step, summed over all actors (> 0)."""
    batch_size: int = 128
    """Transitions per gradient update."""
    buffer_capacity: int = 100_000
    """Replay ring size in transitions."""
    replay: ReplayKind = "uniform"
    """'uniform', or 'prioritized' (Schaul et al. 2016, as Ape-X uses it): a transition is drawn with
    probability p^alpha / sum p^alpha, p its last |TD error| (+ priority_eps), and the loss weighted by
    importance-sampling weights (N P)^-beta / max over the batch, beta annealed to 1 over the run."""
    priority_alpha: float = 0.6
    """Prioritization exponent alpha in [0, 1] (0: uniform draws; Ape-X 0.6)."""
    priority_beta: float = 0.4
    """Importance-sampling exponent at the start, in [0, 1]; annealed linearly to 1 over the env-step
    budget (Ape-X 0.4)."""
    priority_eps: float = 1e-6
    """Added to |TD error| so that no transition has priority 0 (> 0)."""
    initial_priority: InitialPriority = "actor"
    """A new transition's priority: 'actor' (Ape-X: the actor's own |TD error| with its copy of the network,
    bootstrapping with its max_a Q(s', a)) or 'max' (the largest priority so far, as in Schaul et al.)."""
    gamma: float = 0.99
    """Discount in [0, 1)."""
    lr: float = 1e-3
    """Adam learning rate (> 0)."""
    loss: Loss = "huber"
    """TD regression loss: 'huber' (smooth L1 with beta 1: SB3, Dopamine) or 'mse' (mean squared error:
    CleanRL). Either is averaged over the batch."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip (> 0; 1e30: no clipping)."""
    double_dqn: bool = True
    """Online net picks the next action, target net evaluates it (van Hasselt et al. 2016)."""
    target_update: TargetUpdate = "hard"
    """'hard': copy every target_period; 'polyak': theta' <- tau*theta + (1-tau)*theta' per target_unit."""
    target_period: int = 500
    """Hard target copies every target_period target_units (>= 1)."""
    target_unit: ScheduleUnit = "updates"
    """What target_period counts and what tau is applied per: 'updates' (gradient updates: the copy rate
    per env step then grows with utd) or 'env_steps' (env steps over all actors, as CleanRL and SB3: the
    same copies per env step at every utd)."""
    tau: float = 0.005
    """Polyak coefficient in (0, 1], applied per target_unit (per update, or per env step) when
    target_update='polyak'."""
    reset: ResetMode = "none"
    """Plasticity reset: 'head' (last layer), 'full', or 'shrink_perturb'."""
    reset_every: int = 20_000
    """Resets every reset_every reset_units (>= 1)."""
    reset_unit: ScheduleUnit = "updates"
    """What reset_every counts: 'updates' or 'env_steps' (as SR-SPR and BBF)."""
    no_resets_after_steps: int = 0
    """No reset once the run has made more than this many env steps (BBF's no_resets_after), so that the
    final evaluations never land just after one; 0: no such guard."""
    shrink_alpha: float = 0.8
    """shrink_perturb: theta <- alpha*theta + (1-alpha)*theta_fresh, alpha in [0, 1]."""
    epsilon_schedule: EpsilonSchedule = "linear"
    """'linear': every worker decays start -> end; 'ladder': Ape-X eps_i = base^(1+i/(N-1)*alpha)."""
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_decay_steps: int = 10_000
    """Env steps (global, over all actors) of the linear decay."""
    epsilon_base: float = 0.4
    epsilon_alpha: float = 7.0

    def __post_init__(self) -> None:
        _check_types(self)
        _require(math.isfinite(self.utd) and self.utd > 0, "utd", "a finite float > 0", self.utd)
        _require(self.batch_size >= 1, "batch_size", "an int >= 1", self.batch_size)
        _require(
            self.buffer_capacity >= self.batch_size,
            "buffer_capacity",
            f"an int >= batch_size ({self.batch_size})",
            self.buffer_capacity,
        )
        _require(0.0 <= self.gamma < 1.0, "gamma", "a float in [0, 1)", self.gamma)
        for name in ("priority_alpha", "priority_beta"):
            _require(0.0 <= getattr(self, name) <= 1.0, name, "a float in [0, 1]", getattr(self, name))
        _require(math.isfinite(self.priority_eps) and self.priority_eps > 0, "priority_eps", "a finite float > 0",
                 self.priority_eps)  # fmt: skip
        _require(math.isfinite(self.lr) and self.lr > 0, "lr", "a finite float > 0", self.lr)
        _require(math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0, "max_grad_norm",
                 "a finite float > 0 (1e30: no clipping)", self.max_grad_norm)
        _require(self.target_period >= 1, "target_period", "an int >= 1", self.target_period)
        _require(0.0 < self.tau <= 1.0, "tau", "a float in (0, 1]", self.tau)
        _require(self.reset_every >= 1, "reset_every", "an int >= 1", self.reset_every)
        _require(self.no_resets_after_steps >= 0, "no_resets_after_steps", "an int >= 0 (0: no guard)",
                 self.no_resets_after_steps)  # fmt: skip
        _require(0.0 <= self.shrink_alpha <= 1.0, "shrink_alpha", "a float in [0, 1]", self.shrink_alpha)
        for name in ("epsilon_start", "epsilon_end", "epsilon_base"):
            _require(0.0 <= getattr(self, name) <= 1.0, name, "a float in [0, 1]", getattr(self, name))
        _require(
            self.epsilon_end <= self.epsilon_start,
            "epsilon_end",
            f"a float <= epsilon_start ({self.epsilon_start})",
            self.epsilon_end,
        )
        _require(self.epsilon_decay_steps >= 1, "epsilon_decay_steps", "an int >= 1", self.epsilon_decay_steps)
        _require(math.isfinite(self.epsilon_alpha) and self.epsilon_alpha >= 0, "epsilon_alpha", "a finite float >= 0",
                 self.epsilon_alpha)


@dataclass(frozen=True)
class RunConfig:
    total_env_steps: int = 50_000
    """Env steps over all actors; a multiple of envs_per_worker."""
    learning_starts: int = 1_000
    """Env steps collected before the first update; >= batch_size and < total_env_steps."""
    sync_every: int = 100
    """Env steps of one actor between two weight pulls (>= 1)."""
    limiter: LimiterMode = "strict"
    """'strict': learner and actors both wait to hold utd; 'free': only the learner is bounded."""
    limiter_slack: float = 1.0
    """Updates the learner or the actors may run ahead of utd (>= 0.5, below that both can block)."""
    log_every: int = 500
    """Gradient updates between two diagnostics log points (>= 1)."""
    eval_every_steps: int = 5_000
    """Env steps between greedy evaluations; 0 disables them."""
    eval_episodes: int = 5
    """Greedy episodes per evaluation (>= 1)."""
    probe_size: int = 256
    """States in the fixed probe batch used for srank, dormant units and soft divergence."""
    seed: int = 0
    """Seed of the first replica; replica k uses seed + k (its networks, envs, exploration, sampling)."""
    replicas: int = 1
    """Independent agents of this configuration trained in lockstep in one run (seeds seed..seed+K-1),
    one stacked learner update for all; each replica is a run of its own (docs/design.md: replica)."""
    writers: Writers = "single"
    """Who writes the parameters: 'single' (the learner alone: the design); 'hogwild' (every worker
    steps shared parameters without a lock), 'local_copies' (each worker trains its own copy and
    writes it back, last writer wins) and 'a3c' (each worker pushes gradients computed on a local copy,
    synced at its weight pulls, into the shared parameters without a lock) exist only as measured
    counterexamples (docs/design.md: writers)."""
    mode: RunMode = "parallel"
    """'parallel': one process per actor; 'serial': actors stepped in the learner's process."""
    device: Device = "cpu"
    """Learner device; actors always run on the CPU."""
    learner_threads: int = 1
    """torch intra-op threads of the learner (actors use 1)."""
    publish_every: int = 1
    """Gradient updates between two weight publications to the actors (>= 1)."""
    worker_timeout_s: float = 30.0
    """Seconds without a heartbeat after which an actor counts as hung and the run fails (> 0)."""

    def __post_init__(self) -> None:
        _check_types(self)
        _require(self.total_env_steps >= 1, "total_env_steps", "an int >= 1", self.total_env_steps)
        _require(self.learning_starts >= 0, "learning_starts", "an int >= 0", self.learning_starts)
        _require(self.sync_every >= 1, "sync_every", "an int >= 1", self.sync_every)
        _require(math.isfinite(self.limiter_slack) and self.limiter_slack >= 0.5, "limiter_slack", "a finite float >= 0.5",
                 self.limiter_slack)
        _require(self.log_every >= 1, "log_every", "an int >= 1", self.log_every)
        _require(self.eval_every_steps >= 0, "eval_every_steps", "an int >= 0", self.eval_every_steps)
        _require(self.eval_episodes >= 1, "eval_episodes", "an int >= 1", self.eval_episodes)
        _require(self.probe_size >= 2, "probe_size", "an int >= 2", self.probe_size)
        _require(self.seed >= 0, "seed", "an int >= 0", self.seed)
        _require(1 <= self.replicas <= 1024, "replicas", "an int in [1, 1024]", self.replicas)
        _require(self.learner_threads >= 1, "learner_threads", "an int >= 1", self.learner_threads)
        _require(self.publish_every >= 1, "publish_every", "an int >= 1", self.publish_every)
        _require(math.isfinite(self.worker_timeout_s) and self.worker_timeout_s > 0, "worker_timeout_s",
                 "a finite float > 0 (seconds)", self.worker_timeout_s)


SECTIONS: dict[str, type] = {
    "env": EnvConfig,
    "network": NetworkConfig,
    "agent": AgentConfig,
    "run": RunConfig,
}


@dataclass(frozen=True)
class Config:
    """One run: the four sections plus the rules that span them."""

    env: EnvConfig = field(default_factory=EnvConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        a, r, e = self.agent, self.run, self.env
        _require(
            r.learning_starts >= a.batch_size,
            "learning_starts",
            f"an int >= batch_size ({a.batch_size})",
            r.learning_starts,
        )
        _require(
            r.learning_starts < r.total_env_steps,
            "learning_starts",
            f"an int < total_env_steps ({r.total_env_steps})",
            r.learning_starts,
        )
        _require(
            r.total_env_steps % e.envs_per_worker == 0,
            "total_env_steps",
            f"a multiple of envs_per_worker ({e.envs_per_worker})",
            r.total_env_steps,
        )
        if r.writers != "single":
            _require(r.replicas == 1, "writers", f"'single' when replicas > 1 (got replicas={r.replicas}): the naive "
                     "setups train one network per run", r.writers)  # fmt: skip
            _require(r.mode == "parallel", "writers", "'single' in serial mode: the naive setups need worker processes",
                     r.writers)  # fmt: skip
            # the naive workers copy their target on target_period and never reset: refuse what they would ignore
            _require(a.target_update == "hard", "target_update", f"'hard' with writers={r.writers!r} (its workers "
                     "copy their targets; they have no Polyak average)", a.target_update)  # fmt: skip
            _require(a.reset == "none", "reset", f"'none' with writers={r.writers!r} (its workers do not reset)",
                     a.reset)  # fmt: skip
            _require(a.replay == "uniform", "replay", f"'uniform' with writers={r.writers!r} (its workers do not "
                     "update priorities)", a.replay)  # fmt: skip
        _require(
            a.buffer_capacity >= e.envs_per_worker,
            "buffer_capacity",
            f"an int >= envs_per_worker ({e.envs_per_worker}): one actor step must fit in the ring",
            a.buffer_capacity,
        )
        _require(
            r.probe_size <= r.learning_starts,
            "probe_size",
            f"an int <= learning_starts ({r.learning_starts})",
            r.probe_size,
        )

    # --- flat form ---------------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for section in SECTIONS.values() for f in dataclasses.fields(section)]

    def to_flat(self) -> dict[str, Any]:
        """``{field: value}`` over all sections (tuples kept as tuples)."""
        out: dict[str, Any] = {}
        for name in SECTIONS:
            out.update(dataclasses.asdict(getattr(self, name)))
        out["hidden_sizes"] = tuple(out["hidden_sizes"])
        return out

    @classmethod
    def from_flat(cls, values: dict[str, Any] | None = None, **overrides: Any) -> Config:
        """Build from flat field names; unknown names raise, naming the valid ones."""
        merged = {**(values or {}), **overrides}
        known = set(cls.field_names())
        unknown = sorted(set(merged) - known)
        if unknown:
            raise ConfigError(f"unknown config field(s) {unknown}; valid fields: {sorted(known)}")
        kwargs = {}
        for name, section in SECTIONS.items():
            names = {f.name for f in dataclasses.fields(section)}
            kwargs[name] = section(**{k: v for k, v in merged.items() if k in names})
        return cls(**kwargs)

    def replace(self, **overrides: Any) -> Config:
        return Config.from_flat(self.to_flat(), **overrides)


# --- validation helpers ----------------------------------------------------------------------
def _require(ok: bool, name: str, allowed: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{name}: got {value!r}; allowed: {allowed}")


def _describe(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    if get_origin(tp) is tuple:
        return f"a tuple of {get_args(tp)[0].__name__}s"
    return "None" if tp is type(None) else f"a {tp.__name__}"


def _matches(value: Any, tp: Any) -> bool:
    origin = get_origin(tp)
    if origin is Literal:
        return value in get_args(tp) and isinstance(value, str)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in get_args(tp))
    if origin is tuple:
        return isinstance(value, tuple) and all(_matches(v, get_args(tp)[0]) for v in value)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, tp)


@functools.cache
def _hints(section: type) -> dict[str, Any]:
    """A section's resolved field types (resolving the annotations' text is most of a Config's build)."""
    return typing.get_type_hints(section)


def _check_types(obj: Any) -> None:
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        tp = hints[f.name]
        if not _matches(value, tp):
            raise ConfigError(f"{f.name}: got {value!r} ({type(value).__name__}); allowed: {_describe(tp)}")
        if tp is float or (get_origin(tp) in (typing.Union, types.UnionType) and float in get_args(tp)):
            if isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(obj, f.name, float(value))
        if get_origin(tp) is tuple and get_args(tp)[0] is float:
            object.__setattr__(obj, f.name, tuple(float(v) for v in value))
