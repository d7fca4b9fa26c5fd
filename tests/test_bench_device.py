"""The CPU-vs-GPU learner benchmark (``python -m dqnlab.bench.device``): everything around its CUDA
path, tested on the CPU (CI has no GPU). The CUDA-graph row replays :func:`gradient_step`; here it is
checked to be the learner's own update, so a graph that runs on a GPU measures the real update."""

import copy
import dataclasses

import pytest
import torch

from dqnlab.agent.learner import Learner
from dqnlab.bench import device as bench


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("double_dqn", [False, True])
def test_the_gradient_step_a_cuda_graph_captures_makes_no_host_sync(layer_norm, double_dqn):
    # meta tensors have shapes but no data: .item(), .tolist(), a branch on a value or a data-dependent
    # shape raises on them, exactly what a CUDA graph cannot capture. The step must run through.
    learner = bench.make_learner("cpu", 16, 8, 3)
    agent = dataclasses.replace(learner.config.agent, double_dqn=double_dqn)
    network = dataclasses.replace(learner.config.network, layer_norm=layer_norm)
    learner = Learner(dataclasses.replace(learner.config, agent=agent, network=network), 4, 2, device="meta")
    out = learner.gradient_step(*learner.batch_tensors(bench.synthetic_batches(3, 8, 1)[0]))
    assert out.loss.device.type == "meta" and out.loss.shape == (3,)
    with pytest.raises(RuntimeError):  # the probe bites: a host sync does raise on meta tensors
        out.loss.sum().item()


def test_the_graphed_update_replays_the_learners_own_step_and_bookkeeping():
    # CPU-side check of what GraphedUpdate wires together: its static inputs are the learner's batch
    # tensors, and finish_update counts, accumulates and copies the target as Learner.update does.
    learner = bench.make_learner("cpu", 16, 8, 2)
    twin = copy.deepcopy(learner)
    batch = bench.synthetic_batches(2, 8, 1)[0]
    for _ in range(3):
        learner.update(batch)
        twin.finish_update(twin.gradient_step(*twin.batch_tensors(batch)))
    assert twin.updates == learner.updates == 3
    torch.testing.assert_close(twin.net.flat, learner.net.flat, rtol=0, atol=0)
    assert twin.pop_mean_loss() == learner.pop_mean_loss()


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
