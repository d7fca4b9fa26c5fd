"""``python -m dqnlab.services``: bad input fails early with the flag named, and nothing starts."""

from __future__ import annotations

import pytest

from dqnlab.services.__main__ import main
from dqnlab.services.postgres import find_pg_bin
from dqnlab.services.state import ServiceError


@pytest.mark.parametrize("flag", ["--pg-port", "--mlflow-port", "--dashboard-port"])
def test_out_of_range_ports_are_refused_naming_the_flag(flag, tmp_path, capsys):
    assert main(["up", "--root", str(tmp_path / "svc"), flag, "70000"]) == 2
    assert f"{flag}: got 70000; allowed: 1..65535" in capsys.readouterr().err
    assert not (tmp_path / "svc").exists(), "nothing is created before the input is checked"


@pytest.mark.parametrize("command", ["down", "status", "env"])
def test_commands_on_a_root_without_services_say_how_to_start_them(command, tmp_path, capsys):
    assert main([command, "--root", str(tmp_path)]) == 2
    assert "python -m dqnlab.services up --root" in capsys.readouterr().err


def test_a_pg_bin_folder_without_the_server_binaries_is_refused(tmp_path):
    with pytest.raises(ServiceError, match="--pg-bin: .* holds no initdb and pg_ctl; allowed"):
        find_pg_bin(str(tmp_path))


def test_a_bad_pg_bin_writes_nothing(tmp_path, capsys):
    assert main(["up", "--root", str(tmp_path / "svc"), "--pg-bin", str(tmp_path)]) == 2
    assert "--pg-bin" in capsys.readouterr().err and not (tmp_path / "svc").exists()


@pytest.mark.parametrize("value", ["10.0.0.0/33", "not-a-network", "10.0.0.0/8,,example.com"])
def test_a_bad_allow_from_is_refused_naming_the_flag(tmp_path, capsys, value):
    assert main(["up", "--root", str(tmp_path / "svc"), "--allow-from", value]) == 2
    assert "--allow-from" in capsys.readouterr().err
    assert not (tmp_path / "svc").exists()
