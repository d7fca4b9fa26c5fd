"""The CPU-vs-GPU learner benchmark (``python -m dqnlab.bench.device``): everything around its CUDA
path, tested on the CPU (CI has no GPU). The CUDA-graph row replays :func:`gradient_step`; here it is
checked to be the learner's own update, so a graph that runs on a GPU measures the real update."""

import copy
import dataclasses

import pytest
import torch

from dqnlab.bench import device as bench


@pytest.mark.parametrize("replicas, double_dqn", [(1, True), (3, True), (3, False)])
def test_the_captured_gradient_step_is_the_learners_update(replicas, double_dqn):
    learner = bench.make_learner("cpu", 16, 8, replicas)
    # a small clip norm, so the per-replica clipping is active and compared too
    agent = dataclasses.replace(learner.config.agent, double_dqn=double_dqn, max_grad_norm=0.05)
    learner.config = dataclasses.replace(learner.config, agent=agent)
    twin = copy.deepcopy(learner)
    batches = bench.synthetic_batches(replicas, 8, 3, seed=1)
    for batch in batches:
        learner.update(batch)
        bench.gradient_step(twin, [torch.from_numpy(x) for x in bench.learner_arrays(batch)])
    for (name, p), q in zip(learner.net.named().items(), twin.net.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=name)


def test_the_gradient_step_moves_the_parameters_so_the_comparison_is_not_vacuous():
    learner = bench.make_learner("cpu", 16, 8, 2)
    before = [p.detach().clone() for p in learner.net.parameters()]
    batch = bench.synthetic_batches(2, 8, 1)[0]
    bench.gradient_step(learner, [torch.from_numpy(x) for x in bench.learner_arrays(batch)])
    assert all(not torch.equal(b, p) for b, p in zip(before, learner.net.parameters()))


def test_a_cuda_graph_of_a_cpu_learner_is_refused_naming_the_device():
    learner = bench.make_learner("cpu", 16, 8, 1)
    with pytest.raises(ValueError, match="device: CUDA graphs need a cuda learner, got 'cpu'"):
        bench.GraphedUpdate(learner, bench.synthetic_batches(1, 8, 1)[0])


def test_an_unknown_mode_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed: 'cpu eager', 'cuda eager', 'cuda graph'"):
        bench.measure("tpu", 16, 8, 1, 5)


def test_without_cuda_the_script_prints_the_cpu_rows_and_says_cuda_is_absent(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--widths", "16", "--batches", "8,16", "--replicas", "1,2", "--repeats", "1", "--updates", "5"]) == 0
    out = capsys.readouterr().out
    assert "CUDA: not available" in out
    rows = [line.split() for line in out.splitlines()[2:] if line.strip()]
    assert [(r[0], r[1], r[2]) for r in rows] == [("16", "8", "1"), ("16", "8", "2"), ("16", "16", "1"), ("16", "16", "2")]
    assert all(float(r[3]) > 0 for r in rows)  # a measured run-updates/s, not nan
