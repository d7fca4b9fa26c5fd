"""The setup users describe: N processes, each holding a copy of the Q-network, training it on its own
data and writing it back to shared memory; instrumented with dqnlab.audit, which finds the updates
the writes overwrite.

    python examples/naive_copies.py --workers 4 --steps 4000

Each worker steps its own CartPole, keeps its own replay, syncs its copy from the shared parameters
every ``--sync-every`` env steps, and after every update writes its whole copy back (under a lock, so
no write tears: the updates are lost by overwriting, not by racing). A ledger travels with the
parameters (entry u is 1 in every copy that holds update u), so the example knows exactly which
updates the final parameters hold, and prints it beside the audit's count.

How many updates are lost depends on how the OS interleaves the writes: with more workers than cores a
worker often runs a burst of updates while the others wait, and a burst overwrites nothing of its own,
so the lost share falls below 1 - 1/N (about 0.49 with 3 workers on 2 cores). ``--take-turns`` makes
the workers go in lockstep, each env step a turn in a fixed order (0, 1, ..., N-1, 0, ...) in which a
worker syncs (when due) and writes back: the interleaving of N processes that each get a core. Between
two syncs each worker adds its own updates to the same pulled state and only the last writer's survive,
so about 1 - 1/N of the updates are lost, the same count on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dqnlab.audit import Audit, report


def q_network() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))


def worker(w: int, args, shared: torch.Tensor, counter, turn, lock, folder: str) -> None:
    torch.set_num_threads(1)
    audit = Audit(folder, learning_starts=args.learning_starts)
    rng = np.random.default_rng(w)
    net, target = q_network(), q_network()
    n_params = sum(p.numel() for p in net.parameters())
    copy = shared.clone()  # parameters, then the ledger

    def load(vector: torch.Tensor) -> None:
        torch.nn.utils.vector_to_parameters(vector[:n_params], net.parameters())

    def sync() -> None:  # under the lock
        copy.copy_(shared)
        audit.synced(w)
        load(copy)

    def write_back(loss: float) -> int:  # under the lock; returns the update's id
        uid = counter.value
        counter.value += 1
        copy[:n_params] = torch.nn.utils.parameters_to_vector(net.parameters()).detach()
        copy[n_params + uid] = 1.0  # the ledger: this copy now holds update uid
        audit.updated(w, td_loss=loss)
        shared.copy_(copy)  # the whole copy, the last writer wins
        audit.wrote(w)
        return uid

    with lock:
        sync()
    target.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=w)
    buf = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated")}
    tags = []  # the audit's tag of each transition, beside it
    owed = 0.0
    for step in range(args.steps // args.workers):
        eps = max(0.05, 1.0 - step * args.workers / 3000)
        with torch.no_grad():
            greedy = int(net(torch.as_tensor(obs, dtype=torch.float32)).argmax())
        action = int(rng.integers(2)) if rng.random() < eps else greedy
        next_obs, reward, terminated, truncated, _ = env.step(action)
        tags.append(audit.produced(w, counter.value, episode_end=terminated or truncated, reward=reward))
        for k, v in zip(buf, (obs, action, reward, next_obs, terminated)):
            buf[k].append(v)
        obs = env.reset()[0] if terminated or truncated else next_obs
        if args.take_turns:  # lockstep: this env step's sync and writes happen in this worker's turn
            lock.acquire()
            _wait_for_turn(w, turn, lock)
        try:
            if (step + 1) % args.sync_every == 0:
                with contextlib.nullcontext() if args.take_turns else lock:
                    sync()
            if step * args.workers < args.learning_starts:
                continue
            owed += args.utd
            while owed >= 1.0:
                owed -= 1.0
                idx = rng.integers(0, len(buf["obs"]), 64)
                o, a, r, o2, d = (torch.as_tensor(np.asarray(buf[k])[idx], dtype=torch.float32) for k in buf)
                audit.sampled(np.asarray(tags)[idx], counter.value)
                with torch.no_grad():
                    y = r + 0.99 * (1 - d) * target(o2).max(1).values
                loss = F.smooth_l1_loss(net(o).gather(1, a.long()[:, None]).squeeze(1), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                with contextlib.nullcontext() if args.take_turns else lock:
                    uid = write_back(loss.item())
                if uid % 250 == 0:
                    target.load_state_dict(net.state_dict())
        finally:
            if args.take_turns:
                turn.value = (w + 1) % args.workers
                lock.notify_all()
                lock.release()
    audit.resident(tags)  # this worker's buffer (the report sums the workers' snapshots)
    audit.close()


def _wait_for_turn(w: int, turn, lock, timeout_s: float = 300.0) -> None:
    """Block (holding ``lock``, a Condition) until it is worker ``w``'s turn; a worker that
    died would stall the others forever, so a turn that does not come within ``timeout_s`` is an error."""
    if not lock.wait_for(lambda: turn.value == w, timeout=timeout_s):
        raise RuntimeError(f"worker {w}: no turn to write within {timeout_s:.0f} s (worker {turn.value} stalled)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=4000, help="env steps over all workers")
    p.add_argument("--utd", type=float, default=1.0, help="updates per env step, per worker")
    p.add_argument("--sync-every", type=int, default=100)
    p.add_argument("--learning-starts", type=int, default=500)
    p.add_argument(
        "--take-turns",
        action="store_true",
        help="lockstep: each env step a turn in the order 0..N-1 (the same lost count on any machine, ~1 - 1/N)",
    )
    p.add_argument("--folder", default=None, help="where the audit's events go (default: a temporary folder)")
    args = p.parse_args(argv)
    folder = args.folder or tempfile.mkdtemp(prefix="audit-")
    n_params = sum(p.numel() for p in q_network().parameters())
    shared = torch.zeros(n_params + args.steps * 2).share_memory_()
    shared[:n_params] = torch.nn.utils.parameters_to_vector(q_network().parameters()).detach()
    ctx = mp.get_context("spawn")
    counter, turn, lock = ctx.Value("l", 0), ctx.Value("l", 0), ctx.Condition(ctx.Lock())
    procs = [ctx.Process(target=worker, args=(w, args, shared, counter, turn, lock, folder)) for w in range(args.workers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    if any(proc.exitcode for proc in procs):
        return 1
    applied = counter.value
    kept = int(shared[n_params : n_params + applied].sum())
    rep = report(folder)
    print(rep.summary())
    print(f"ledger: {applied} updates applied, {kept} held by the final parameters: {applied - kept} lost")
    print(f"audit:  {rep.final['lost_updates']:.0f} lost")
    return 0 if rep.final["lost_updates"] == applied - kept else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
