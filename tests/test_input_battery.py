"""Property-based bad-input battery (hypothesis): whatever value reaches a config field, through the
Python API, the training command line or a sweep flag, the outcome is a valid config or one clear
error naming a real field and the allowed values, never another exception and never a process."""

from __future__ import annotations

import contextlib
import io
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dqnlab.config import Config, ConfigError
from dqnlab.study.cli import parse_axis, parse_field_value
from dqnlab.study.spec import SweepError
from dqnlab.train import build_parser, config_from_args

FIELDS = Config.field_names()
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])  # fmt: skip

any_value = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.tuples(st.integers(-5, 300)), st.lists(st.integers(-5, 300), max_size=3).map(tuple),
    st.sampled_from(["none", "head", "linear", "strict", "serial", "cpu", "CartPole-v1", "", "-1", "nan", "1e9"]),
)  # fmt: skip
cli_text = st.one_of(
    st.text(max_size=10), st.integers(-(10**9), 10**9).map(str), st.floats().map(repr),
    st.sampled_from(["true", "false", "None", "inf", "-inf", "nan", "0", "64,64", "64 0", "", "CartPole-v1"]),
)  # fmt: skip


def _assert_clear(message: str) -> None:
    named = message.split(":", 1)[0]
    assert named in FIELDS, f"error does not start with a field name: {message!r}"
    assert "allowed" in message, message


def _valid_or_clear_error(build) -> None:
    """``build()`` gives a config that round-trips with finite floats, or a ConfigError that names a field."""
    try:
        config = build()
    except ConfigError as exc:
        _assert_clear(str(exc))
        return
    assert Config.from_flat(config.to_flat()) == config
    for value in config.to_flat().values():
        if isinstance(value, float):
            assert math.isfinite(value)


@SETTINGS
@given(field=st.sampled_from(FIELDS), value=any_value)
def test_any_value_for_any_field_is_accepted_or_named_in_the_error(field, value):
    _valid_or_clear_error(lambda: Config.from_flat({field: value}))


@SETTINGS
@given(values=st.dictionaries(st.sampled_from(FIELDS), any_value, min_size=2, max_size=4))
def test_combinations_of_fields_fail_on_one_named_field(values):
    _valid_or_clear_error(lambda: Config.from_flat(values))


@SETTINGS
@given(field=st.sampled_from(FIELDS), text=cli_text)
def test_any_text_for_any_training_flag_parses_or_exits_2_or_names_the_field(field, text):
    flag = "--" + field.replace("_", "-")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args([f"{flag}={text}"])
    except SystemExit as exc:  # argparse's own type/choice error
        assert exc.code == 2
        assert flag in err.getvalue(), err.getvalue()
        return
    _valid_or_clear_error(lambda: config_from_args(args))


@SETTINGS
@given(field=st.sampled_from(FIELDS), text=cli_text)
def test_any_text_for_a_sweep_axis_is_read_or_rejected_naming_the_field(field, text):
    try:
        name, values = parse_axis(f"{field}={text}")
    except SweepError as exc:
        assert field in str(exc), str(exc)
        return
    assert name == field
    for v in values:
        _valid_or_clear_error(lambda v=v: Config.from_flat({field: v}))


@pytest.mark.parametrize("name", ["utdd", "workers", "x", "seed_", "UTD"])
def test_unknown_sweep_fields_name_the_allowed_ones(name):
    with pytest.raises(SweepError, match=f"{name}.*allowed"):
        parse_field_value(name, "1")
