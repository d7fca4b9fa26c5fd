"""What an audited run measured, from its event files: the report dqnlab's engine gives, in its metric
vocabulary (:mod:`dqnlab.metrics`): per-worker produced, resident, sampled and episode shares, policy
lag, the realised UTD over time, lost updates and raced writes, TD loss, Q statistics and collapse
signs on current data; as a table over time, a console summary, a figure and MLflow metrics.

Lost updates are reconstructed from the order of events (:class:`Lineage`): every update gets
an id; a writer that writes its copy back keeps the ids its copy holds, a writer that never does
applies its updates to the shared parameters in place; a read (``synced``) makes a copy the shared
parameters, a write (``wrote``) makes the shared parameters the copy. An update is lost when the
shared parameters no longer hold it. Exact where each update that can race a write back is recorded in
its order (every update of a process that reads or writes the parameters); updates counted at log
points (a process that never does) are placed there, and the summary says so when copies are written
back by others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dqnlab import metrics as M
from dqnlab.audit.events import (
    CONFIG,
    DIAG,
    DIAG_NAMES,
    LAG,
    LOSS,
    PRODUCED,
    RESIDENT,
    REWARD,
    SAMPLED,
    SUBSAMPLED,
    SYNC,
    UPDATE,
    UPDATES,
    WRITE,
    WRITE_BEGIN,
    WRITE_END,
    read_events,
)
from dqnlab.audit.recorder import close_live


@dataclass
class _State:
    produced: dict = field(default_factory=dict)  # (source, worker) -> cumulative env steps
    episodes: dict = field(default_factory=dict)
    sampled: dict = field(default_factory=dict)  # (source, worker) -> cumulative batch elements
    lag: dict = field(default_factory=dict)  # source -> (sum, max, n)
    resident: dict = field(default_factory=dict)  # source -> {worker: transitions}, its latest complete snapshot
    pending_resident: dict = field(default_factory=dict)  # source -> the snapshot being read
    updates: int = 0
    recorded: dict = field(default_factory=dict)  # (source, writer) -> its updates recorded so far
    td_sum: float = 0.0  # TD losses since the previous row: their sum and number
    td_n: float = 0.0
    td_loss: float = math.nan
    diag: dict = field(default_factory=dict)
    reward_max: float = 0.0
    writes: int = 0
    raced: int = 0
    open_writes: dict = field(default_factory=dict)  # writer -> raced so far


class Lineage:
    """Which updates the shared parameters hold, given the writers that write whole copies back (the others
    apply updates in place). A writer is any hashable key: the report keys each by (process, writer id), as
    a copy lives in one process.

    Counts, not sets, O(1) an event: a copy is the shared parameters at its last read (a set of earlier
    updates, all of them published) plus its own updates since (new ids, disjoint from it; published only
    by its own writes), so every size the counts need is a sum: the shared parameters hold ``base + own``
    after a copy's write, ``+ count`` after in-place updates. (A set of update ids per copy, as a bitset,
    made the report quadratic in the updates.) ``tests/test_audit.py`` holds it equal to the sets."""

    def __init__(self, copy_writers: set):
        self.copy_writers = copy_writers
        self.applied = 0
        self.shared = 0
        """Updates the shared parameters hold."""
        self.published = 0
        """Updates that reached the shared parameters at some point (written back, or applied in place):
        a superset of those they hold."""
        self._copies: dict = {}  # writer -> [updates its copy took at its last read, its own since, own published]

    def update(self, writer, count: int = 1) -> None:
        """``count`` updates by ``writer``, in a row."""
        self.applied += count
        if writer in self.copy_writers:
            self._copies.setdefault(writer, [0, 0, 0])[1] += count
        else:
            self.shared += count
            self.published += count

    def sync(self, writer) -> None:
        self._copies[writer] = [self.shared, 0, 0]

    def write(self, writer) -> None:
        copy = self._copies.setdefault(writer, [0, 0, 0])  # a copy never read: its own updates alone
        base, own, own_published = copy
        self.shared = base + own
        self.published += own - own_published
        copy[2] = own

    @property
    def lost(self) -> int:
        """Updates that reached the shared parameters and were overwritten since (an update still only in
        a copy, about to be written, is not counted)."""
        return self.published - self.shared

    @property
    def missing(self) -> int:
        """Updates applied whose effect the shared parameters do not hold: at the end of a run, the exact
        lost count (what the final parameters lack)."""
        return self.applied - self.shared


def _copy_writers(events: np.ndarray, source: np.ndarray) -> set[tuple[int, int]]:
    """The (process, writer) pairs that write whole copies back."""
    writes = events["kind"] == WRITE
    return {(int(src), int(w)) for src, w in zip(source[writes], events["who"][writes])}


@dataclass
class AuditReport:
    """``timeline``: one row each time the updates pass a multiple of ``every_updates`` (and at the end;
    a process that counts its updates records them at its log points, every ``diag_every_updates``, so
    rows are no finer than that), its columns named as dqnlab names them; ``final``: its last row;
    ``workers``: the worker ids seen."""

    timeline: pd.DataFrame
    workers: list[int]
    config: dict[str, float]

    @property
    def final(self) -> dict[str, float]:
        return {k: v for k, v in self.timeline.iloc[-1].items() if not (isinstance(v, float) and math.isnan(v))}

    def summary(self) -> str:
        f = self.final
        lines = [f"audit: {f.get(M.ENV_STEPS, 0):.0f} env steps, {f.get(M.UPDATES, 0):.0f} updates, realised UTD "
                 f"{f.get(M.UTD_REALISED, math.nan):.4f} (updates / (env steps - learning starts "
                 f"{self.config['learning_starts']:.0f}))"]  # fmt: skip
        if M.POLICY_LAG_RUN_MEAN in f:
            lag_max = f.get(M.POLICY_LAG_RUN_MAX, 0)
            lines.append(f"policy lag: mean {f[M.POLICY_LAG_RUN_MEAN]:.1f}, max {lag_max:.0f} updates")
        fraction = self.config.get("sampled_fraction", 1.0)
        if fraction < 1.0:
            n = self.config.get("batches_counted", 0.0)
            shares = [f.get(M.worker_share(w, "sampled"), math.nan) for w in self.workers]
            p = max((x for x in shares if x == x), key=lambda x: x * (1 - x), default=math.nan)
            bound = math.sqrt(p * (1 - p) * (1 - fraction) / n) if n else math.nan
            lines.append(f"sampled shares and policy lag estimated from a random {fraction:.0%} of the sampled batches "
                         f"({n:.0f} counted; max lag: over those): a share's standard error <= {bound:.4f} whatever the "
                         "replay draws, sqrt(batch size) times less if draws within a batch are independent")  # fmt: skip
        lines.append(f"lost updates: {f.get(M.LOST_UPDATES, 0):.0f} ({f.get(M.LOST_UPDATE_FRAC, 0):.1%} of the updates"
                     f"; effective UTD {f.get('utd_effective', math.nan):.4f}); raced writes: "
                     f"{f.get(M.RACED_WRITE_FRAC, 0):.1%}")  # fmt: skip
        if self.config.get("in_place_placed_at_log_points"):
            lines.append("  (approximate: in-place updates of a process that never read or wrote the parameters are placed "
                         "at its log points among the copies written back; wrap each in `with audit.writing(w):`)")
        lines.append("worker  produced  resident  sampled  episodes")
        for w in self.workers:
            row = [f.get(M.worker_share(w, k), math.nan) for k in M.SHARE_KINDS]
            lines.append(f"{w:>6}  " + "  ".join(f"{v:8.3f}" for v in row))
        q = [f"{n}={f[n]:.3g}" for n in (M.TD_LOSS, M.Q_MEAN, M.Q_MAX, M.Q_ABS_MAX_CURRENT, M.SRANK_CURRENT,
                                          M.DORMANT_CURRENT[0.1], M.SOFT_DIVERGENCE) if n in f]  # fmt: skip
        if q:
            lines.append("Q on current data: " + " ".join(q))
        return "\n".join(lines)

    def figure(self):
        import matplotlib.pyplot as plt

        t = self.timeline
        fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
        shares = pd.DataFrame({k: [self.final.get(M.worker_share(w, k), 0.0) for w in self.workers]
                               for k in M.SHARE_KINDS}, index=[f"worker {w}" for w in self.workers])  # fmt: skip
        shares.plot.bar(ax=axes[0], rot=0)
        axes[0].set(ylabel="share (fraction)", title="each worker's share")
        axes[1].plot(t[M.ENV_STEPS], t[M.UTD_REALISED], label="realised")
        if "utd_effective" in t:
            axes[1].plot(t[M.ENV_STEPS], t["utd_effective"], label="effective (updates kept)")
        axes[1].set(xlabel="env steps", ylabel="updates per env step", title="replay ratio")
        axes[1].legend(fontsize=8)
        if M.POLICY_LAG_RUN_MEAN in t:
            axes[2].plot(t[M.ENV_STEPS], t[M.POLICY_LAG_RUN_MEAN])
        axes[2].set(xlabel="env steps", ylabel="updates", title="policy lag (mean so far)")
        axes[3].plot(t[M.ENV_STEPS], t[M.LOST_UPDATE_FRAC], label="lost updates")
        axes[3].plot(t[M.ENV_STEPS], t[M.RACED_WRITE_FRAC], label="raced writes")
        axes[3].set(xlabel="env steps", ylabel="fraction", title="overwritten updates, raced writes")
        axes[3].legend(fontsize=8)
        fig.tight_layout()
        return fig

    def log_mlflow(self, tracking_uri: str | None = None, experiment: str = "audit", run_name: str | None = None) -> str:
        """Every timeline row as MLflow metrics (``<section>/<name>``, step = env steps) in a new run of
        ``experiment``; returns its id."""
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri)
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
        run_id = client.create_run(exp_id, run_name=run_name, tags={"dqnlab.role": "audit"}).info.run_id
        batch = []
        for _, row in self.timeline.iterrows():
            step = int(row[M.ENV_STEPS])
            for k, v in row.items():
                if isinstance(v, (int, float, np.floating)) and math.isfinite(v):
                    batch.append(Metric(_key(k), float(v), 0, step))
        for i in range(0, len(batch), 1000):
            client.log_batch(run_id, metrics=batch[i : i + 1000])
        client.set_terminated(run_id)
        return run_id


def _key(name: str) -> str:
    try:
        return M.display_key(name)
    except KeyError:
        return f"audit/{name}"


def _run_settings(cfg: np.ndarray) -> dict[str, float]:
    """The run's gamma, reward bound and learning_starts, which every process's Audit was given; ValueError
    naming the argument if the processes were given different values (a default in an actor's Audit and
    the real value in the learner's would print a realised UTD or a soft-divergence bound of the wrong run)."""
    settings = {"gamma": 0.99, "reward_bound": math.nan, "learning_starts": 0.0}
    for name, column in zip(settings, ("a", "b", "c")):
        values = {None if math.isnan(v) else float(v) for v in cfg[column]}  # None: not given (reward_bound)
        if len(values) > 1:
            given = sorted(values, key=lambda v: (v is None, v or 0.0))
            raise ValueError(f"Audit({name}=...): the run's processes were given different values {given}; "
                             f"allowed: one value, the same in every process's Audit(...)")  # fmt: skip
        if values:
            settings[name] = math.nan if None in values else values.pop()
    return settings


def report(folder: str | Path, every_updates: int | None = None) -> AuditReport:
    """Reconstruct an audited run from its event files (see the module docstring). This process's own
    Audits into ``folder`` are flushed first (a report straight after the loop sees all of it)."""
    close_live(folder)
    events, source = _in_place_updates_at_their_writes(*read_events(folder))
    config = _run_settings(events[events["kind"] == CONFIG])
    sub = events["kind"] == SUBSAMPLED
    config["sampled_fraction"] = float(events["a"][sub].min()) if sub.any() else 1.0
    counted: dict[int, float] = {}  # process -> batches counted, its latest record
    for src, n in zip(source[sub], events["b"][sub]):
        if not math.isnan(n):
            counted[int(src)] = float(n)
    config["batches_counted"] = sum(counted.values())
    total_updates = _total_updates(events, source)
    every = every_updates or max(1, total_updates // 100)
    book = Lineage(_copy_writers(events, source))  # a copy lives in one process: keyed by (process, writer)
    config["in_place_placed_at_log_points"] = float(_counted_in_place_among_copies(events, source, book.copy_writers))
    s, rows, row_due = _State(), [], False
    t0 = float(events["t"][0])  # time_s: seconds since the run's first event
    workers: set[int] = set()
    for e, src in zip(events, source):
        kind, who = int(e["kind"]), int(e["who"])
        if kind == PRODUCED:
            s.produced[(src, who)], s.episodes[(src, who)] = e["a"], e["b"]
            workers.add(who)
        elif kind == SAMPLED:
            s.sampled[(src, who)] = e["a"]
        elif kind == LAG:
            s.lag[src] = (e["a"], e["b"], e["c"])
        elif kind == RESIDENT:  # each process's buffer: its latest snapshot (several buffers add up)
            if who >= 0:
                s.pending_resident.setdefault(src, {})[who] = e["a"]
            else:
                s.resident[src] = s.pending_resident.pop(src, {})
        elif kind == REWARD:
            s.reward_max = max(s.reward_max, e["a"])
        elif kind == DIAG:
            s.diag[DIAG_NAMES[who]] = e["a"]
        elif kind in (UPDATE, UPDATES):  # one update in its order, or those counted since the last record
            count = int(e["a"]) - s.recorded.get((src, who), 0)  # both carry the writer's running total
            s.recorded[(src, who)] = int(e["a"])
            if count:
                book.update((int(src), who), count)
                before, s.updates = s.updates, s.updates + count
                if kind == UPDATE and not math.isnan(e["b"]):
                    s.td_sum, s.td_n = s.td_sum + e["b"], s.td_n + 1
                row_due |= s.updates // every > before // every
            # a row closes where a process's snapshot of its counts ends (an UPDATES record, or the UPDATE
            # of a log point): closed at any other update, it would read the previous snapshot's counts
            if row_due and (kind == UPDATES or e["c"] == 1.0):
                rows.append(_row(s, book, e["t"] - t0, config, workers))
                row_due = False
        elif kind == LOSS:
            s.td_sum, s.td_n = s.td_sum + e["a"], s.td_n + e["b"]
        elif kind == SYNC:
            book.sync((int(src), who))
        elif kind == WRITE:
            book.write((int(src), who))
        elif kind == WRITE_BEGIN:  # keyed by (process, writer): two processes may reuse a writer id
            if s.open_writes:
                s.open_writes = dict.fromkeys(s.open_writes, True)
            s.open_writes[(src, who)] = bool(s.open_writes)
        elif kind == WRITE_END and (src, who) in s.open_writes:
            s.writes += 1
            s.raced += s.open_writes.pop((src, who))
    last = _row(s, book, events["t"][-1] - t0, config, workers)
    env_steps, starts = last[M.ENV_STEPS], config["learning_starts"]
    last[M.LOST_UPDATES] = book.missing  # the end: what the final parameters lack
    last[M.LOST_UPDATE_FRAC] = book.missing / s.updates if s.updates else 0.0
    last["utd_effective"] = (s.updates - book.missing) / (env_steps - starts) if env_steps > starts else math.nan
    rows.append(last)
    timeline = pd.DataFrame(rows).drop_duplicates(subset=[M.UPDATES, M.ENV_STEPS], keep="last").reset_index(drop=True)
    return AuditReport(timeline, sorted(workers), config)


def _row(s: _State, book: Lineage, t: float, config: dict, workers: set[int]) -> dict[str, float]:
    produced = _by_worker(s.produced)
    env_steps = sum(produced.values())
    starts = config["learning_starts"]
    row: dict[str, float] = {M.ENV_STEPS: env_steps, M.UPDATES: s.updates, M.TIME_S: t}
    row[M.UTD_REALISED] = s.updates / (env_steps - starts) if env_steps > starts else math.nan
    row[M.LOST_UPDATES] = book.lost
    row[M.LOST_UPDATE_FRAC] = book.lost / s.updates if s.updates else 0.0
    row["utd_effective"] = (s.updates - book.lost) / (env_steps - starts) if env_steps > starts else math.nan
    row[M.RACED_WRITE_FRAC] = s.raced / s.writes if s.writes else 0.0
    lag_sum = sum(v[0] for v in s.lag.values())
    lag_n = sum(v[2] for v in s.lag.values())
    if lag_n:
        row[M.POLICY_LAG_RUN_MEAN] = lag_sum / lag_n
        row[M.POLICY_LAG_RUN_MAX] = max(v[1] for v in s.lag.values())
    episodes, sampled = _by_worker(s.episodes), _by_worker(s.sampled)
    resident = _by_worker({(src, w): v for src, snap in s.resident.items() for w, v in snap.items()})
    for kind, counts in (("produced", produced), ("resident", resident), ("sampled", sampled), ("episodes", episodes)):
        total = sum(counts.values())
        for w in workers:
            row[M.worker_share(w, kind)] = counts.get(w, 0.0) / total if total else math.nan
    if s.td_n:  # the mean TD loss of the updates since the previous row (kept while none came since)
        s.td_loss = s.td_sum / s.td_n
        s.td_sum, s.td_n = 0.0, 0.0
    if not math.isnan(s.td_loss):
        row[M.TD_LOSS] = s.td_loss
    for name, v in s.diag.items():
        row[name] = v
    bound = config["reward_bound"] if math.isfinite(config["reward_bound"]) else (s.reward_max or math.nan)
    if M.Q_ABS_MAX_CURRENT in s.diag and math.isfinite(bound):
        limit = 1.5 * bound / (1.0 - config["gamma"])
        row[M.Q_LIMIT] = limit
        row[M.SOFT_DIVERGENCE] = float(not math.isfinite(s.diag[M.Q_ABS_MAX_CURRENT]) or s.diag[M.Q_ABS_MAX_CURRENT] > limit)
    return row


def _in_place_updates_at_their_writes(events: np.ndarray, source: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The events with each in-place update booked where it was applied: a writer's first UPDATE after
    its ``writing()`` span began is copied to right after that span's WRITE_BEGIN (``updated()`` comes
    after the write, so its record may follow another process's write that the in-place step preceded).
    The record stays where it was too, as its process's log point, and books nothing there (its running
    total is already counted)."""
    kinds = events["kind"]
    if not (kinds == WRITE_BEGIN).any():
        return events, source
    begun: dict[tuple[int, int], int] = {}  # (process, writer) -> its open span's WRITE_BEGIN, until an update
    moved, at = [], []
    for i in np.flatnonzero(np.isin(kinds, (WRITE_BEGIN, UPDATE))):
        key = (int(source[i]), int(events["who"][i]))
        if kinds[i] == WRITE_BEGIN:
            begun[key] = i
        elif key in begun:
            moved.append(i)
            at.append(begun.pop(key) + 0.5)
    copies = events[moved]
    copies["c"] = math.nan  # not a log point: the snapshot it ends stays behind
    position = np.concatenate([np.arange(events.size, dtype=np.float64), at])
    order = np.argsort(position, kind="stable")
    return np.concatenate([events, copies])[order], np.concatenate([source, source[moved]])[order]


def _total_updates(events: np.ndarray, source: np.ndarray) -> int:
    """Every update of the run: each (process, writer)'s running total in its last UPDATE(S) record."""
    mask = np.isin(events["kind"], (UPDATE, UPDATES))
    last: dict = {}
    for who, total, src in zip(events["who"][mask], events["a"][mask], source[mask]):
        last[(int(src), int(who))] = int(total)
    return sum(last.values())


def _counted_in_place_among_copies(events: np.ndarray, source: np.ndarray, copy_writers: set) -> bool:
    """Some updates applied in place were counted (their process never read or wrote the parameters) in
    a run where copies are written back: the lineage places them at their log points."""
    counted = events["kind"] == UPDATES
    keys = zip(source[counted], events["who"][counted])
    return bool(copy_writers) and any((int(src), int(w)) not in copy_writers for src, w in keys)


def _by_worker(counts: dict) -> dict[int, float]:
    out: dict[int, float] = {}
    for (_, w), v in counts.items():
        out[w] = out.get(w, 0.0) + float(v)
    return out
