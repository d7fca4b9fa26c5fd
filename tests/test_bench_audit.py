"""The audit benchmark leaves nothing behind and its --one mode runs each variant (for valgrind)."""

import tempfile

import numpy as np
import pytest

from dqnlab.bench import audit as bench


@pytest.mark.parametrize("variant", ["plain", "audit", "null", "produced", "sampled", "updated"])
def test_one_loop_of_each_variant_runs_and_leaves_no_folder(tmp_path, monkeypatch, variant):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert bench.main(["--one", variant, "--steps", "300"]) == 0
    assert list(tmp_path.iterdir()) == [], "the benchmark left its audit folders behind"


def test_the_null_audit_records_no_transition_but_the_real_one_does(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = {}

    def keep(cls):
        class Kept(cls):
            def close(self):
                super().close()
                seen[cls.__name__] = sum(self._seq)

        return Kept

    for cls in (bench.Audit, bench.NullAudit):
        assert bench.loop(300, True, audit_class=keep(cls)) > 0
    assert seen == {"Audit": 300, "NullAudit": 0}


def test_the_interleaved_loop_audits_only_its_audited_chunks(tmp_path, monkeypatch):
    """Chunks alternate A B B A: of 8 chunks of 50 env steps, 4 call the audit (200 transitions recorded)
    and the loop's state carries across chunks (400 env steps in all, one env)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = {}

    class Kept(bench.Audit):
        def close(self):
            super().close()
            seen["produced"] = sum(self._seq)

    monkeypatch.setattr(bench, "Audit", Kept)
    steps = []
    run = bench.UserLoop.run

    def counting(self, n, audit):
        steps.append((n, audit is not None))
        run(self, n, audit)

    monkeypatch.setattr(bench.UserLoop, "run", counting)
    overhead = bench.interleaved(400, chunk=50)
    assert overhead > -1
    assert steps[0] == (50, False), "the warm-up chunk runs without the audit"
    assert [a for _, a in steps[1:]] == [False, True, True, False] * 2
    assert seen == {"produced": 200}
    assert list(tmp_path.iterdir()) == [], "the benchmark left its audit folder behind"


@pytest.mark.parametrize("net", bench.NETS)
def test_a_resumed_loop_is_the_loop_run_at_once(net):
    """Two calls of 150 env steps leave the loop where one call of 300 does (buffer, weights, counters)."""
    whole, split = bench.UserLoop(seed=3, net=net), bench.UserLoop(seed=3, net=net)
    whole.run(300, None)
    split.run(150, None)
    split.run(150, None)
    assert (whole.step, whole.pos, whole.size, whole.updates) == (split.step, split.pos, split.size, split.updates)
    np.testing.assert_array_equal(whole.obs_buf, split.obs_buf)
    np.testing.assert_array_equal(whole.w[2], split.w[2])
    assert whole.updates > 0 and whole.act(whole.obs) == split.act(split.obs)  # the learned net acts the same


def test_the_torch_loop_learns_and_an_unknown_net_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert bench.main(["--one", "audit", "--net", "torch", "--steps", "300"]) == 0
    with pytest.raises(ValueError, match="net='jax'"):
        bench.UserLoop(net="jax")


def test_an_only_audit_records_exactly_its_one_call(tmp_path, monkeypatch):
    """``only("sampled")`` counts the sampled batches and nothing else; ``only("produced")`` the transitions."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = {}
    for call in bench.CALLS:

        class Kept(bench.only(call)):
            name = call

            def close(self):
                self.flush()
                seen[self.name] = (sum(self._seq), int(self._sampled.sum()), sum(self._updates.values()))
                super().close()

        bench.loop(400, True, audit_class=Kept)
    updates = seen["updated"][2]
    assert updates > 0
    assert seen == {"produced": (400, 0, 0), "sampled": (0, 128 * updates, 0), "updated": (0, 0, updates)}
