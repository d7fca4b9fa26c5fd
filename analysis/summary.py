"""The table that opens ``docs/findings.md``: one row per finding with its question, a one-sentence
answer, the verdict and number of the contrast that carries the answer, the setting and a link.

The verdict and the number are read from the finding's own results (its declared family, or its
generated table), so they follow the data like every other generated table. The answer is written by
hand and names the verdict it rests on: the generator refuses a row whose verdict the data no longer
give (the sentence must then be rewritten), so a summary cannot outlive its finding.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from analysis.findings_common import Finding

Lookup = Callable[[Finding], tuple[str, str]]
"""A finding's results -> ``(number, verdict)`` of the row that carries its answer."""


def contrast(family: str, label: str) -> Lookup:
    """The estimate [95% CI] and verdict of the contrast ``label`` in the family named ``family``."""

    def lookup(finding: Finding) -> tuple[str, str]:
        (fam,) = [f for f in finding.families if f.name == family]
        (row,) = [r for r in fam.results() if r["contrast"] == label and not r["missing"]]
        digits = 0 if abs(row["estimate"]) >= 10 else 1 if abs(row["estimate"]) >= 1 else 3
        number = f"{row['estimate']:+.{digits}f} [{row['low']:.{digits}f}, {row['high']:.{digits}f}]"
        p = f"{row['p_holm']:.3f}" if row["p_holm"] >= 0.001 else "< 0.001"
        return f"{number}, Holm p {p}", row["verdict"]

    return lookup


def _rows(text: str, header: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``text`` whose header starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    body = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        body.append([c.strip() for c in line.strip().strip("|").split("|")])
    return body


def calibration(label: str) -> Lookup:
    """The calibration table's row ``label``: its final greedy return and its verdict word."""

    def lookup(finding: Finding) -> tuple[str, str]:
        (row,) = [r for r in _rows(finding.text, "| setting |") if r[0] == label]
        return f"{row[6]} greedy return", row[5].split(" (")[0]

    return lookup


def time_to_475(finding: Finding) -> tuple[str, str]:
    """Finding 5, from finding 4's table: the cells that reached an IQM of 475, and the best IQM."""
    rows = _rows(finding.text, "| cell | first env step with IQM >= 475")
    reached = sum(r[1] != "not reached" for r in rows)
    best = max(rows, key=lambda r: float(r[3].split()[0]))
    return f"best IQM {best[3]} ({best[0]})", f"reached in {reached} of {len(rows)} cells"


@dataclass(frozen=True)
class Headline:
    number: str
    question: str
    answer: str
    """One sentence, true while the verdict below holds."""
    block: str | None
    """The data finding (:data:`analysis.findings.DATA_FINDINGS`) whose results carry it."""
    lookup: Lookup | None
    rests_on: str | None
    """The verdict the answer rests on: the row is refused when the data give another."""
    setting: str
    anchor: str


SETTING = "CartPole-v1, 20k env steps, 10 seeds"
FINDING_4 = "#4-what-does-a-higher-replay-ratio-do-once-the-target-period-no-longer-moves-with-it"
HEADLINES = [
    Headline("0", "Does dqnlab reproduce published DQN baselines at their own settings?",
             "CleanRL's DQN and RL Zoo's Acrobot DQN, yes; RL Zoo's CartPole DQN only with SB3's effective target "
             "period, and then not within ±50 of its published 500.", "calibration",
             calibration("CleanRL dqn.py (MSE)"), "calibrated", "CartPole-v1 500k, Acrobot-v1 100k, 10 seeds",
             "#0-calibration-does-dqnlab-reproduce-published-dqn-baselines-at-their-own-settings"),
    Headline("1", "Do updates from different processes overwrite each other?",
             "The single learner loses none; naive local copies lose ~1-1/N of their updates and train at ~1/N of "
             "the UTD they report, which here scored better; stale A3C pushes scored worse.", "writers",
             contrast("each naive setup minus the single learner, per cell; and the explanation: local copies of N "
                      "workers at UTD u minus the single learner at UTD u/N (final return)",
                      "4 workers, UTD 1: local_copies minus single"), "better", "CartPole-v1, 10k env steps, 10 seeds",
             "#1-do-updates-from-different-processes-overwrite-each-other"),
    Headline("2", "Are a slow or a long-episode worker's transitions ignored?",
             "No: each worker's share of the sampled transitions stays within ±0.05 of its share of those produced.",
             "workers", contrast("worker 1's sampled share minus its produced share, per setup",
                                 "one_slow: sampled minus produced"), "lower, within ±0.05", SETTING,
             "#2-are-a-slow-workers-or-a-long-episode-workers-transitions-ignored"),
    Headline("2b", "Does prioritized replay change whose transitions are used?",
             "Yes for long episodes: that worker's sampled share rises against uniform replay; returns not resolved.",
             "workers_prioritized", contrast("worker 1's sampled-minus-produced share, prioritized minus uniform, per "
                                             "setup", "one_long_episodes: prioritized minus uniform"), "higher", SETTING,
             "#2b-does-prioritized-replay-change-whose-transitions-are-used"),
    Headline("3", "Does collecting in parallel change what is learned at the same UTD?",
             "Not shown either way with the strict limiter; without it the actors outrun the learner, the realised "
             "UTD falls ~30x and so does the return.", "parallel",
             contrast("collection vs serial (final return)", "strict_2 minus serial_2"), "inconclusive", SETTING,
             "#3-does-collecting-in-parallel-change-what-is-learned-at-the-same-replay-ratio"),
    Headline("4", "What does a higher UTD do on CartPole, with the copy rate held?",
             "No trend in return is shown at 10 seeds (4r, at 110, resolves a drop then a partial rise); counting "
             "the target period in updates (more copies per env step) is what made Q run away.", "replay_ratio",
             contrast("replay ratio, CartPole-v1", "UTD trend, target in env_steps, plain (return per doubling of UTD)"),
             "inconclusive", SETTING, FINDING_4),
    Headline("4", "... and on Acrobot?",
             "Return rises with UTD with the copy rate held (plain DQN and LayerNorm), at a budget where nothing "
             "has converged.", "replay_ratio",
             contrast("replay ratio, Acrobot-v1", "UTD trend, target in env_steps, plain (return per doubling of UTD)"),
             "better", "Acrobot-v1, 20k env steps, 10 seeds", FINDING_4),
    Headline("4b", "Does a shorter target period diverge more often at high UTD?",
             "Yes: periods of 16 and 64 env steps soft-diverged more than 256 at UTD 1 and 4, and cost return in two "
             "cells.", "target_period",
             contrast("each target period minus 256 env steps, per UTD (final return)", "UTD 4: period 64 minus 256"),
             "worse", SETTING, "#4b-does-a-shorter-target-period-diverge-more-often-at-high-utd"),
    Headline("4c", "Does prioritized replay diverge more at a high replay ratio?",
             "Not shown (1 of 10 seeds against 0 at UTD 16); there it scored better than uniform replay.",
             "replay_prioritized", contrast("prioritized minus uniform replay, per UTD (final return)",
                                            "UTD 16: prioritized minus uniform"), "better", SETTING,
             "#4c-does-prioritized-replay-diverge-more-at-a-high-replay-ratio"),
    Headline("4d", "Does a Polyak target change finding 4's answer?",
             "On Acrobot return still rises with UTD at a held target speed; on CartPole nothing is resolved.",
             "replay_polyak", contrast("Polyak target, Acrobot-v1",
                                       "UTD trend, Polyak, tau per env step (return per doubling of UTD)"),
             "better", "CartPole-v1 and Acrobot-v1, 20k env steps, 10 seeds",
             "#4d-does-a-polyak-target-change-finding-4s-answer"),
    Headline("4r", "With seeds enough to tell, what does a higher UTD do on CartPole?",
             "With the copy rate held, UTD 1 scored worse than 0.25 on the RL Zoo base at 50k env steps and again at "
             "100k (0.25 peaked at 50k and fell back), and UTD 4 better than 1 at 50k, still below 0.25: not a slope; "
             "on dqnlab's default base UTD 1 scored better than 0.25 "
             "(same AUC) and UTD 4 better than 1: the base sets the sign. With the period in updates UTD 4 "
             "scored worse than 1 on both bases and soft-diverged in 104 and 88 of 110 seeds.", "replay_ratio_rerun",
             contrast("rerun at power, replay_ratio-rerun_cartpole",
                      "final return, target in env steps: UTD 1 minus 0.25"), "worse",
             "CartPole-v1, 50k env steps, 110 seeds (100k: 232)",
             "#4r-finding-4-at-power-what-does-a-higher-utd-do-with-seeds-enough-to-tell"),
    Headline("4r", "... and on Acrobot?",
             "With the copy rate held UTD 1 scored better than 0.25: it was at -88 by 40k env steps while 0.25 was "
             "still rising; UTD 4 reached the same plateau (about -81) sooner (AUC +20, final +1.5, the size of the "
             "noise floor): a higher UTD bought speed, not a higher plateau.", "replay_ratio_rerun",
             contrast("rerun at power, replay_ratio-rerun_acrobot", "final return, target in env steps: UTD 1 minus 0.25"),
             "better", "Acrobot-v1, 100k env steps, 170 seeds",
             "#4r-finding-4-at-power-what-does-a-higher-utd-do-with-seeds-enough-to-tell"),
    Headline("5", "How many env steps to a greedy return of 475 on CartPole?",
             "More than 20k in every cell of finding 4.", "replay_ratio", time_to_475, "reached in 0 of 24 cells",
             SETTING, "#5-how-many-env-steps-to-a-greedy-return-of-475-on-cartpole-v1"),
    Headline("6", "CPU or GPU for a small network?", "Not measured: no GPU was lent yet.", None, None, None, "—",
             "#6-cpu-or-gpu-for-a-small-network"),
]  # fmt: skip


def summary_block(findings: dict[str, Finding]) -> str:
    """The summary table from the findings' results (ValueError where an answer's verdict moved)."""
    lines = ["| # | question | answer | verdict | key number [95% CI] | setting |", "|---|---|---|---|---|---|"]
    for h in HEADLINES:
        number, verdict = "—", "—"
        if h.lookup is not None and h.block in findings:
            number, verdict = h.lookup(findings[h.block])
            if verdict != h.rests_on:
                raise ValueError(f"finding {h.number}: the answer rests on '{h.rests_on}', the data give '{verdict}': "
                                 "rewrite its sentence in analysis/summary.py")  # fmt: skip
        answer = re.sub(r"\s+", " ", h.answer)
        lines.append(f"| [{h.number}]({h.anchor}) | {h.question} | {answer} | {verdict} | {number} | {h.setting} |")
    return "\n".join(lines)
