"""A finding's family of comparisons (analysis/family.py): the verdict words the findings page prints
follow the Holm-corrected test and the equivalence test, never the raw estimate alone."""

import numpy as np
import pytest

from analysis.family import Family


def _verdicts(family: Family) -> dict[str, str]:
    return {r["contrast"]: r["verdict"] for r in family.results()}


def test_verdicts_follow_holm_and_tost_with_the_familys_own_words():
    rng = np.random.default_rng(0)
    base = rng.normal(100, 10, 10)
    family = Family("returns", margin=50)
    family.difference("far above", base + 200, base)  # resolved, beyond the margin
    family.difference("far below", base - 200, base)
    family.difference("same seeds", base + rng.normal(0, 1, 10), base)  # tight around 0: equivalent
    family.difference("too noisy", rng.normal(100, 400, 10), base)  # neither resolved nor within ±50
    v = _verdicts(family)
    assert v == {"far above": "better", "far below": "worse", "same seeds": "equivalent", "too noisy": "inconclusive"}

    gaps = Family("share gaps", margin=0.05, words=("higher", "lower"))
    gaps.add("small but resolved", -0.02, rng.normal(-0.02, 0.002, 2000))
    gaps.add("large", -0.2, rng.normal(-0.2, 0.002, 2000))
    assert _verdicts(gaps) == {"small but resolved": "lower, within ±0.05", "large": "lower"}


def test_holm_takes_back_a_contrast_that_one_test_alone_would_call_resolved():
    rng = np.random.default_rng(1)
    draws = rng.normal(2.2, 1.0, 4000)  # a two-sided bootstrap p of ~0.03 on its own
    alone = Family("one", margin=0.1)
    alone.add("x", 2.2, draws)
    assert _verdicts(alone)["x"] == "better"
    many = Family("ten", margin=0.1)
    for i in range(10):
        many.add(f"x{i}", 2.2, draws)
    assert set(_verdicts(many).values()) == {"inconclusive"}  # 10 x 0.03 > 0.05 after Holm


def test_a_contrast_near_a_threshold_is_drawn_until_its_monte_carlo_error_is_small_and_a_far_one_is_not():
    """The bootstrap is not the noise: a Holm p near alpha gets draws until its Monte Carlo SE is below
    MC_SE_TARGET (the SE printed beside it); a contrast far from every threshold keeps DRAWS; another
    generator seed gives the same verdicts."""
    from analysis.family import DRAWS, MC_SE_TARGET
    from dqnlab.statistics import p_value_mc_se

    rng = np.random.default_rng(4)
    base = rng.normal(100, 30, 10)
    family = Family("returns", margin=5)
    family.difference("far", base + 300, base)
    family.difference("near", base + 28, base)  # a Holm p within 3 MC SEs of 0.05 at DRAWS
    res = {r["contrast"]: r for r in family.results()}
    assert res["far"]["draws"] == DRAWS
    near = res["near"]
    assert 0.04 < near["p_holm"] < 0.06 and near["draws"] > DRAWS and near["mc_se"] < MC_SE_TARGET
    assert near["mc_se"] == p_value_mc_se(near["p"], near["draws"])
    again = {r["contrast"]: r["verdict"] for r in family.results(seed=1)}
    assert again == {c: r["verdict"] for c, r in res.items()}
    capped = Family("returns", margin=5, max_draws=DRAWS)  # the same contrast, no draws to add
    capped.difference("near", base + 28, base)
    (row,) = capped.results()
    assert row["p_holm"] < 0.05 and not row["settled"]
    assert row["verdict"] == "inconclusive"  # within 3 MC SEs of alpha: the weaker word, never `better`


def test_the_monte_carlo_error_of_a_bootstrap_p_value_is_the_binomial_one_of_its_tail():
    from dqnlab.statistics import p_value_mc_se

    assert p_value_mc_se(0.05, 50_000) == pytest.approx(2 * np.sqrt(0.025 * 0.975 / 50_000))
    assert p_value_mc_se(0.0, 1000) == pytest.approx(2 * np.sqrt(0.001 * 0.999 / 1000))  # a p at its floor


def test_finding_2b_compares_each_setups_share_gap_and_return_prioritized_against_uniform():
    """Finding 2b's families on constructed runs: a prioritized sampler that favours worker 1 by 0.1 is
    called `higher`; one that matches uniform is `equivalent`; each setup is compared with its own uniform
    cell, never with another setup's."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from analysis.workers import finding_workers_prioritized
    from dqnlab import metrics as M

    rng = np.random.default_rng(0)
    setups = {"homogeneous": ((), (), 0.0), "one_slow": ((0.0, 0.008), (), 0.1)}  # prioritized shift of the gap
    runs, hist = [], []
    for name, (delay, cut, shift) in setups.items():
        for replay in ("uniform", "prioritized"):
            for seed in range(10):
                produced = 0.4 + rng.normal(0, 0.01)
                sampled = produced - 0.03 + rng.normal(0, 0.002) + (shift if replay == "prioritized" else 0.0)
                run_id = f"{name}-{replay}-{seed}"
                runs.append({"run_id": run_id, "outcome": "completed", "num_workers": 2, "replay": replay,
                             "worker_step_delay_s": delay, "worker_max_episode_steps": cut,
                             "buffer_capacity": 100_000, "total_env_steps": 20_000,
                             "final_return": 150 + rng.normal(0, 5),
                             **{f"final_{M.worker_share(1, k)}": v for k, v in
                                (("produced", produced), ("resident", produced), ("sampled", sampled),
                                 ("episodes", 0.5))}})  # fmt: skip
                hist += [{"run_id": run_id, "metric": M.EVAL_RETURN_MEAN, M.ENV_STEPS: s, "value": 100.0 + s / 100}
                         for s in (1000, 2000)]
    finding = finding_workers_prioritized(pd.DataFrame(runs), pd.DataFrame(hist))
    text = finding.text
    assert "| one_slow: prioritized minus uniform | +0.100" in text
    gap_rows = [line for line in text.splitlines() if "prioritized minus uniform |" in line]
    assert len(gap_rows) == 4, text  # two setups x (share gap, return)
    assert gap_rows[0].endswith("| equivalent |") and gap_rows[1].endswith("| higher |"), gap_rows
    assert gap_rows[2].endswith("| equivalent |") and gap_rows[3].endswith("| equivalent |"), gap_rows


def test_finding_4c_compares_prioritized_with_uniform_at_the_same_utd_in_returns_and_soft_divergence():
    """Finding 4c on constructed runs: prioritized replay losing 100 return and soft-diverging in 10/10
    seeds at UTD 16 (0/10 uniform) reads `worse` and `more`; at UTD 1, where both are alike, nothing is
    claimed beyond `equivalent`/`inconclusive`."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from analysis.replay_variants import finding_replay_prioritized
    from dqnlab import metrics as M

    rng = np.random.default_rng(1)
    runs, hist = [], []
    for utd in (1.0, 16.0):
        for replay in ("uniform", "prioritized"):
            bad = utd == 16.0 and replay == "prioritized"
            for seed in range(10):
                run_id = f"{utd}-{replay}-{seed}"
                runs.append({"run_id": run_id, "status": "completed", "outcome": "completed", "utd": utd,
                             "replay": replay, "final_return": (100 if bad else 200) + rng.normal(0, 5),
                             f"final_{M.Q_ABS_MAX_CURRENT}": 500.0 if bad else 90.0})  # fmt: skip
                hist += [{"run_id": run_id, "metric": metric, M.ENV_STEPS: s, "value": value}
                         for s in (1000, 2000)
                         for metric, value in ((M.EVAL_RETURN_MEAN, 150.0), (M.SOFT_DIVERGENCE, float(bad)))]
    text = finding_replay_prioritized(pd.DataFrame(runs), pd.DataFrame(hist)).text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if "prioritized minus uniform |" in line}
    assert rows["UTD 16: prioritized minus uniform"].endswith("| worse |"), text
    assert rows["UTD 1: prioritized minus uniform"].endswith("| equivalent |"), text
    assert "| 16 | 10/10 | 0/10 |" in text and text.rstrip().endswith("| more |"), text
    assert "| 16 | prioritized | 10 |" in text and "| 10/10 / 10/10 | 500 |" in text, text


def test_an_aa_comparison_pairs_only_runs_with_the_same_configuration_and_seeds():
    """The noise floor compares a cell with another study's runs of exactly its configuration and seeds:
    a run differing in one field (or a seed set that differs) is not its A/A partner."""
    import pandas as pd

    from analysis.findings_common import same_config_runs
    from dqnlab.config import Config

    def runs(seeds, **fields):
        return pd.DataFrame([Config.from_flat(dict(fields, seed=s)).to_flat() for s in seeds])

    cell = runs(range(3), utd=4.0, target_period=256)
    there = pd.concat([runs(range(3), utd=4.0, target_period=256), runs(range(3), utd=4.0, target_period=64),
                       runs(range(3), utd=1.0, target_period=256)], ignore_index=True)  # fmt: skip
    same = same_config_runs(there, cell)
    assert len(same) == 3 and set(same["target_period"]) == {256} and set(same["utd"]) == {4.0}
    assert same_config_runs(runs(range(2), utd=4.0, target_period=256), cell).empty  # seeds 0-1 are not 0-2


def test_finding_4d_compares_the_polyak_units_and_polyak_with_finding_4s_plain_hard_copy_only():
    """Finding 4d on constructed runs: tau per update losing 100 return and soft-diverging in 10/10 seeds
    at UTD 16 (per env step: 0/10) reads `better` for per env step, `worse` against the hard copy in
    updates, and `fewer` soft-diverged; finding 4's LayerNorm cells and its UTDs the Polyak study did not
    run are not partners."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from analysis.replay_polyak import finding_replay_polyak
    from dqnlab import metrics as M

    rng = np.random.default_rng(2)

    def study(cells):
        runs, hist = [], []
        for (utd, unit, extra), (mean, bad) in cells.items():
            for seed in range(10):
                run_id = f"{utd}-{unit}-{extra}-{seed}-{mean}"
                runs.append({"run_id": run_id, "status": "completed", "utd": utd, "target_unit": unit, "seed": seed,
                             "target_update": "hard" if extra != "polyak" else "polyak",
                             "layer_norm": extra == "layernorm", "reset": "none", "target_period": 256,
                             "final_return": mean + rng.normal(0, 5)})  # fmt: skip
                hist += [{"run_id": run_id, "metric": metric, M.ENV_STEPS: s, "value": value}
                         for s in (1000, 2000)
                         for metric, value in ((M.EVAL_RETURN_MEAN, mean), (M.SOFT_DIVERGENCE, float(bad)))]  # fmt: skip
        return pd.DataFrame(runs), pd.DataFrame(hist)

    units = ("updates", "env_steps")
    polyak = study({(u, unit, "polyak"): ((100, True) if (u, unit) == (16.0, "updates") else (200, False))
                    for u in (1.0, 16.0) for unit in units})  # fmt: skip
    hard = study({**{(u, unit, "plain"): (200, False) for u in (1.0, 4.0, 16.0) for unit in units},
                  (16.0, "updates", "layernorm"): (400, False)})  # fmt: skip
    text = finding_replay_polyak({"CartPole-v1": (polyak, hard)}).text
    verdict = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in text.splitlines()
               if line.startswith("| UTD ")}  # fmt: skip
    assert verdict["UTD 16, Polyak: tau per env step minus per update"] == "better", text
    assert verdict["UTD 16, in updates: Polyak minus copy every 256"] == "worse", text
    assert verdict["UTD 16, in env steps: Polyak minus copy every 256"] == "equivalent", text
    assert "Family *Polyak target, CartPole-v1*: 7 contrasts" in text  # 2 trends, 1 unit contrast, 4 against the hard copy
    assert "| 16 | 0/10 | 10/10 |" in text and text.rstrip().endswith("| fewer |"), text
    copies = [line for line in text.splitlines() if "| copy every 256 |" in line]
    assert len(copies) == 4 and not any(line.startswith("| 4 |") for line in copies), text  # UTD 1, 16 x 2 units
    assert all(line.split("|")[4].strip() == "10" for line in copies), text  # LayerNorm's 10 seeds not pooled in


def test_a_reports_verdicts_follow_its_family_in_plain_words_with_each_cells_divergence():
    """The main job's grid (UTD x target unit, 8 seeds a cell), constructed: at UTD 4 with the period in
    updates the return falls by ~200 and 6 seeds diverge; everywhere else it is flat. The report names
    that contrast `worse`, the unit `worse` at UTD 4, and counts 6/8 in that cell."""
    import pandas as pd

    from analysis.report import verdict_lines

    rng = np.random.default_rng(0)
    rows = []
    for utd in (0.25, 1.0, 4.0):
        for unit in ("updates", "env_steps"):
            hurt = utd == 4.0 and unit == "updates"
            for seed in range(8):
                rows.append({"utd": utd, "target_unit": unit, "seed": seed, "env_id": "CartPole-v1", "outcome": "completed",
                             "final_return": rng.normal(100 if hurt else 300, 20),
                             "collapse": "diverged" if hurt and seed < 6 else "healthy"})  # fmt: skip
    lines = verdict_lines(pd.DataFrame(rows))
    text = "\n".join(lines)
    assert lines[0] == "## Verdicts"
    assert "- utd 4.0 vs 0.25 (target_unit=updates): **worse** (-2" in text
    assert "- target_unit updates vs env_steps (utd=4): **worse**" in text
    assert "- utd 1.0 vs 0.25 (target_unit=env_steps): **" in text  # flat: not worse
    assert "**worse**" not in text.split("- utd 1.0 vs 0.25 (target_unit=env_steps)")[1].split("\n")[0]
    assert "target_unit=updates, utd=4 6/8" in text or "utd=4, target_unit=updates 6/8" in text


def test_finding_4r_contrasts_each_utd_with_its_neighbours_on_final_return_and_auc():
    """Finding 4r on constructed runs (30 seeds a cell): with the target in updates, UTD 4 loses 150 return
    over the whole curve and soft-diverges in every seed; everything else is flat. UTD 4 minus 1 reads
    `worse` in updates on both scores and `equivalent` in env steps, the unit `better` at UTD 4 and
    `equivalent` at 0.25, `fewer` seeds soft-diverged in env steps at UTD 4; 10 + 2 contrasts. A LayerNorm
    cell in the same study is not pooled into the plain one."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from analysis.replay_ratio_rerun import finding_rerun
    from dqnlab import metrics as M

    rng = np.random.default_rng(3)
    runs, hist = [], []
    seed_effect = rng.normal(0, 20, 30)  # what a seed does in every cell: a pairing by seed would see it
    for utd in (0.25, 1.0, 4.0):
        for unit in ("updates", "env_steps"):
            hurt = (utd, unit) == (4.0, "updates")
            for seed in range(30):
                run_id = f"{utd}-{unit}-{seed}"
                level = (150 if hurt else 300) + seed_effect[seed] + rng.normal(0, 5)
                runs.append({"run_id": run_id, "status": "completed", "outcome": "completed", "utd": utd,
                             "target_update": "hard", "layer_norm": False, "reset": "none",
                             "target_unit": unit, "seed": seed, "final_return": level, "total_env_steps": 50_000,
                             "final_env_steps": 50_000,
                             "final_env_steps_per_s_total": 50_000 / 60 / (10 * utd)})  # fmt: skip
                hist += [{"run_id": run_id, "metric": metric, M.ENV_STEPS: s, "value": value}
                         for s in (25_000, 50_000)
                         for metric, value in ((M.EVAL_RETURN_MEAN, level), (M.SOFT_DIVERGENCE, float(hurt)))]  # fmt: skip
    stray = [dict(r, run_id=f"ln-{r['run_id']}", layer_norm=True, final_return=450.0) for r in runs[-30:]]
    lr_runs = pd.DataFrame([dict(r, lr=lr, run_id=f"{lr}-{r['run_id']}") for r in runs[-30:-20] for lr in (1e-3, 2.3e-3)])
    lr_hist = pd.DataFrame([dict(h, run_id=f"{lr}-{h['run_id']}") for h in hist[-120:-80] for lr in (1e-3, 2.3e-3)])
    text = finding_rerun({"replay_ratio-rerun_cartpole": (pd.DataFrame(runs + stray), pd.DataFrame(hist))},
                         (lr_runs, lr_hist), planned={"replay_ratio-rerun_cartpole": 30}).text  # fmt: skip
    assert "| 4 | 0.0023 | 10 | 294 [" in text and "| 4 | 0.001 | 10 | 294 [" in text, text  # the rate check's cells
    verdict = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in text.splitlines()
               if line.startswith(("| final return", "| AUC"))}  # fmt: skip
    assert verdict["final return, target in updates: UTD 4 minus 1"] == "worse", text
    assert verdict["AUC, target in updates: UTD 4 minus 1"] == "worse", text
    assert verdict["final return, target in env steps: UTD 4 minus 1"] == "equivalent", text
    assert verdict["AUC, target in updates: UTD 1 minus 0.25"] == "equivalent", text
    assert verdict["final return, UTD 4: target in env steps minus in updates"].startswith("better"), text
    assert verdict["final return, UTD 0.25: target in env steps minus in updates"] == "equivalent", text
    assert "Family *rerun at power, replay_ratio-rerun_cartpole*: 10 contrasts" in text
    assert "| 4 | 0/30 | 30/30 |" in text and "| fewer |" in text, text
    assert "Cost: 105 min of trial wall time for the 6 trials" in text, text  # 10, 10, 40 min a unit
    r = float(text.split("UTD 1 vs 0.25 in updates r = ")[1].split(";")[0])
    assert 0.8 < r < 1.0, text  # the seed effect's share of the spread, seen by seed
    assert "| 4 | updates | 30 | 149 [" in text and "| 4 | env steps | 30 |" in text, text  # LayerNorm's 30 left out


def test_finding_4r_pools_a_cells_seed_blocks_from_its_parts_and_refuses_a_seed_run_twice():
    """A rerun study read from its parts (``<study>-utd0.25_1``, ``<study>-utd4``): a cell whose seeds ran as
    blocks in either part is pooled; a seed of one cell in two parts (a part run twice, blocks that overlap)
    is an error naming the studies, never a cell with that seed counted twice; a cell none of whose seeds
    ran (its trial lost, to be rerun) is left out, not shown as a cell of failed seeds."""
    import pandas as pd

    from analysis.replay_ratio_rerun import by_study

    def part(study, seeds, utd=4.0, outcome="completed"):
        runs = pd.DataFrame([{"run_id": f"{study}-{s}", "study": study, "utd": utd, "target_unit": "updates",
                              "layer_norm": False, "seed": s, "outcome": outcome} for s in seeds])  # fmt: skip
        return runs, pd.DataFrame({"run_id": runs["run_id"], "metric": "x", "value": 0.0})

    name = "replay_ratio-rerun_acrobot"
    low, high = part(f"{name}-utd0.25_1", range(0, 3), utd=1.0), part(f"{name}-utd4", range(0, 3))
    runs, hist = by_study({f"{name}-utd0.25_1": low, f"{name}-utd4": high})[name]
    assert len(runs) == len(hist) == 6
    blocks = part(f"{name}-utd4", [*range(0, 3), *range(6, 9)])  # seed blocks 0..2 and 6..8 of one cell
    assert sorted(by_study({f"{name}-utd4": blocks})[name][0]["seed"]) == [0, 1, 2, 6, 7, 8]
    cartpole = "replay_ratio-rerun_cartpole_100k"  # its UTD-4 cells in blocks of 29, each a part of its own
    blocks = {f"{cartpole}-utd4-seeds{k}": part(f"{cartpole}-utd4-seeds{k}", range(k, k + 2)) for k in (0, 29, 58, 203)}
    assert sorted(by_study(blocks)[cartpole][0]["seed"]) == [0, 1, 29, 30, 58, 59, 203, 204]
    lost = part(f"{name}-utd4", range(0, 3), outcome="failed")  # a trial lost before any seed ended: not run
    runs, hist = by_study({f"{name}-utd0.25_1": low, f"{name}-utd4": lost})[name]
    assert set(runs["utd"]) == {1.0} and len(hist) == 3
    # the lost seeds rerun in another part: taken once, the failed runs neither counted nor called a duplicate
    partly = part(f"{name}-utd4", range(0, 3), outcome="failed")[0].iloc[:2]
    rerun = part(f"{name}-utd4-seeds0", range(0, 3))
    runs, hist = by_study({f"{name}-utd4": (partly, lost[1]), f"{name}-utd4-seeds0": rerun})[name]
    assert sorted(runs["seed"]) == [0, 1, 2] and set(runs["study"]) == {f"{name}-utd4-seeds0"} and len(hist) == 3
    twice = part(f"{name}-utd0.25_1", [2, 3], utd=4.0)  # seed 2 of the UTD-4 cell again
    in_both = r"seed 2 of cell utd=4, target_unit=updates is in .*acrobot-utd0.25_1.*acrobot-utd4"
    with pytest.raises(ValueError, match=in_both):
        by_study({f"{name}-utd0.25_1": twice, f"{name}-utd4": high})


def test_finding_4r_holds_a_cell_short_of_its_planned_seeds_out_of_every_contrast_and_lists_its_count():
    """A cell whose seed blocks are still running (its parts exported one session at a time; failed seeds,
    as a part exported mid-block has, not counted) is listed with its seed count and never tested or drawn:
    the contrasts that need it read `not run`, the others stand, and Holm counts the ones not run (as p = 1)
    so no word read now can flip when they land; once its last block is in, it is contrasted. The planned
    seeds are the presets' (one number, two places)."""
    import importlib.util
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from analysis.replay_ratio_rerun import PLANNED_SEEDS, finding_rerun
    from dqnlab import metrics as M

    def cells(ended_at_4: int):
        runs, hist = [], []
        for utd in (0.25, 1.0, 4.0):
            for unit in ("updates", "env_steps"):
                for seed in range(8):
                    short = (utd, unit) == (4.0, "updates")
                    failed = short and seed >= ended_at_4
                    run_id, level = f"{utd}-{unit}-{seed}", 300.0 + seed - 100.0 * (utd == 4.0)
                    runs.append({"run_id": run_id, "status": "failed" if failed else "completed",
                                 "outcome": "failed" if failed else "completed", "utd": utd, "target_update": "hard",
                                 "layer_norm": False, "reset": "none", "target_unit": unit, "seed": seed,
                                 "final_return": np.nan if failed else level, "total_env_steps": 10_000,
                                 "final_env_steps": 10_000, "final_env_steps_per_s_total": 10_000 / 60})  # fmt: skip
                    curve = ((M.EVAL_RETURN_MEAN, level), (M.SOFT_DIVERGENCE, float(short)))
                    hist += [{"run_id": run_id, "metric": metric, M.ENV_STEPS: s, "value": value}
                             for s in (5_000, 10_000) if not failed for metric, value in curve]  # fmt: skip
        return {"replay_ratio-rerun_acrobot": (pd.DataFrame(runs), pd.DataFrame(hist))}

    def verdicts(text):
        return {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in text.splitlines()
                if line.startswith(("| final return", "| AUC"))}  # fmt: skip

    running = finding_rerun(cells(3), planned={"replay_ratio-rerun_acrobot": 8}).text
    assert "| 4 | updates | 3 of 8 so far | held out until its last seed block is in |" in running, running
    assert "| 4 | env steps | 8 |" in running, running
    v = verdicts(running)
    assert v["final return, target in updates: UTD 4 minus 1"] == "not run", running
    assert v["AUC, target in updates: UTD 4 minus 1"] == "not run", running
    assert v["final return, UTD 4: target in env steps minus in updates"] == "not run", running
    assert v["final return, target in env steps: UTD 4 minus 1"] == "worse", running  # its cells are complete
    assert "7 of 10 contrasts run, Holm-corrected over all 10" in running, running
    assert "| 4 | 0/8 |" not in running and "Noise floor (UTD 1" in running, running  # no Fisher row at UTD 4
    assert "1 of 2 contrasts run" in running, running
    complete = finding_rerun(cells(8), planned={"replay_ratio-rerun_acrobot": 8}).text
    assert verdicts(complete)["final return, target in updates: UTD 4 minus 1"] == "worse", complete
    assert "*: 10 contrasts, Holm-corrected" in complete and "| 4 | 0/8 | 8/8 |" in complete, complete

    path = Path(__file__).resolve().parents[1] / "sweeps" / "replay_ratio.py"
    module = importlib.util.module_from_spec(spec := importlib.util.spec_from_file_location("rr_sweep", path))
    spec.loader.exec_module(module)
    assert PLANNED_SEEDS == {f"replay_ratio-{preset}": base["replicas"] for preset, base in module.RERUNS.items()}


def test_a_family_corrects_over_every_contrast_it_declared_one_not_run_counting_as_p_one():
    """Holm and TOST count a declared contrast with no data yet (or too few seeds a side) as p = 1, so a p
    of 0.03 among two declared reads 0.06 (inconclusive) where the contrast present alone reads 0.03: a
    contrast losing its data never makes the correction of the others milder than declared."""
    draws = np.concatenate([np.full(98_500, 5.0), np.full(1_500, -1.0)])  # a two-sided bootstrap p of 0.03
    alone = Family("f", 1.0)
    alone.add("run", 5.0, draws)
    assert alone.results()[0]["p_holm"] == pytest.approx(0.03) and alone.results()[0]["verdict"] == "better"
    for lost in ([], [1.0, 2.0]):  # no data yet; two seeds a side, fewer than a verdict needs
        family = Family("f", 1.0)
        family.add("run", 5.0, draws)
        family.results()  # a cached reading: declaring another contrast must not leave it stale
        family.difference("not run", lost, lost)
        row = family.results()[0]
        assert row["p_holm"] == pytest.approx(0.06) and row["verdict"] == "inconclusive", (lost, row)
        assert "1 of 2 contrasts run, Holm-corrected over all 2" in family.markdown()


def test_a_contrasts_draws_do_not_change_when_another_declared_contrast_lands():
    """Each contrast draws from the stream of its declared index, so the CI a page prints for one contrast
    is the same before and after an earlier-declared contrast's cells land (only Holm's m-dependent
    digits may move, and those only down)."""
    rng = np.random.default_rng(3)
    a, b, c, d = (rng.normal(mu, 20, 30) for mu in (100, 90, 60, 50))
    before, after = Family("f", 10.0), Family("f", 10.0)
    before.difference("first, not run yet", [], [])
    after.difference("first, landed", a, b)
    for family in (before, after):
        family.difference("second", c, d)
    second = [next(r for r in f.results() if r["contrast"] == "second") for f in (before, after)]
    assert (second[0]["low"], second[0]["high"], second[0]["p"]) == (second[1]["low"], second[1]["high"], second[1]["p"])
    assert second[1]["p_holm"] <= second[0]["p_holm"]


def test_a_contrast_without_finite_draws_or_estimate_is_refused_never_given_a_word():
    """A NaN draw counts in neither tail of a bootstrap p-value: 9 NaNs for each finite draw gave p 0.04 where
    the finite draws alone give 0.4, and a NaN estimate's sign is a word. Each is refused by name; a trend
    over an empty cell (which shifted the other cells' columns and printed `worse`) too."""
    from dqnlab.statistics import bootstrap_p_value, trend_draws

    finite = np.linspace(-0.4, 1.6, 20_000)
    assert bootstrap_p_value(finite) == pytest.approx(0.4, abs=1e-3)
    with pytest.raises(ValueError, match=r"draws: got 180000 non-finite of 200000"):
        bootstrap_p_value(np.concatenate([finite, np.full(180_000, np.nan)]))
    family = Family("f", 1.0)
    family.add("nan draws", 0.6, lambda rng, reps: np.full(reps, np.nan))
    with pytest.raises(ValueError, match=r"f: contrast 'nan draws': 50000 of 50000 bootstrap draws not finite"):
        family.results()
    with pytest.raises(ValueError, match=r"f: contrast 'nan estimate': estimate nan"):
        Family("f", 1.0).add("nan estimate", float("nan"), finite)
    with pytest.raises(ValueError, match=r"cells: got \[10, 0, 10\] seeds for 3 x values"):
        trend_draws([0, 1, 2], [np.ones(10), [], np.ones(10)])

def test_a_contrast_that_leaves_out_seeds_without_a_score_says_how_many():
    """A hard-diverged seed has no final return (NaN) and is left out of its cell's IQM; the row says so,
    since the survivors' IQM could flatter the side that diverged."""
    rng = np.random.default_rng(4)
    family = Family("f", 10.0)
    family.difference("some diverged", np.append(rng.normal(100, 5, 8), [np.nan, np.nan]), rng.normal(90, 5, 10))
    family.difference("none diverged", rng.normal(100, 5, 10), rng.normal(90, 5, 10))
    lines = {line.split("|")[1].strip(): line for line in family.markdown().splitlines() if line.startswith("| ")}
    assert lines["some diverged"].endswith("| better (2 vs 0 seeds without a score left out) |"), lines
    assert lines["none diverged"].endswith("| better |"), lines
