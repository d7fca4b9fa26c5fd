import pytest

from dqnlab.config import Config, ConfigError


def test_defaults_are_valid_and_round_trip_through_flat_form():
    config = Config()
    assert Config.from_flat(config.to_flat()) == config


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"utd": 0.0}, "utd"),
        ({"utd": -1.0}, "utd"),
        ({"utd": float("nan")}, "utd"),
        ({"num_workers": 0}, "num_workers"),
        ({"envs_per_worker": 0}, "envs_per_worker"),
        ({"batch_size": 256, "buffer_capacity": 100}, "buffer_capacity"),
        ({"learning_starts": 60_000, "total_env_steps": 50_000}, "learning_starts"),
        ({"learning_starts": 10, "batch_size": 32}, "learning_starts"),
        ({"gamma": -0.1}, "gamma"),
        ({"gamma": 1.0}, "gamma"),
        ({"reset": "sometimes"}, "reset"),
        ({"limiter": "loose"}, "limiter"),
        ({"mode": "threads"}, "mode"),
        ({"device": "tpu"}, "device"),
        ({"target_period": 0}, "target_period"),
        ({"tau": 0.0}, "tau"),
        ({"shrink_alpha": 1.5}, "shrink_alpha"),
        ({"hidden_sizes": ()}, "hidden_sizes"),
        ({"hidden_sizes": (64, 0)}, "hidden_sizes"),
        ({"limiter_slack": 0.2}, "limiter_slack"),
        ({"epsilon_end": 0.9, "epsilon_start": 0.5}, "epsilon_end"),
        ({"num_workers": 2.5}, "num_workers"),
        ({"num_workers": True}, "num_workers"),
        ({"layer_norm": 1}, "layer_norm"),
        ({"utd": "fast"}, "utd"),
        ({"total_env_steps": 1001, "envs_per_worker": 2}, "total_env_steps"),
        ({"reward_bound": 0.0}, "reward_bound"),
        # non-finite values the hypothesis battery found accepted before these fields checked them
        ({"max_grad_norm": float("inf")}, "max_grad_norm"),
        ({"epsilon_alpha": float("inf")}, "epsilon_alpha"),
        ({"limiter_slack": float("inf")}, "limiter_slack"),
        ({"worker_timeout_s": float("inf")}, "worker_timeout_s"),
    ],
)
def test_invalid_values_raise_naming_the_field_and_the_allowed_values(overrides, field):
    with pytest.raises(ConfigError) as err:
        Config.from_flat(overrides)
    message = str(err.value)
    assert message.startswith(f"{field}:"), message
    assert "allowed" in message


def test_unknown_field_is_rejected_with_the_valid_names():
    with pytest.raises(ConfigError, match="unknown config field.*utdd.*valid fields"):
        Config.from_flat(utdd=1.0)


def test_ints_are_accepted_for_float_fields_and_stored_as_floats():
    config = Config.from_flat(utd=4)
    assert config.agent.utd == 4.0 and isinstance(config.agent.utd, float)


def test_config_is_frozen():
    config = Config()
    with pytest.raises(AttributeError):
        config.agent.utd = 2.0  # type: ignore[misc]


@pytest.mark.parametrize("sweep", ["calibration", "parallel", "replay_ratio", "throughput", "utd", "workers", "writers"])
def test_every_preset_of_every_sweep_builds_a_valid_config_at_every_grid_point(sweep):
    """A preset is a study of hours: a typo in it (a field, a value, a variant) fails here in seconds, not
    after the study's first trials ran."""
    import importlib.util
    from pathlib import Path

    from dqnlab.study.cli import build_parser, spec_from_args
    from dqnlab.study.spec import validate_spec

    path = Path(__file__).resolve().parent.parent / "sweeps" / f"{sweep}.py"
    module = importlib.util.module_from_spec(spec := importlib.util.spec_from_file_location(f"{sweep}_sweep", path))
    spec.loader.exec_module(module)  # the presets; its __main__ block does not run
    objective = "throughput" if sweep == "throughput" else "eval"
    for preset in module.PRESETS:
        args = build_parser(sweep, module.PRESETS, preset).parse_args(["--preset", preset])
        study = spec_from_args(sweep, args, module.PRESETS, objective)
        validate_spec(study)
        configs = [study.config_for(point) for point in study.points()]
        assert configs, f"{sweep} --preset {preset}: an empty grid"
