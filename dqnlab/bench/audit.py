"""Benchmark: what dqnlab.audit costs a user's loop, side by side in one run (prints; not a test).

    python -m dqnlab.bench.audit [--steps 40000] [--repeats 5] [--hidden 64] [--net numpy|torch]

A user's loop, by default the leanest one, fast enough that any per-step cost shows: gymnasium's
CartPole, a numpy Q-network policy (64-64), a numpy ring buffer, and every 4 env steps (UTD 0.25) a
batch of 128 drawn and one numpy "update" (a forward and an outer-product step on the last layer);
``--net torch``, the loop users write (a torch MLP, a DQN update with a target network and Adam). The same loop
with the audit's calls added (``produced`` per step, ``sampled`` and ``updated`` per update,
``resident`` at the end), and the same counting a random quarter of the sampled batches
(``sampled_fraction=0.25``: shares and lag estimated), the three in a rotating order, medians of
``--repeats`` in wall and CPU time, then each call's cost timed alone: what the calls add per env
step, beside what the loops measured. Target: overhead < 5% of the loop's wall time.

Timings on a shared 2-core machine move by a few percent between sittings, the size of the effect; the
interleaved loop (chunks with and without the audit's calls, A B B A, in one loop) is the steadier
reading. ``--hidden 256`` gives a slower loop (RL Zoo's CartPole network width).
``--one VARIANT`` runs one loop and exits, for an instruction count that does not move: run it under
``valgrind --tool=cachegrind`` (with ``OPENBLAS_NUM_THREADS=1``: idle BLAS threads spin) at two
``--steps`` and divide the difference by the extra steps, for ``plain``, ``audit`` and ``null`` (the
same calls into an audit that does nothing: what the calls and the tag plumbing cost by themselves),
and ``produced``, ``sampled``, ``updated`` (that call real, the others the null audit's).
Under valgrind a loop runs ~50x slower, so the audit's once-a-second flush fires ~50x more often per
step than natively: ``--one`` sets ``flush_every_s`` to 10^9 (the log points record their counts in memory).
"""

from __future__ import annotations

import argparse
import copy
import shutil
import statistics
import tempfile
import time

import gymnasium as gym
import numpy as np

from dqnlab.audit import Audit


class NullAudit(Audit):
    """The audit's calls, doing nothing: what calling it and keeping the tags cost by themselves."""

    def produced(self, worker: int, version: int, episode_end: bool = False, reward: float | None = None) -> int:
        return 0

    def sampled(self, tags, version: int, obs=None) -> None:
        pass

    def updated(self, writer: int = 0, td_loss: float | None = None) -> None:
        pass


CALLS = ("produced", "sampled", "updated")


def only(call: str) -> type[Audit]:
    """An audit whose ``call`` is real and whose other calls do nothing (the null audit's): what one call's
    own work costs inside the loop, beside :class:`NullAudit`."""
    return type(f"Only_{call}", (Audit,), {c: getattr(NullAudit, c) for c in CALLS if c != call})


NETS = ("numpy", "torch")


class UserLoop:
    """The user's loop, resumable: :meth:`run` advances it ``steps`` env steps, with the audit's calls
    when given an audit. One instance keeps its env, buffer and network across calls, so chunks run
    with and without the audit can alternate on the same loop (:func:`interleaved`).

    ``net="numpy"``: a numpy Q-network and a last-layer step for an update (the leanest loop a user could
    write: any per-step cost shows). ``net="torch"``: what users write, a torch MLP acting on one
    observation at a time and a DQN update (Huber loss on a target network copied every 250 updates,
    Adam) on the batch; one torch thread."""

    capacity = 20_000

    def __init__(self, seed: int = 0, hidden: int = 64, net: str = "numpy"):
        if net not in NETS:
            raise ValueError(f"UserLoop(net={net!r}): must be one of {NETS}")
        self.rng = rng = np.random.default_rng(seed)
        shapes = ((4, hidden), (hidden, hidden), (hidden, 2))
        self.w = [rng.standard_normal(s).astype(np.float32) * 0.1 for s in shapes]
        self.obs_buf = np.zeros((self.capacity, 4), np.float32)
        self.next_buf = np.zeros((self.capacity, 4), np.float32)
        self.act_buf = np.zeros(self.capacity, np.int64)
        self.rew_buf = np.zeros(self.capacity, np.float32)
        self.done_buf = np.zeros(self.capacity, np.float32)
        self.tag_buf = np.zeros(self.capacity, np.int64)
        self.env = gym.make("CartPole-v1")
        self.obs, _ = self.env.reset(seed=seed)
        self.size = self.pos = self.updates = self.step = 0
        self.act, self.learn = (self._act_numpy, self._learn_numpy) if net == "numpy" else self._torch(seed, hidden)

    def _act_numpy(self, obs: np.ndarray) -> int:
        w1, w2, w3 = self.w
        return int((np.maximum(np.maximum(obs @ w1, 0) @ w2, 0) @ w3).argmax())

    def _learn_numpy(self, idx: np.ndarray, updates: int) -> None:
        w1, w2, w3 = self.w
        hb = np.maximum(np.maximum(self.obs_buf[idx] @ w1, 0) @ w2, 0)
        w3 -= 1e-4 * hb.T @ (hb @ w3 - self.rew_buf[idx, None])

    def _torch(self, seed: int, hidden: int):
        import torch
        import torch.nn.functional as F
        from torch import nn

        torch.set_num_threads(1)
        torch.manual_seed(seed)
        q = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))
        target = copy.deepcopy(q)
        opt = torch.optim.Adam(q.parameters(), lr=1e-3)
        buffers = tuple(torch.from_numpy(b) for b in (self.obs_buf, self.act_buf, self.rew_buf, self.next_buf,
                                                      self.done_buf))  # fmt: skip

        def act(obs: np.ndarray) -> int:
            with torch.no_grad():
                return int(q(torch.from_numpy(obs)).argmax())

        def learn(idx: np.ndarray, updates: int) -> None:
            o, a, r, o2, d = (b[torch.from_numpy(idx)] for b in buffers)
            with torch.no_grad():
                y = r + 0.99 * (1 - d) * target(o2).max(1).values
            loss = F.smooth_l1_loss(q(o).gather(1, a[:, None]).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if updates % 250 == 0:
                target.load_state_dict(q.state_dict())

        return act, learn

    def run(self, steps: int, audit: Audit | None) -> None:
        """``steps`` env steps; every 4th (UTD 0.25) a batch of 128 and one update."""
        rng, env, capacity, act, learn = self.rng, self.env, self.capacity, self.act, self.learn
        obs_buf, next_buf, act_buf, rew_buf, done_buf = (
            self.obs_buf,
            self.next_buf,
            self.act_buf,
            self.rew_buf,
            self.done_buf,
        )
        tag_buf = self.tag_buf
        obs, size, pos, updates, first = self.obs, self.size, self.pos, self.updates, self.step
        audited = audit is not None
        for step in range(first, first + steps):
            action = act(obs) if rng.random() > 0.1 else int(rng.integers(2))
            next_obs, reward, terminated, truncated, _ = env.step(action)
            obs_buf[pos], act_buf[pos], rew_buf[pos], next_buf[pos], done_buf[pos] = (
                obs,
                action,
                reward,
                next_obs,
                terminated,
            )
            if audited:
                tag_buf[pos] = audit.produced(0, updates, terminated or truncated)
            pos, size = (pos + 1) % capacity, min(size + 1, capacity)
            obs = env.reset()[0] if terminated or truncated else next_obs
            if step % 4 == 3 and size >= 128:
                idx = rng.integers(0, size, 128)
                if audited:
                    audit.sampled(tag_buf[idx], updates)
                learn(idx, updates)
                updates += 1
                if audited:
                    audit.updated(0)
        self.obs, self.size, self.pos, self.updates, self.step = obs, size, pos, updates, first + steps


def loop(steps: int, audited: bool, seed: int = 0, sampled_fraction: float = 1.0,
         audit_class: type[Audit] = Audit, flush_every_s: float = 1.0, hidden: int = 64,
         net: str = "numpy") -> float:  # fmt: skip
    """Env steps/s of the loop (with the audit's calls when ``audited``), its setup not timed."""
    folder = tempfile.mkdtemp(prefix="audit-bench-")  # removed at the end
    audit = audit_class(folder, sampled_fraction=sampled_fraction, flush_every_s=flush_every_s) if audited else None
    user = UserLoop(seed, hidden, net)
    start = time.perf_counter()
    user.run(steps, audit)
    if audit is not None:
        audit.resident(user.tag_buf[: user.size])
        audit.close()
    elapsed = time.perf_counter() - start
    user.env.close()
    shutil.rmtree(folder, ignore_errors=True)
    return steps / elapsed


def interleaved(steps: int, chunk: int = 1000, seed: int = 0, hidden: int = 64, net: str = "numpy") -> float:
    """The audit's overhead measured inside one loop: chunks of ``chunk`` env steps alternate between the
    loop with the audit's calls and without (order A B B A, repeated), on the same env, buffer, network and
    audit; the audited chunks' total time over the plain chunks', minus 1. Separate loops (:func:`loop`)
    differ in more than the calls (a fresh env, heap and audit each, a machine that drifts between
    them); adjacent chunks of one loop differ in the calls alone, and the time of day hits both alike."""
    folder = tempfile.mkdtemp(prefix="audit-bench-")  # removed at the end
    audit = Audit(folder)
    user = UserLoop(seed, hidden, net)
    user.run(chunk, None)  # warm-up, not timed
    total = {True: 0.0, False: 0.0}
    for k in range(max(4, steps // chunk // 4 * 4)):
        audited = k % 4 in (1, 2)
        start = time.perf_counter()
        user.run(chunk, audit if audited else None)
        total[audited] += time.perf_counter() - start
    audit.close()
    user.env.close()
    shutil.rmtree(folder, ignore_errors=True)
    return total[True] / total[False] - 1


def call_costs(calls: int = 100_000) -> dict[str, float]:
    """Microseconds per audit call, each timed alone in a tight loop (batch of 128 tags)."""
    folders = [tempfile.mkdtemp(prefix="audit-bench-") for _ in range(2)]  # removed at the end
    audit = Audit(folders[0])
    quarter = Audit(folders[1], sampled_fraction=0.25)
    tags = audit.produced_batch(0, 0, np.zeros(20_000, bool))[np.random.default_rng(0).integers(0, 20_000, 128)]
    out = {}
    for name, call, n in (("produced", lambda: audit.produced(0, 3, False), calls),
                          ("sampled (batch 128)", lambda: audit.sampled(tags, 7), calls // 4),
                          ("sampled, sampled_fraction=0.25", lambda: quarter.sampled(tags, 7), calls // 4),
                          ("updated", lambda: audit.updated(0), calls // 4)):  # fmt: skip
        start = time.perf_counter()
        for _ in range(n):
            call()
        out[name] = (time.perf_counter() - start) / n * 1e6
    audit.close()
    quarter.close()
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dqnlab.bench.audit", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hidden", type=int, default=64, help="width of the user's two hidden layers (a slower loop)")
    p.add_argument(
        "--net",
        choices=NETS,
        default="numpy",
        help="the user's Q-network: numpy (the leanest loop) or torch (a DQN update, as users write it)",
    )
    p.add_argument("--chunk", type=int, default=1000, help="env steps per chunk of the interleaved loop")
    p.add_argument(
        "--one",
        choices=["plain", "audit", "null", *CALLS],
        help="run one loop and exit (for valgrind); produced, sampled, updated: only that call real",
    )
    args = p.parse_args(argv)
    if args.one:
        audit_class = {"null": NullAudit, **{c: only(c) for c in CALLS}}.get(args.one, Audit)
        loop(args.steps, args.one != "plain", audit_class=audit_class, flush_every_s=1e9, hidden=args.hidden, net=args.net)
        return 0
    variants = {"user loop": None, "user loop + dqnlab.audit": 1.0, "  ... sampled_fraction=0.25": 0.25}
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.repeats):
        for name in names[r % 3 :] + names[: r % 3]:  # a rotating order: none always runs first
            c = time.process_time()
            fraction = variants[name]
            wall[name].append(loop(args.steps, fraction is not None, seed=r, sampled_fraction=fraction or 1.0,
                                   hidden=args.hidden, net=args.net))  # fmt: skip
            cpu[name].append(args.steps / (time.process_time() - c))
    print(f"user loop: {args.net} {args.hidden}-{args.hidden} Q-network, {args.steps} env steps a loop")
    print(f"{'loop':<34} {'wall':>10} {'cpu':>10}  unit (medians of {args.repeats})   overhead: wall, cpu (pair medians)")
    plain = names[0]
    for name in names:
        line = f"{name:<34} {statistics.median(wall[name]):>10.0f} {statistics.median(cpu[name]):>10.0f}  env steps/s"
        if name != plain:
            over = 100 * statistics.median([p / a - 1 for p, a in zip(wall[plain], wall[name])])
            over_cpu = 100 * statistics.median([p / a - 1 for p, a in zip(cpu[plain], cpu[name])])
            line += f"   {over:.1f}%, {over_cpu:.1f}%"
        print(line)
    inside = [
        100 * interleaved(args.steps, args.chunk, seed=r, hidden=args.hidden, net=args.net) for r in range(args.repeats)
    ]
    plain_us = 1e6 / statistics.median(wall[plain])
    print(
        f"one loop, the audit's calls on in alternate chunks of {args.chunk} env steps (A B B A): "
        f"{statistics.median(inside):.1f}% wall (median of {args.repeats} loops; each: "
        f"{', '.join(f'{x:.1f}' for x in inside)}): {statistics.median(inside) * plain_us / 100:.2f} us an env "
        f"step of the plain loop's {plain_us:.1f} us"
    )
    print("overhead target: < 5% of the loop's wall time")
    costs = call_costs()
    per_step = costs["produced"] + (costs["sampled (batch 128)"] + costs["updated"]) / 4
    for name, us in costs.items():
        print(f"  {name:<32} {us:>8.2f} us a call")
    print(
        f"  per env step at UTD 0.25: {per_step:.2f} us, {100 * per_step / plain_us:.1f}% of the plain loop's "
        f"{plain_us:.0f} us (what the calls alone add)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
