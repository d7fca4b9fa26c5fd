"""The metric vocabulary: every name a run reports, with its unit, its meaning and its design term.

Engine, trackers, analysis, plots and notebooks import names from here; none retypes them as a
string literal. A log point is a flat ``{name: float}`` dict; ``env_steps`` is its step axis.
Families with an index (per worker, per hidden layer) are built by :func:`worker_share` and
:func:`dormant_layer`. The section (``eval``, ``q``, ...) only groups charts for display: the
MLflow tracker logs ``<section>/<name>``; histories and analysis use the bare name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    meaning: str
    section: str
    term: str = ""
    """The design term it measures, if any."""


_ALL: list[Metric] = []


def _m(name: str, unit: str, meaning: str, section: str, term: str = "") -> str:
    _ALL.append(Metric(name, unit, meaning, section, term))
    return name


# --- progress and throughput ----------------------------------------------------------------------
ENV_STEPS = _m("env_steps", "env steps", "env steps inserted into replay, over all actors", "progress", "env step")
UPDATES = _m("updates", "updates", "gradient updates done by the learner", "progress")
TIME_S = _m("time_s", "s", "seconds since the run started", "progress")
ENV_STEPS_PER_S = _m("env_steps_per_s", "env steps/s", "env steps per second since the previous log point", "throughput")
UPDATES_PER_S = _m("updates_per_s", "updates/s", "gradient updates per second since the previous log point",
                   "throughput")  # fmt: skip
ENV_STEPS_PER_S_TOTAL = _m("env_steps_per_s_total", "env steps/s", "env steps per second over the whole run",
                           "throughput")  # fmt: skip
UPDATES_PER_S_TOTAL = _m("updates_per_s_total", "updates/s", "gradient updates per second over the whole run",
                         "throughput")  # fmt: skip
UTD_REALISED = _m("utd_realised", "updates/env step", "updates / (env_steps - learning_starts)", "throughput",
                  "realised UTD")  # fmt: skip
UTD_DEFICIT = _m("utd_deficit", "updates", "utd * (env_steps - learning_starts) - updates (the limiter's d)",
                 "throughput", "rate limiter")  # fmt: skip
LIMITER_BOUND = _m("limiter_bound", "updates", "the bound on |d| the strict limiter guarantees", "throughput",
                   "rate limiter")  # fmt: skip
LEARNER_WAIT_S = _m("learner_wait_s", "s", "seconds the learner waited on the limiter, cumulative", "throughput")
ACTOR_WAIT_S = _m("actor_wait_s", "s", "seconds the actors waited on the limiter, summed over actors, cumulative",
                  "throughput")  # fmt: skip

# --- workers: lag and shares ----------------------------------------------------------------------
POLICY_LAG_MEAN = _m("policy_lag_mean", "updates", "mean policy lag of the batch elements sampled in this log window",
                     "workers", "policy lag")  # fmt: skip
POLICY_LAG_MAX = _m("policy_lag_max", "updates", "max policy lag in this log window", "workers", "policy lag")
POLICY_LAG_RUN_MEAN = _m("policy_lag_run_mean", "updates", "mean policy lag over every batch element sampled so far",
                         "workers", "policy lag")  # fmt: skip
POLICY_LAG_RUN_MAX = _m("policy_lag_run_max", "updates", "max policy lag over the whole run so far", "workers",
                        "policy lag")  # fmt: skip
ACTOR_STALENESS_MEAN = _m("actor_staleness_mean", "updates",
                          "learner updates between the acting version and insertion (sync delay), this window",
                          "workers")  # fmt: skip
ACTOR_STALENESS_RUN_MEAN = _m("actor_staleness_run_mean", "updates", "actor staleness over the whole run so far",
                              "workers")  # fmt: skip
EPSILON_MEAN = _m("epsilon_mean", "probability", "mean exploration rate over the workers", "workers")
SHARE_KINDS = ("produced", "resident", "sampled", "episodes")
_WORKER_SHARE = re.compile(r"^worker(\d+)_(produced|resident|sampled|episodes)_share$")


def worker_share(worker: int, kind: str) -> str:
    """``worker{w}_{produced|resident|sampled|episodes}_share``: the worker's fraction of env steps
    produced, of transitions resident in replay, of batch elements sampled (docs/design.md: worker share),
    and of the episodes finished over the run (a worker with long episodes finishes few of them while
    producing as many transitions as its peers)."""
    if kind not in SHARE_KINDS:
        raise ValueError(f"kind: got {kind!r}; allowed: {SHARE_KINDS}")
    return f"worker{worker}_{kind}_share"


# --- learner and Q statistics ---------------------------------------------------------------------
TD_LOSS = _m("td_loss", "squared return units", "mean TD loss (the configured loss: Huber or MSE; with prioritized "
             "replay weighted by the importance-sampling weights, so lower than uniform's at the same TD errors) over "
             "the updates of this log window", "q", "Q statistics")  # fmt: skip
TD_LOSS_LAST = _m("td_loss_last", "squared return units", "TD loss of the last update (weighted as td_loss)", "q",
                  "Q statistics")  # fmt: skip
Q_MEAN = _m("q_mean", "return", "mean Q(s,a) on the last sampled batch", "q", "Q statistics")
Q_MAX = _m("q_max", "return", "max Q(s,a) on the last sampled batch", "q", "Q statistics")
Q_MIN = _m("q_min", "return", "min Q(s,a) on the last sampled batch", "q", "Q statistics")
Q_GREEDY_MEAN = _m("q_greedy_mean", "return", "mean max_a Q(s,.) on the last sampled batch", "q", "Q statistics")
Q_GREEDY_MAX = _m("q_greedy_max", "return", "max of max_a Q(s,.) on the last sampled batch", "q", "Q statistics")
Q_GREEDY_MIN = _m("q_greedy_min", "return", "min of max_a Q(s,.) on the last sampled batch", "q", "Q statistics")
TARGET_MEAN = _m("target_mean", "return", "mean TD target on the last sampled batch", "q", "Q statistics")
Q_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
Q_P = {q: _m(f"q_p{round(q * 100):02d}", "return", f"{q:.0%} quantile of Q(s,a) on the last sampled batch", "q",
             "Q statistics") for q in Q_QUANTILES}  # fmt: skip
GRAD_NORM = _m("grad_norm", "", "global gradient norm of the last update, before clipping", "q", "Q statistics")
PARAM_NORM = _m("param_norm", "", "L2 norm of the online parameters", "q", "Q statistics")
TARGET_UPDATES = _m("target_updates", "count", "target-network updates so far (copies or Polyak steps; naive writers: "
                    "each worker copies its own target, the mean over workers)", "learner", "target update")  # fmt: skip
RESETS = _m("resets", "count", "plasticity resets so far", "learner", "reset")
LOST_UPDATES = _m("lost_updates", "updates", "updates applied whose effect the shared parameters do not hold: a write by "
                  "another worker replaced them before any write built on them, or (the audit's last row) they were "
                  "never written back (local_copies; 0 for the single learner)", "learner", "lost update")  # fmt: skip
LOST_UPDATE_FRAC = _m("lost_update_frac", "fraction", "lost_updates / updates", "learner", "lost update")
STALE_GRADIENT_AGE_MEAN = _m("stale_gradient_age_mean", "updates", "a3c: mean over pushed gradients of the shared "
                             "updates completed between the local copy's sync and the push's start (0 for the others; "
                             "a push in flight at either moment is not counted, though part of it may be in the copy)",
                             "learner", "writers")  # fmt: skip
RACED_WRITE_FRAC = _m("raced_write_frac", "fraction", "parameter writes that overlapped another worker's write (hogwild; "
                      "0 for the single learner)", "learner", "writers")  # fmt: skip

# --- collapse signs -------------------------------------------------------------------------------
# Two batches of states: the fixed probe (drawn once, when learning starts, from the data of the first
# policies) and a batch drawn afresh from the current replay at each log point (the data the agent
# sees now: where Kumar et al. 2021 and Sokar et al. 2023 measure srank and dormant units).
Q_PROBE_ABS_MAX = _m("q_probe_abs_max", "return", "max |Q| over every action on the fixed probe batch", "stability",
                     "soft divergence")  # fmt: skip
Q_ABS_MAX_CURRENT = _m("q_abs_max_current", "return", "max |Q| over every action on a batch drawn from the current "
                       "replay at this log point", "stability", "soft divergence")  # fmt: skip
Q_BOUND = _m("q_bound", "return", "R_max / (1 - gamma): the largest |Q| the env's rewards allow (bootstrapping through "
             "time limits)", "stability", "soft divergence")  # fmt: skip
Q_LIMIT = _m("q_limit", "return", "(1 + divergence_margin) * q_bound: the soft-divergence threshold", "stability",
             "soft divergence")  # fmt: skip
Q_ABOVE_BOUND = _m("q_above_bound", "0/1", "1 when max |Q| on the probe or current batch exceeds q_bound at this log "
                   "point (the textbook test; it fires for an agent whose Q sits on the bound, and more often the more "
                   "log points a run has)", "stability", "soft divergence")  # fmt: skip
SOFT_DIVERGENCE = _m("soft_divergence", "0/1", "1 when max |Q| on the probe or current batch exceeds q_limit (or is not "
                     "finite); checked at every evaluation and at the end, a schedule in env steps, so every UTD gets "
                     "the same number of checks", "stability", "soft divergence")  # fmt: skip
HARD_DIVERGENCE = _m("hard_divergence", "0/1", "1 when a parameter or a probe Q-value is NaN/inf", "stability",
                     "hard divergence")  # fmt: skip
SRANK = _m("srank", "dimensions", "srank (delta 0.01) of the penultimate features on the fixed probe batch", "stability",
           "srank")  # fmt: skip
SRANK_CURRENT = _m("srank_current", "dimensions", "srank (delta 0.01) of the penultimate features on a batch drawn from "
                   "the current replay at this log point (Kumar et al.'s definition)", "stability", "srank")  # fmt: skip
DORMANT_TAUS = (0.0, 0.1)
DORMANT = {tau: _m(f"dormant_frac_tau{tau:g}", "fraction", f"fraction of tau-dormant hidden units, tau {tau:g}, all "
                   "layers, on the fixed probe batch", "stability", "dormant fraction") for tau in DORMANT_TAUS}  # fmt: skip
DORMANT_FRAC = _m("dormant_frac", "fraction", "dormant_frac_tau0.1 (the headline dormant fraction, probe batch)",
                  "stability", "dormant fraction")  # fmt: skip
DORMANT_CURRENT = {tau: _m(f"dormant_frac_tau{tau:g}_current", "fraction", f"fraction of tau-dormant hidden units, tau "
                           f"{tau:g}, all layers, on a batch drawn from the current replay at this log point "
                           "(Sokar et al.'s definition)", "stability", "dormant fraction")
                   for tau in DORMANT_TAUS}  # fmt: skip
_DORMANT_LAYER = re.compile(r"^dormant_frac_tau[0-9.]+_l(\d+)$")


def dormant_layer(tau: float, layer: int) -> str:
    """``dormant_frac_tau{tau}_l{i}``: the tau-dormant fraction of hidden layer ``i`` alone."""
    return f"{DORMANT[tau]}_l{layer}"


# --- returns ----------------------------------------------------------------------------------------
EVAL_RETURN_MEAN = _m("eval_return_mean", "return", "mean undiscounted return of the greedy evaluation episodes",
                      "eval")  # fmt: skip
EVAL_RETURN_STD = _m("eval_return_std", "return", "std of the greedy evaluation returns", "eval")
EVAL_RETURN_MIN = _m("eval_return_min", "return", "lowest greedy evaluation return", "eval")
EVAL_LENGTH_MEAN = _m("eval_length_mean", "env steps", "mean length of the greedy evaluation episodes", "eval")
EVAL_RETURN_BEST = _m("eval_return_best", "return", "best eval_return_mean so far", "eval")
OVERESTIMATION = _m("overestimation", "return",
                    "mean over greedy episodes of max_a Q(s_t,.) - G_t, G_t bootstrapped at truncations", "eval",
                    "overestimation")  # fmt: skip
TRAIN_RETURN_MEAN = _m("train_return_mean", "return", "mean return of the actors' episodes finished in this window",
                       "eval")  # fmt: skip
TRAIN_LENGTH_MEAN = _m("train_length_mean", "env steps", "mean length of the actors' episodes finished in this window",
                       "eval")  # fmt: skip
TRAIN_EPISODES = _m("train_episodes", "count", "actor episodes finished in this window", "eval")
TRAIN_RETURN_LAST = {n: _m(f"train_return_last{n}", "return", f"mean return of the replica's last {n} finished actor "
                           "(epsilon-greedy) episodes: the training-episode return publications report", "eval")
                     for n in (10, 100)}  # fmt: skip
TRAIN_EPISODES_UNREAD = _m("train_episodes_unread", "count", "actor episodes finished so far whose return and length "
                           "were overwritten in the episode log before a log point read them (counted in the "
                           "episodes share; left out of train_return_mean)", "eval")  # fmt: skip
OBJECTIVE = _m("objective", "return or env steps/s", "the sweep objective of the run (see dqnlab.study.runner)", "eval")

METRICS: dict[str, Metric] = {m.name: m for m in _ALL}

EVAL_METRICS = (EVAL_RETURN_MEAN, EVAL_RETURN_STD, EVAL_RETURN_MIN, EVAL_LENGTH_MEAN, OVERESTIMATION)
"""What one evaluation reports (an eval record holds these plus env_steps, updates, time_s, eval_return_best)."""


def describe(name: str) -> Metric:
    """The :class:`Metric` of ``name``, families included; KeyError naming the vocabulary otherwise."""
    if name in METRICS:
        return METRICS[name]
    if m := _WORKER_SHARE.match(name):
        return Metric(name, "fraction", f"worker {m[1]}'s share of {m[2]} transitions", "workers", "worker share")
    if m := _DORMANT_LAYER.match(name):
        base = METRICS[name.rsplit("_l", 1)[0]]
        return Metric(name, "fraction", f"{base.meaning}: hidden layer {m[1]} alone", "stability", "dormant fraction")
    raise KeyError(f"{name!r} is not in the metric vocabulary (dqnlab.metrics); known: {sorted(METRICS)}")


def display_key(name: str) -> str:
    """``<section>/<name>``: the key the MLflow tracker logs, so that the UI groups charts by section."""
    return f"{describe(name).section}/{name}"


def markdown_table() -> str:
    """The vocabulary as the Markdown table docs/design.md carries (a test keeps the two equal)."""
    rows = ["| name | section | unit | meaning | design term |", "| --- | --- | --- | --- | --- |"]
    for m in METRICS.values():
        rows.append(f"| `{m.name}` | {m.section} | {m.unit} | {m.meaning} | {m.term} |")
    rows.append("| `worker{w}_produced_share`, `_resident_share`, `_sampled_share`, `_episodes_share` | workers | "
                "fraction | worker w's share of env steps produced, of transitions resident, of batch elements sampled, "
                "of episodes finished over the run | worker share |")
    rows.append("| `dormant_frac_tau{tau}_l{i}` | stability | fraction | the tau-dormant fraction of hidden layer i "
                "alone | dormant fraction |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
