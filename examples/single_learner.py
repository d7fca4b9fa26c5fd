"""The same training rewritten with one learner (dqnlab's design, Ape-X's split): N actor processes only
collect and send transitions; one learner alone updates the parameters and publishes them. Audited,
its report shows no update lost, whatever the number of workers.

    python examples/single_learner.py --workers 4 --steps 4000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import sys
import tempfile

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dqnlab.audit import Audit, report


def q_network() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))


def actor(w: int, steps: int, sync_every: int, shared: torch.Tensor, version, lock, out: mp.Queue, folder: str,
          learning_starts: int) -> None:  # fmt: skip
    torch.set_num_threads(1)
    audit = Audit(folder, learning_starts=learning_starts)  # the same run settings in every process
    rng = np.random.default_rng(w)
    net = q_network()
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=w)
    acting = 0
    for step in range(steps):
        if step % sync_every == 0:
            with lock:  # a consistent copy of the published parameters and their version
                torch.nn.utils.vector_to_parameters(shared.clone(), net.parameters())
                acting = version.value
        eps = max(0.05, 1.0 - step / 1000)
        with torch.no_grad():
            greedy = int(net(torch.as_tensor(obs, dtype=torch.float32)).argmax())
        action = int(rng.integers(2)) if rng.random() < eps else greedy
        next_obs, reward, terminated, truncated, _ = env.step(action)
        tag = audit.produced(w, acting, episode_end=terminated or truncated, reward=reward)
        out.put((obs, action, reward, next_obs, terminated, tag))
        obs = env.reset()[0] if terminated or truncated else next_obs
    audit.close()
    out.put(None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=4000, help="env steps over all workers")
    p.add_argument("--utd", type=float, default=1.0)
    p.add_argument("--sync-every", type=int, default=100)
    p.add_argument("--learning-starts", type=int, default=500)
    p.add_argument("--folder", default=None)
    args = p.parse_args(argv)
    folder = args.folder or tempfile.mkdtemp(prefix="audit-")
    torch.set_num_threads(1)
    net, target = q_network(), q_network()
    target.load_state_dict(net.state_dict())
    shared = torch.nn.utils.parameters_to_vector(net.parameters()).detach().clone().share_memory_()
    ctx = mp.get_context("spawn")
    version, lock, inbox = ctx.Value("l", 0), ctx.Lock(), ctx.Queue()
    per_worker = args.steps // args.workers
    procs = [ctx.Process(target=actor, args=(w, per_worker, args.sync_every, shared, version, lock, inbox, folder,
                                             args.learning_starts)) for w in range(args.workers)]  # fmt: skip
    for proc in procs:
        proc.start()
    audit = Audit(folder, learning_starts=args.learning_starts, q_fn=lambda o: net(torch.as_tensor(o)).detach().numpy())
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    buf: list[tuple] = []
    updates, owed, done = 0, 0.0, 0
    while done < args.workers:
        try:
            item = inbox.get(timeout=30)
        except queue.Empty:
            break
        if item is None:
            done += 1
            continue
        buf.append(item)
        if len(buf) <= args.learning_starts:
            continue
        owed += args.utd
        while owed >= 1.0:
            owed -= 1.0
            idx = rng.integers(0, len(buf), 64)
            batch = [buf[i] for i in idx]
            o, a, r, o2, d = (torch.as_tensor(np.asarray([b[k] for b in batch]), dtype=torch.float32) for k in range(5))
            audit.sampled(np.array([b[5] for b in batch]), updates, obs=o.numpy(), actions=a.numpy())
            with torch.no_grad():
                y = r + 0.99 * (1 - d) * target(o2).max(1).values
            loss = F.smooth_l1_loss(net(o).gather(1, a.long()[:, None]).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            updates += 1
            audit.updated(0, td_loss=loss.item())  # the one writer, in place
            with lock:
                shared.copy_(torch.nn.utils.parameters_to_vector(net.parameters()).detach())
                version.value = updates
            if updates % 250 == 0:
                target.load_state_dict(net.state_dict())
    audit.resident([b[5] for b in buf])
    audit.close()
    for proc in procs:
        proc.join()
    rep = report(folder)
    print(rep.summary())
    return 0 if rep.final["lost_updates"] == 0 and all(proc.exitcode == 0 for proc in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
