"""A CleanRL-style single-file DQN (the structure of cleanrl/dqn.py: one env, a numpy replay, a target
copied every few hundred env steps), instrumented with dqnlab.audit in five lines (marked ``# audit``).

    python examples/cleanrl_dqn.py --total-timesteps 50000

The report gives what the script never printed: the realised UTD its train_frequency makes, the
policy lag of what it trains on, and the Q-value signs on the data it trains on now.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dqnlab.audit import Audit, report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-timesteps", type=int, default=50_000)
    p.add_argument("--learning-rate", type=float, default=2.5e-4)
    p.add_argument("--buffer-size", type=int, default=10_000)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--target-network-frequency", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--exploration-fraction", type=float, default=0.5)
    p.add_argument("--learning-starts", type=int, default=10_000)
    p.add_argument("--train-frequency", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--audit", default=None, help="the audit's folder (default: a temporary one)")
    args = p.parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    env = gym.make("CartPole-v1")
    q_network = nn.Sequential(nn.Linear(4, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 2))
    target_network = nn.Sequential(nn.Linear(4, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 2))
    target_network.load_state_dict(q_network.state_dict())
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
    features = q_network[:-1]
    audit = Audit(args.audit or tempfile.mkdtemp(prefix="audit-"), gamma=args.gamma, learning_starts=args.learning_starts,
                  diag_every_updates=100,
                  q_fn=lambda o: q_network(torch.as_tensor(o)).detach().numpy(),
                  features_fn=lambda o: features(torch.as_tensor(o)).detach().numpy())  # audit  # fmt: skip
    size, pos, updates = 0, 0, 0
    buf_obs = np.zeros((args.buffer_size, 4), np.float32)
    buf_next = np.zeros((args.buffer_size, 4), np.float32)
    buf_act = np.zeros(args.buffer_size, np.int64)
    buf_rew = np.zeros(args.buffer_size, np.float32)
    buf_term = np.zeros(args.buffer_size, np.float32)
    buf_tag = np.zeros(args.buffer_size, np.int64)  # audit: the tag beside each transition
    obs, _ = env.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        fraction = min(1.0, global_step / (args.exploration_fraction * args.total_timesteps))
        epsilon = 1.0 + fraction * (0.05 - 1.0)
        if random.random() < epsilon:
            action = env.action_space.sample()
        else:
            action = int(q_network(torch.as_tensor(obs)).argmax())
        next_obs, reward, terminated, truncated, _ = env.step(action)
        buf_obs[pos], buf_next[pos], buf_act[pos], buf_rew[pos], buf_term[pos] = obs, next_obs, action, reward, terminated
        buf_tag[pos] = audit.produced(0, updates, episode_end=terminated or truncated, reward=reward)  # audit
        pos, size = (pos + 1) % args.buffer_size, min(size + 1, args.buffer_size)
        obs = env.reset()[0] if terminated or truncated else next_obs
        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            idx = np.random.randint(0, size, args.batch_size)
            audit.sampled(buf_tag[idx], updates, obs=buf_obs[idx], actions=buf_act[idx])  # audit
            with torch.no_grad():
                target_max = target_network(torch.as_tensor(buf_next[idx])).max(dim=1).values
                td_target = torch.as_tensor(buf_rew[idx]) + args.gamma * target_max * (1 - torch.as_tensor(buf_term[idx]))
            old_val = q_network(torch.as_tensor(buf_obs[idx])).gather(1, torch.as_tensor(buf_act[idx])[:, None]).squeeze(1)
            loss = F.mse_loss(td_target, old_val)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            updates += 1
            audit.updated(0, td_loss=loss.item())  # audit
        if global_step > args.learning_starts and global_step % args.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())
    audit.resident(buf_tag[:size])
    audit.close()
    print(report(audit.folder).summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
