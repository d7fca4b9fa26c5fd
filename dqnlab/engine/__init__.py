"""The engine: many actor processes collect into one shared replay; one learner alone writes the
parameters; a rate limiter holds the UTD. Roles, one module each:

- ``shared``: anonymous shared memory; ``replay``: the ring, claims and commits, sampling, shares;
  ``limiter``: the UTD rule; ``weights``: the seqlock broadcast (learner writes, actors read);
- ``actor``: one worker's collection step (both modes); ``workers``: starting, stopping and watching
  the actors;
- ``build``: one builder for serial and parallel runs; ``loop``: the learner loop (it schedules);
  ``window``: what a log point reports; ``meters``: lag and throughput; ``evaluator``: when to
  evaluate; ``result``: what a run returns; ``train``: the entry point; ``fresh_process``: a run in a
  fresh thread-free process (sweeps, threaded callers).
"""

from dqnlab.engine.entry import inspect_env, train
from dqnlab.engine.result import ReplicaResult, RunFailed, RunResult
from dqnlab.engine.workers import WorkerFailed

__all__ = ["ReplicaResult", "RunFailed", "RunResult", "WorkerFailed", "inspect_env", "train"]
