"""Benchmark: the learner's run-updates/s on the CPU and on a CUDA GPU, side by side (prints; not a test).

    python -m dqnlab.bench.device [--quick] [--widths 64,256,1024] [--batches 32,128,512] [--replicas 1,16]

For every width (two hidden layers of that width), batch size and replica count: dqnlab's
:class:`~dqnlab.agent.learner.Learner` doing its real update (double DQN, Huber, per-replica
clipping, Adam over the stacked parameter matrix (agent/adam.py), hard target copy every 500
updates), fed each update a fresh batch from host
memory as the engine does. Rows:
- ``cpu eager``: one torch thread, as the engine's learner runs by default;
- ``cuda eager``: the same update on the GPU (host -> device copy of each batch included);
- ``cuda graph``: the learner's own gradient step (forwards, backward, clipping, Adam: tensor ops
  with no host sync) captured once in a CUDA graph and replayed (the batch copied into static device
  tensors; the target copy stays outside the graph, on its schedule). Small networks gain on a GPU
  mainly from graphs, since an eager update is dozens of tiny kernel launches (LeanRL: compile +
  CUDA graphs 3.4-6.8x).
On a machine without CUDA only the CPU rows run, and the table says so. A row that fails prints its
error and the rest go on: the script is meant to run once, unattended, within a short GPU lease.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from dqnlab.agent.batch import Batch
from dqnlab.agent.learner import Learner
from dqnlab.config import Config
from dqnlab.threads import set_threads

OBS_DIM, NUM_ACTIONS = 4, 2  # CartPole-v1


def synthetic_batches(replicas: int, batch: int, count: int, seed: int = 0) -> list[Batch]:
    """``count`` distinct batches ``(K, B, ...)`` of CartPole-shaped transitions in host memory."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        shape = (replicas, batch)
        obs = rng.standard_normal((*shape, OBS_DIM)).astype(np.float32)
        zeros = np.zeros(shape, np.int64)
        out.append(Batch(obs=obs, actions=rng.integers(0, NUM_ACTIONS, shape), rewards=np.ones(shape, np.float32),
                         next_obs=obs + 0.01, terminated=rng.random(shape) < 0.02, worker=zeros, version=zeros,
                         insert_updates=zeros))  # fmt: skip
    return out


def make_learner(device: str, width: int, batch: int, replicas: int) -> Learner:
    config = Config.from_flat(hidden_sizes=(width, width), batch_size=batch, replicas=replicas)
    return Learner(config, OBS_DIM, NUM_ACTIONS, device=device)


def eager_rate(device: str, width: int, batch: int, replicas: int, updates: int) -> float:
    """Run-updates/s of ``Learner.update`` on ``device``."""
    learner = make_learner(device, width, batch, replicas)
    batches = synthetic_batches(replicas, batch, 8)
    for i in range(10):
        learner.update(batches[i % 8])
    _sync(device)
    t = time.perf_counter()
    for i in range(updates):
        learner.update(batches[i % 8])
    _sync(device)
    return updates * replicas / (time.perf_counter() - t)


class GraphedUpdate:
    """The learner's gradient step (:meth:`~dqnlab.agent.learner.Learner.gradient_step`: forwards, TD
    target, Huber loss, hand-written backward, per-replica clipping, Adam; no host sync) captured in one
    CUDA graph and replayed per update (CUDA only). Outside the graph, through the learner's own
    :meth:`~dqnlab.agent.learner.Learner.finish_update`: the update count, the loss sum and the target
    copy on its schedule. Every replica is active (the benchmark has no divergence)."""

    def __init__(self, learner: Learner, batch: Batch):
        if learner.device.type != "cuda":
            raise ValueError(f"device: CUDA graphs need a cuda learner, got {learner.device.type!r}")
        self.learner = learner
        self.static = learner.batch_tensors(batch)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up on a side stream, as torch.cuda.graph requires
            for _ in range(3):
                learner.gradient_step(*self.static)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = learner.gradient_step(*self.static)

    def __call__(self, batch: Batch) -> None:
        for dst, src in zip(self.static, batch.learner_arrays()):
            dst.copy_(torch.from_numpy(src), non_blocking=True)
        self.graph.replay()
        self.learner.finish_update(self.out)


def graph_rate(width: int, batch: int, replicas: int, updates: int) -> float:
    """Run-updates/s of the graphed update on CUDA."""
    learner = make_learner("cuda", width, batch, replicas)
    batches = synthetic_batches(replicas, batch, 8)
    step = GraphedUpdate(learner, batches[0])
    for i in range(10):
        step(batches[i % 8])
    _sync("cuda")
    t = time.perf_counter()
    for i in range(updates):
        step(batches[i % 8])
    _sync("cuda")
    return updates * replicas / (time.perf_counter() - t)


def measure(mode: str, width: int, batch: int, replicas: int, updates: int) -> float:
    """One measurement of a row's ``mode`` (the GPU modes take 4x the updates: each is cheaper)."""
    if mode == "cpu eager":
        return eager_rate("cpu", width, batch, replicas, updates)
    if mode == "cuda eager":
        return eager_rate("cuda", width, batch, replicas, updates * 4)
    if mode == "cuda graph":
        return graph_rate(width, batch, replicas, updates * 4)
    raise ValueError(f"mode: got {mode!r}; allowed: 'cpu eager', 'cuda eager', 'cuda graph'")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dqnlab.bench.device", description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=_ints, default=[64, 256, 1024])
    parser.add_argument("--batches", type=_ints, default=[32, 128, 512])
    parser.add_argument("--replicas", type=_ints, default=[1, 16])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer updates per measurement")
    parser.add_argument("--updates", type=int, default=0, help="updates per CPU measurement (default: by size)")
    args = parser.parse_args(argv)
    set_threads(1)
    torch.set_flush_denormal(True)  # as the engine's learner runs (dqnlab.threads.learner_cpu)
    cuda = torch.cuda.is_available()
    print(f"torch {torch.__version__}; CUDA: {torch.cuda.get_device_name(0) if cuda else 'not available'}")
    modes = ["cpu eager"] + (["cuda eager", "cuda graph"] if cuda else [])
    header = f"{'width':>5} {'batch':>5} {'K':>3}  " + "  ".join(f"{m + ' run-upd/s':>20}" for m in modes)
    print(header + ("  cuda graph / cpu" if cuda else ""))
    for width in args.widths:
        for batch in args.batches:
            for k in args.replicas:
                # about the same wall time per row: fewer updates where one update is dearer (x0.1 to x4)
                base = 100 if args.quick else 400
                scale = min(4.0, max(0.1, (64 * 128 / (width * batch)) ** 0.75))
                updates = args.updates or max(10, int(base * scale))
                rates = {}
                for mode in modes:
                    try:
                        runs = [measure(mode, width, batch, k, updates) for _ in range(args.repeats)]
                        rates[mode] = statistics.median(runs)
                    except Exception as e:  # noqa: BLE001 - report the row, keep the run going
                        rates[mode] = float("nan")
                        print(f"  {mode} failed at width {width}, batch {batch}, K {k}: {type(e).__name__}: {e}")
                cells = "  ".join(f"{rates[m]:>20.0f}" for m in modes)
                ratio = f"  {rates['cuda graph'] / rates['cpu eager']:.2f}x" if cuda else ""
                print(f"{width:>5} {batch:>5} {k:>3}  {cells}{ratio}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
