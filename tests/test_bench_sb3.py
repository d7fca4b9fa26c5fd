"""The Stable-Baselines3 comparison (``python -m dqnlab.bench.sb3``): its dqnlab side measures the
steady state at the exact UTD, and without the optional extra it says how to install it."""

import builtins

import pytest

from dqnlab.bench import sb3


def test_the_dqnlab_side_measures_env_steps_per_second_after_learning_starts_at_the_exact_utd(leak_guard):
    rate, realised = sb3.dqnlab_rate(1.0, 600)
    assert realised == 1.0
    assert 0 < rate < 1e6


def test_without_stable_baselines3_it_exits_2_naming_the_extra(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_sb3(name, *args, **kwargs):
        if name.startswith("stable_baselines3"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sb3)
    with pytest.raises(SystemExit) as exit_:
        sb3.main(["--repeats", "1"])
    assert exit_.value.code == 2
    assert 'pip install -e ".[bench]"' in capsys.readouterr().err
