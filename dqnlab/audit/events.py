"""The audit's event files: one per process of a run, appended by :class:`dqnlab.audit.recorder.Audit`
and merged in time order by :func:`read_events` for :mod:`dqnlab.audit.report`. The format the two
share, in one place: each event is six float64 (:data:`RECORD`), its kind one of the constants below."""

from __future__ import annotations

from pathlib import Path

import numpy as np

EVENT = np.dtype([("t", "f8"), ("kind", "i4"), ("who", "i4"), ("a", "f8"), ("b", "f8"), ("c", "f8")])
"""One event as :func:`read_events` returns it: its time, kind, the worker or writer it concerns, and up
to three numbers."""
RECORD = np.dtype([(name, "f8") for name in EVENT.names])
"""One event as written: six float64 (kind and who are small integers, exact as floats). A flat list of
floats turns into these records ~5x faster than a list of tuples into :data:`EVENT`."""
# kinds; for each: who, a, b, c
PRODUCED = 1  # worker; env steps it produced (cumulative, this process); episodes it finished (cumulative)
SAMPLED = 2  # worker; batch elements drawn from it (cumulative, this process)
LAG = 3  # -1; sum of policy lags (cumulative); max lag (so far); batch elements (cumulative)
RESIDENT = 4  # worker; its transitions resident in the buffer now (a snapshot from one call)
UPDATE = 5  # writer; its updates (cumulative, this process); TD loss of this update (NaN if not given); 1 at a
# log point (its snapshot of the counts just before it), else NaN: one update, recorded in its order among the
# reads and writes (a process that has read or written the parameters)
SYNC = 6  # writer: its copy took the shared parameters
WRITE = 7  # writer: its whole copy replaced the shared parameters (last writer wins)
WRITE_BEGIN = 8  # writer: a write into the shared parameters starts (in place: hogwild, pushed gradients)
WRITE_END = 9  # writer: it ends
DIAG = 10  # diagnostic id (DIAG_NAMES); its value
CONFIG = 11  # -1; gamma; reward bound (NaN: from the rewards); learning starts (env steps)
REWARD = 12  # -1; largest |reward| seen by this process so far
SUBSAMPLED = 13  # -1; the fraction of sampled batches counted; batches counted (cumulative, this process; NaN
# in the first record): written only when the fraction is below 1
UPDATES = 14  # writer; its updates (cumulative, this process): the ones since its previous UPDATE(S), counted
# (a process that has not read or written the parameters: one learner whose order among writes does not matter)
LOSS = 15  # -1; sum of the TD losses given since the previous LOSS record of this process; their number
DIAG_NAMES = ("q_mean", "q_max", "q_min", "q_p05", "q_p50", "q_p95", "q_abs_max_current", "srank_current",
              "dormant_frac_tau0_current", "dormant_frac_tau0.1_current")  # fmt: skip


def read_events(folder: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Every event of every process of a run in time order (ties: file, then file order), and the index
    of the file (the process) each came from."""
    files = sorted(Path(folder).glob("events-*.bin"))
    parts = [_as_events(np.fromfile(f, dtype=RECORD)) for f in files]
    if not parts or not sum(p.size for p in parts):
        raise FileNotFoundError(f"{folder}: no audit events (events-*.bin); did the run call Audit(...).flush()?")
    events = np.concatenate(parts)
    source = np.concatenate([np.full(p.size, i) for i, p in enumerate(parts)])
    order = np.lexsort((np.arange(events.size), source, events["t"]))
    return events[order], source[order]


def _as_events(records: np.ndarray) -> np.ndarray:
    """Written records (:data:`RECORD`) as :data:`EVENT` rows."""
    events = np.empty(records.size, dtype=EVENT)
    for name in EVENT.names:
        events[name] = records[name]
    return events
