"""The audit benchmark leaves nothing behind and its --one mode runs each variant (for valgrind)."""

import tempfile

import pytest

from dqnlab.bench import audit as bench


@pytest.mark.parametrize("variant", ["plain", "audit", "null"])
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
