import json

import pytest

from dqnlab.train import build_parser, config_from_args, main


def test_every_config_field_has_a_flag():
    from dqnlab.config import Config

    flags = {a.dest for a in build_parser()._actions}
    assert set(Config.field_names()) <= flags


def test_flags_and_aliases_build_the_config():
    args = build_parser().parse_args(
        ["--env", "Acrobot-v1", "--workers", "3", "--utd", "4", "--total-steps", "9000", "--hidden-sizes", "32,16",
         "--layer-norm", "true", "--reward-bound", "none"]
    )  # fmt: skip
    config = config_from_args(args)
    assert config.env.env_id == "Acrobot-v1" and config.env.num_workers == 3
    assert config.agent.utd == 4.0 and config.run.total_env_steps == 9000
    assert config.network.hidden_sizes == (32, 16) and config.network.layer_norm is True


def test_bad_value_exits_2_naming_the_field(capsys):
    assert main(["--utd", "0"]) == 2
    assert "utd: got 0.0; allowed" in capsys.readouterr().err


def test_unknown_flag_and_bad_choice_exit_before_running(capsys):
    with pytest.raises(SystemExit) as err:
        main(["--utdd", "1"])
    assert err.value.code == 2
    with pytest.raises(SystemExit):
        main(["--reset", "sometimes"])
    assert "invalid choice" in capsys.readouterr().err


def test_short_run_writes_history_and_summary(tmp_path, capsys, leak_guard):
    out = tmp_path / "history.json"
    code = main(["--total-steps", "1200", "--learning-starts", "500", "--batch-size", "32", "--probe-size", "32",
                 "--log-every", "100", "--eval-every-steps", "600", "--eval-episodes", "1", "--quiet",
                 "--history-json", str(out)])  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert data["status"] == "completed" and data["history"][-1]["env_steps"] == 1200
    assert "run completed" in capsys.readouterr().err
