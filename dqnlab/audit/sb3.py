"""dqnlab.audit for Stable-Baselines3's DQN, as a callback (``pip install -e ".[bench]"``)::

    from dqnlab.audit.sb3 import AuditCallback
    model.learn(total_timesteps, callback=AuditCallback("results/audit-sb3", tracking_uri=None))

With any VecEnv (each env index is a "worker"; Box or Dict observations): the realised UTD as SB3's ``train_freq``,
``gradient_steps`` and ``n_envs`` make it (it falls as ``n_envs`` grows: ``train_freq`` counts vector
steps), each env's share of the env steps, of the buffer and of the sampled batches, the policy lag of
what is sampled, TD-free Q statistics and collapse signs on the sampled (current) data; logged through
SB3's logger under ``dqnlab/`` and, at the end, to MLflow when ``tracking_uri`` is given.

How it sees the batches without changing them: it wraps the replay buffer's ``_get_samples``, and
after each call re-draws, from the global numpy RNG state the call started from, the env indices SB3
drew (one ``np.random.randint``), then puts the RNG back where SB3 left it. A test compares the
recorded states with the batch SB3 returned, so a change of SB3's sampling fails loudly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dqnlab.audit.recorder import Audit
from dqnlab.audit.tags import worker_of

try:
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.utils import obs_as_tensor
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("dqnlab.audit.sb3 needs Stable-Baselines3: pip install -e '.[bench]'") from exc


def _as_numpy(observations):
    """A sampled batch's observations on the host: one tensor, or a dict of them (a Dict observation space)."""
    if isinstance(observations, dict):
        return {k: v.cpu().numpy() for k, v in observations.items()}
    return observations.cpu().numpy()


class AuditCallback(BaseCallback):
    """Audit an SB3 ``DQN`` run into ``folder`` (see the module docstring); logs every ``log_every``
    env steps."""

    def __init__(self, folder: str | Path, log_every: int = 1000, tracking_uri: str | None = None,
                 diag_every_updates: int = 250, verbose: int = 0):  # fmt: skip
        super().__init__(verbose)
        self.folder, self.log_every, self.tracking_uri = Path(folder), log_every, tracking_uri
        self.diag_every_updates = diag_every_updates
        self.updates = 0
        self._next_log = log_every

    def _on_training_start(self) -> None:
        import torch

        model, rb = self.model, self.model.replay_buffer
        if any(self.folder.glob("events-*.bin")):
            raise ValueError(f"AuditCallback: {self.folder} already holds an audited run (one folder per run: the "
                             "report reads every event file in it); give another folder")  # fmt: skip
        self.tags = np.zeros((rb.buffer_size, rb.n_envs), dtype=np.int64)
        self.sampled_counts = np.zeros(rb.n_envs, dtype=np.int64)
        q_net = model.q_net

        def q_fn(obs):
            with torch.no_grad():
                return q_net(obs_as_tensor(obs, model.device)).cpu().numpy()

        def features_fn(obs):
            with torch.no_grad():
                phi = q_net.extract_features(obs_as_tensor(obs, model.device), q_net.features_extractor)
                return q_net.q_net[:-1](phi).cpu().numpy()

        self.audit = Audit(self.folder, gamma=model.gamma, learning_starts=model.learning_starts, q_fn=q_fn,
                           features_fn=features_fn, diag_every_updates=self.diag_every_updates)  # fmt: skip
        original = rb._get_samples

        def recording(batch_inds, env=None):
            before = np.random.get_state()
            out = original(batch_inds, env)
            after = np.random.get_state()
            np.random.set_state(before)  # SB3 drew its env indices with one randint from this state
            env_indices = np.random.randint(0, high=rb.n_envs, size=(len(batch_inds),))
            np.random.set_state(after)  # and the RNG goes on exactly as SB3 left it
            self.last_indices = (batch_inds, env_indices)  # the rows SB3 drew (tests compare them with its batch)
            tags = self.tags[batch_inds, env_indices]
            self.sampled_counts += np.bincount(worker_of(tags), minlength=rb.n_envs)[: rb.n_envs]
            # the states SB3 trains on (normalised, under VecNormalize), for the Q diagnostics
            self.audit.sampled(tags, self.updates, obs=_as_numpy(out.observations), actions=_as_numpy(out.actions))
            self.updates += 1  # DQN takes one batch per gradient step
            self.audit.updated(0)
            return out

        rb._get_samples = recording
        self._original = original

    def _on_step(self) -> bool:
        rb = self.model.replay_buffer
        dones, rewards = self.locals["dones"], self.locals["rewards"]
        for i in range(rb.n_envs):  # this step's transitions land in row rb.pos (SB3 stores them next)
            self.tags[rb.pos, i] = self.audit.produced(i, self.updates, bool(dones[i]), float(rewards[i]))
        if self.num_timesteps >= self._next_log:
            self._next_log += self.log_every
            self._record()
        return True

    def _record(self) -> None:
        rb, model = self.model.replay_buffer, self.model
        size = rb.buffer_size if rb.full else rb.pos
        steps = model.num_timesteps - model.learning_starts
        self.logger.record("dqnlab/utd_realised", self.updates / steps if steps > 0 else float("nan"))
        resident = np.bincount(worker_of(self.tags[:size].ravel()), minlength=rb.n_envs)[: rb.n_envs]
        for i in range(rb.n_envs):
            self.logger.record(f"dqnlab/env{i}_resident_share", resident[i] / max(resident.sum(), 1))
            self.logger.record(f"dqnlab/env{i}_sampled_share", self.sampled_counts[i] / max(self.sampled_counts.sum(), 1))

    def _on_training_end(self) -> None:
        from dqnlab.audit.report import report

        rb = self.model.replay_buffer
        rb._get_samples = self._original
        size = rb.buffer_size if rb.full else rb.pos
        self.audit.resident(self.tags[:size])
        self.audit.close()
        self._record()
        self.report = report(self.folder)
        if self.tracking_uri is not None:
            self.report.log_mlflow(self.tracking_uri, run_name="sb3-dqn")
        if self.verbose:
            print(self.report.summary())
