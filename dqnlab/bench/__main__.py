"""Benchmark: bare limits and dqnlab's figures side by side in one run (prints; not a test).

``python -m dqnlab.bench [--quick]`` on CartPole-v1 with the default network and batch:

- bare limits: env alone, env + torch policy (batch 1), env + numpy policy, a bare torch DQN
  update loop (same maths: double DQN, Huber, clipping; default Adam; numpy ring sampling);
- dqnlab: one actor unthrottled (claim, act, step, commit), the learner inside the engine (utd 16,
  one worker, every diagnostic on), and end-to-end env steps/s at utd 0.25, 1, 4 with 1 and 2 workers;
- reference: the same update by autograd and ``torch.optim.Adam(fused=True)``, sampling from the same
  shared replay: what the hand-written backward and the stacked Adam are measured against;
- replay: the cost of a call on a full 100k ring, batch 128: a uniform draw, a prioritized draw (sum
  tree), a priority update;
- replicas: the stacked learner's run-updates/s (one update of K replicas = K run-updates; sampling
  from the shared replay included) at K = 1 to 64, each as a share of this core's sgemm peak (one
  large matrix product) given the update's matrix FLOPs; the engine end to end at K = 8 and 32, UTD 4,
  with and without LayerNorm, as a multiple of the bare stacked update's cost; and one unthrottled
  actor stepping K x envs_per_worker environments (K x envs = 1, 8, 32).

Each figure is the median of ``--repeats`` measurements; ratios are taken against the matching
bare limit measured in the same run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from dqnlab import metrics as M
from dqnlab.agent.layers import network_spec
from dqnlab.agent.learner import Learner
from dqnlab.agent.networks import QNetwork, StackedQ, flatten_into
from dqnlab.agent.policy import NumpyQ
from dqnlab.agent.reference import dqn_gradient
from dqnlab.config import Config
from dqnlab.engine import train
from dqnlab.engine.actor import Actor, ActorBoard
from dqnlab.engine.limiter import RateLimiter
from dqnlab.engine.replay import SharedReplay
from dqnlab.engine.shared import SharedArena
from dqnlab.engine.weights import WeightBroadcast
from dqnlab.threads import learner_cpu, set_threads

ENV_ID = "CartPole-v1"


def _median_rate(fn, repeats: int) -> float:
    return statistics.median(fn() for _ in range(repeats))


def env_alone(steps: int) -> float:
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, steps)
    t = time.perf_counter()
    for a in actions:
        _, _, term, trunc, _ = env.step(int(a))
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t)


def env_policy(steps: int, use_torch: bool) -> float:
    config = Config()
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=0)
    spec = network_spec(config.network, 4, 2)
    net = QNetwork(spec)
    twin = NumpyQ(spec)
    flatten_into(net, twin.params)
    t = time.perf_counter()
    for _ in range(steps):
        x = np.asarray(obs, dtype=np.float32).reshape(1, -1)
        if use_torch:
            with torch.no_grad():
                a = int(net(torch.from_numpy(x)).argmax())
        else:
            a = int(twin.q_values(x).argmax())
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            obs, _ = env.reset()
    return steps / (time.perf_counter() - t)


def bare_update_loop(updates: int) -> float:
    """What a user writes first: the same DQN maths, default Adam, numpy buffer."""
    config = Config()
    a = config.agent
    n = 50_000
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((n, 4)).astype(np.float32)
    next_obs = rng.standard_normal((n, 4)).astype(np.float32)
    actions = rng.integers(0, 2, n)
    rewards = np.ones(n, np.float32)
    terminated = rng.random(n) < 0.02
    spec = network_spec(config.network, 4, 2)
    net, target = QNetwork(spec), QNetwork(spec)
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)

    def step():
        i = rng.integers(0, n, a.batch_size)
        batch = (torch.from_numpy(x[i]) for x in (obs, actions, rewards, next_obs, terminated))
        dqn_gradient(net, target, tuple(batch), a)
        opt.step()

    for _ in range(50):
        step()
    t = time.perf_counter()
    for _ in range(updates):
        step()
    return updates / (time.perf_counter() - t)


def _replay_for(config: Config, total: int) -> tuple[SharedReplay, SharedArena]:
    arena = SharedArena()
    limiter = RateLimiter(1.0, config.run.learning_starts, 1.0, strict=False)
    replay = SharedReplay(arena, mp.get_context("fork").Lock(), config.agent.buffer_capacity, 4, 1, limiter, total,
                          config.run.replicas)  # fmt: skip
    return replay, arena


def _filled_replay(capacity: int, n: int, replicas: int = 1, priorities: tuple[float, float] | None = None,
                   terminal_frac: float = 0.02) -> SharedReplay:
    """A bound shared replay of ``capacity`` slots holding ``n`` random CartPole-shaped transitions per
    replica (committed by worker 0 in one claim); prioritized with random initial priorities when
    ``priorities`` is given."""
    arena = SharedArena()
    limiter = RateLimiter(1.0, 0, 1.0, strict=False)
    replay = SharedReplay(arena, mp.get_context("fork").Lock(), capacity, 4, 1, limiter, 10**9, replicas, priorities)
    arena.allocate()
    replay.bind()
    rng = np.random.default_rng(0)
    k = replicas
    obs = rng.standard_normal((k, n, 4)).astype(np.float32)
    replay.claim(n)
    replay.commit(0, obs, rng.integers(0, 2, (k, n)), np.ones((k, n), np.float32), obs, rng.random((k, n)) < terminal_frac,
                  np.zeros((k, n), bool), np.zeros((k, n), np.int64), 0, [], claim_next=0,
                  priorities=rng.random((k, n)) if priorities else None)  # fmt: skip
    return replay


def actor_unthrottled(steps: int, replicas: int = 1, envs: int = 1) -> float:
    """One dqnlab actor in this process, limiter free, no learner: its env steps/s over all its
    ``replicas x envs`` environments."""
    config = Config.from_flat(num_workers=1, total_env_steps=10**9, limiter="free", replicas=replicas,
                              envs_per_worker=envs)  # fmt: skip
    spec = network_spec(config.network, 4, 2)
    nets = [QNetwork(spec) for _ in range(replicas)]
    layout = spec.layout
    replay, arena = _replay_for(config, 10**9)
    weights = WeightBroadcast(arena, replicas * layout.size)
    board = ActorBoard(arena, 1)
    arena.allocate()
    replay.bind()
    board.bind()
    flat = np.zeros(replicas * layout.size, np.float32)
    flatten_into(StackedQ.stack(nets), flat)
    weights.publish(flat, 0)
    actor = Actor(0, config, replay, weights, spec, board)
    calls = max(1, steps // (replicas * envs))
    for _ in range(min(200, calls)):
        actor.try_step()
    t = time.perf_counter()
    for _ in range(calls):
        actor.try_step()
    rate = calls * replicas * envs / (time.perf_counter() - t)
    actor.close()
    return rate


def sgemm_peak(n: int = 2048, repeats: int = 5) -> float:
    """This core's float32 matrix-product rate (FLOP/s): the best of ``repeats`` ``n x n`` products on
    one thread, as the learner runs (the ceiling any stacked update can approach)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    best = 0.0
    with learner_cpu(1):
        torch.mm(a, b, out=out)
        for _ in range(repeats):
            t = time.perf_counter()
            torch.mm(a, b, out=out)
            best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


def stacked_learner(replicas: int, updates: int, layer_norm: bool = False) -> float:
    """Run-updates/s of the stacked learner: ``replicas`` networks updated together, each on its own
    batch sampled from a filled shared replay (default network, batch and Adam)."""
    config = Config.from_flat(replicas=replicas, buffer_capacity=20_000, layer_norm=layer_norm)
    learner = Learner(config, 4, 2)
    replay = _filled_replay(config.agent.buffer_capacity, 10_000, replicas)
    rngs = [np.random.default_rng(i) for i in range(replicas)]
    with learner_cpu(1):  # as the engine runs it
        for _ in range(30):
            learner.update(replay.sample(rngs, config.agent.batch_size))
        t = time.perf_counter()
        for _ in range(updates):
            learner.update(replay.sample(rngs, config.agent.batch_size))
        return updates * replicas / (time.perf_counter() - t)


def autograd_learner(updates: int) -> float:
    """The reference for the hand-written learner: the same update (double DQN, Huber, clipping, Adam)
    of one network by autograd and ``torch.optim.Adam(fused=True)``, on batches sampled from the same
    filled shared replay as :func:`stacked_learner`; updates/s."""
    config = Config.from_flat(buffer_capacity=20_000)
    a = config.agent
    spec = network_spec(config.network, 4, 2)
    net, target = QNetwork(spec), QNetwork(spec)
    opt = torch.optim.Adam(net.parameters(), lr=a.lr, fused=True)
    replay = _filled_replay(config.agent.buffer_capacity, 10_000)
    rngs = [np.random.default_rng(0)]

    def step():
        b = replay.sample(rngs, a.batch_size)
        dqn_gradient(net, target, tuple(torch.from_numpy(x[0]) for x in b.learner_arrays()), a)
        opt.step()

    with learner_cpu(1):  # as the engine runs a learner: denormals flushed, one thread
        for _ in range(30):
            step()
        t = time.perf_counter()
        for _ in range(updates):
            step()
        return updates / (time.perf_counter() - t)


def replay_calls(kind: str, calls: int) -> float:
    """Calls/s of one replay operation on a full 100,000-slot ring of 1 replica, batch 128: ``uniform``
    or ``prioritized`` sampling, or ``update`` (prioritized: the batch's new priorities)."""
    config = Config.from_flat(buffer_capacity=100_000)
    priorities = None if kind == "uniform" else (0.6, 1e-6)
    replay = _filled_replay(100_000, 100_000, priorities=priorities, terminal_frac=0.0)
    rng = np.random.default_rng(0)
    rngs = [np.random.default_rng(1)]
    batch = replay.sample(rngs, config.agent.batch_size)
    errors = rng.random((1, config.agent.batch_size))
    start = time.perf_counter()
    for _ in range(calls):
        if kind == "update":
            replay.update_priorities(batch.slots, batch.seq, errors)
        else:
            replay.sample(rngs, config.agent.batch_size, beta=0.5)
    return calls / (time.perf_counter() - start)


def engine_run(utd: float, workers: int, total: int, **overrides) -> dict[str, float]:
    config = Config.from_flat(
        num_workers=workers, utd=utd, total_env_steps=total, learning_starts=1000, eval_every_steps=0, **overrides
    )
    run = train(config).replicas[0]  # replicas share the clock: replica 0's rates are the run's (per replica)
    windows = [m for m in run.history[1:] if m[M.ENV_STEPS] > 1000 + workers * 100]
    pick = windows or run.history
    return {
        M.ENV_STEPS_PER_S: statistics.median(m[M.ENV_STEPS_PER_S] for m in pick),
        M.UPDATES_PER_S: statistics.median(m[M.UPDATES_PER_S] for m in pick),
        M.UTD_REALISED: run.final[M.UTD_REALISED],
        M.POLICY_LAG_RUN_MEAN: run.final.get(M.POLICY_LAG_RUN_MEAN, float("nan")),
        M.ACTOR_STALENESS_RUN_MEAN: run.final.get(M.ACTOR_STALENESS_RUN_MEAN, float("nan")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dqnlab.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller budgets (about a minute)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    set_threads(1)
    scale = 0.25 if args.quick else 1.0
    r = args.repeats
    s = int(40_000 * scale)
    rows = []
    env = _median_rate(lambda: env_alone(s), r)
    env_torch = _median_rate(lambda: env_policy(s // 4, True), r)
    env_numpy = _median_rate(lambda: env_policy(s, False), r)
    bare = _median_rate(lambda: bare_update_loop(int(2000 * scale)), r)
    actor = _median_rate(lambda: actor_unthrottled(s), r)
    rows += [
        ("bare: env alone", env, "env steps/s", ""),
        ("bare: env + torch policy (batch 1)", env_torch, "env steps/s", ""),
        ("bare: env + numpy policy", env_numpy, "env steps/s", ""),
        ("bare: torch DQN update loop", bare, "updates/s", ""),
        ("dqnlab: actor unthrottled (1 process)", actor, "env steps/s", f"{actor / env_numpy:.2f}x env+numpy"),
    ]
    learner = engine_run(16.0, 1, 1000 + int(1200 * scale))
    rows.append(("dqnlab: learner in engine (utd 16, 1 worker)", learner[M.UPDATES_PER_S], "updates/s",
                 f"{learner[M.UPDATES_PER_S] / bare:.2f}x bare loop"))  # fmt: skip
    for utd in (0.25, 1.0, 4.0):
        for workers in (1, 2):
            total = 1000 + int(scale * {0.25: 40_000, 1.0: 12_000, 4.0: 4_000}[utd])
            m = engine_run(utd, workers, total)
            limit = min(actor * workers, bare / utd)
            rows.append((f"dqnlab: end-to-end utd {utd:g}, {workers} worker(s)", m[M.ENV_STEPS_PER_S], "env steps/s",
                         f"{m[M.ENV_STEPS_PER_S] / limit:.2f}x min(actors, bare/utd); "
                         f"utd {m[M.UTD_REALISED]:.4f}, staleness {m[M.ACTOR_STALENESS_RUN_MEAN]:.1f} upd"))  # fmt: skip
    uniform = _median_rate(lambda: replay_calls("uniform", int(2000 * scale)), r)
    rows.append(("replay: sample a batch, uniform (100k slots)", uniform, "calls/s", f"{1e6 / uniform:.0f} us a call"))
    for kind, what in (("prioritized", "sample a batch, prioritized"), ("update", "priorities of a batch, updated")):
        rate = _median_rate(lambda kind=kind: replay_calls(kind, int(2000 * scale)), r)
        rows.append((f"replay: {what}", rate, "calls/s", f"{1e6 / rate:.0f} us a call, {uniform / rate:.1f}x uniform's"))
    reference = _median_rate(lambda: autograd_learner(int(600 * scale)), r)
    rows.append(("reference: autograd + torch.optim.Adam (fused)", reference, "updates/s",
                 f"{reference / bare:.2f}x bare loop"))  # fmt: skip
    peak = sgemm_peak()
    rows.append(("peak: one 2048x2048 sgemm, 1 thread", peak / 1e9, "GFLOP/s", "the matmul ceiling of this core"))
    flops = network_spec(Config().network, 4, 2).update_flops(Config().agent.batch_size)
    stacked = {}
    for k in (1, 2, 4, 8, 16, 32, 64):
        rate = _median_rate(lambda k=k: stacked_learner(k, max(10, int(600 * scale / k**0.5))), r)
        stacked[k] = rate
        rows.append((f"replicas: stacked learner, K={k}", rate, "run-upd/s",
                     f"{1e6 / rate:.0f} us/run-upd, {rate * flops / peak:.0%} of peak ({flops / 1e6:.1f} MFLOP), "
                     f"{rate / bare:.2f}x bare loop, {rate / reference:.2f}x autograd+fused"))  # fmt: skip
    for k in (8, 32):  # the engine around the stacked update: end to end at UTD 4, no evaluation
        for layer_norm in (False, True):
            bare_k = stacked[k] if not layer_norm else _median_rate(
                lambda k=k: stacked_learner(k, max(10, int(600 * scale / k**0.5)), True), r)  # fmt: skip
            m = engine_run(4.0, 1, 1000 + int(scale * 4_000), replicas=k, layer_norm=layer_norm)
            end_to_end = m[M.UPDATES_PER_S] * k
            rows.append((f"replicas: end-to-end K={k}, UTD 4{', LayerNorm' if layer_norm else ''}", end_to_end,
                         "run-upd/s", f"{1e6 / end_to_end:.0f} us/run-upd, {bare_k / end_to_end:.2f}x the bare stacked "
                         f"update's cost ({1e6 / bare_k:.0f} us)"))  # fmt: skip
    for k, n in ((1, 1), (1, 8), (8, 1), (1, 32), (8, 4)):
        rate = _median_rate(lambda k=k, n=n: actor_unthrottled(s, k, n), r)
        rows.append((f"replicas: actor, {k} replica(s) x {n} env(s)", rate, "env steps/s", f"{rate / env:.2f}x env alone"))
    width = max(len(name) for name, *_ in rows)
    print(f"{'measurement':<{width}}  {'median':>10}  unit         ratio")
    for name, value, unit, ratio in rows:
        print(f"{name:<{width}}  {value:>10.0f}  {unit:<11}  {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
