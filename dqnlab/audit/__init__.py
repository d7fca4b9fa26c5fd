"""Audit your own parallel DQN: the measurements dqnlab's engine reports (worker shares, policy lag,
realised UTD, lost updates and raced writes, Q statistics and collapse signs), for a training script
you already have. Three calls in the usual case::

    from dqnlab.audit import Audit, report
    audit = Audit("results/audit")                               # in every process
    tag = audit.produced(worker, version, done)                  # actor: keep tag with the transition
    audit.sampled(batch_tags, version); audit.updated(writer)    # learner
    print(report("results/audit").summary())                     # afterwards

See :class:`Audit` for the rest (several writers, the buffer's resident share, the Q function) and
:mod:`dqnlab.audit.sb3` for Stable-Baselines3's DQN.
"""

from dqnlab.audit.events import read_events
from dqnlab.audit.recorder import Audit
from dqnlab.audit.report import AuditReport, report

__all__ = ["Audit", "AuditReport", "read_events", "report"]
