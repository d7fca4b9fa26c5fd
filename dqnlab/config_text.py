"""A config field as text: its docstring, its type, and the parser the command line, sweep axes and
MLflow params read its value with (one parser for all three)."""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any, Literal, get_args, get_origin

from dqnlab.config import SECTIONS


def field_docs() -> dict[str, str]:
    """Field name -> the docstring written under it (for --help texts)."""
    import ast
    import inspect

    docs: dict[str, str] = {}
    for section in SECTIONS.values():
        body = ast.parse(inspect.getsource(section)).body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr):
                if isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                    docs[node.target.id] = nxt.value.value  # type: ignore[attr-defined]
    return docs


def field_types() -> dict[str, Any]:
    """Field name -> resolved annotation (e.g. ``Literal['strict', 'free']``)."""
    out: dict[str, Any] = {}
    for section in SECTIONS.values():
        out.update(typing.get_type_hints(section))
    return out


def text_parser(tp: Any):
    """``(parse, choices)`` for a config annotation: ``parse(text)`` reads a value from the command line
    (argparse ``type``), ``choices`` the allowed strings of a Literal (else None)."""
    origin = get_origin(tp)
    if origin is Literal:
        return str, list(get_args(tp))
    if origin in (typing.Union, types.UnionType):  # X | None
        inner = next(a for a in get_args(tp) if a is not type(None))
        base, _ = text_parser(inner)

        def optional(text: str):
            return None if text.lower() == "none" else base(text)

        optional.__name__ = base.__name__ + " or none"
        return optional, None
    if origin is tuple:
        element = get_args(tp)[0]

        def tuple_of(text: str) -> tuple:
            return tuple(element(x) for x in text.replace(",", " ").split())

        tuple_of.__name__ = f"comma-separated {element.__name__}s"
        return tuple_of, None
    if tp is bool:

        def boolean(text: str) -> bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")

        return boolean, None
    return tp, None
