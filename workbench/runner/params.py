"""Notebook parameters: read the ``parameters`` cell, parse values as plain data, check types.

Values given on the command line (``-p NAME VALUE``) or in a sweep grid are data, never code: a
value is parsed with ``yaml.safe_load`` into ``None``, a bool, an int, a float, a string, or lists
and string-keyed mappings of these, and anything else is refused before a kernel starts. Each value
is checked against the type of the parameter's default in the notebook's ``parameters`` cell (or
its annotation, ``n: int = 8``), as papermill's :func:`papermill.inspect_notebook` reports it.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.runner.errors import ParameterError

RESERVED = ("out_dir",)
"""Parameters the runner sets itself (``out_dir`` comes from ``--out``)."""
_KINDS = {"bool": bool, "int": int, "float": float, "str": str, "list": list, "dict": dict}


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a notebook's ``parameters`` cell.

    Attributes:
        name: The variable name.
        default: The default value, when it is a literal (else ``None``).
        kind: ``bool``, ``int``, ``float``, ``str``, ``list``, ``dict`` or ``any``.
        help: The comment after the assignment.
    """

    name: str
    default: Any
    kind: str
    help: str = ""


def _kind_of(value: Any) -> str:
    for name, typ in _KINDS.items():
        if type(value) is typ:
            return name
    return "any"


def _annotation_kind(annotation: str) -> str | None:
    text = annotation.strip().replace(" ", "")
    if text in _KINDS:
        return text
    return None


def notebook_params(notebook: str | Path) -> dict[str, ParamSpec]:
    """The parameters of ``notebook``'s cell tagged ``parameters``, by name (in cell order)."""
    import papermill

    specs = {}
    for name, info in papermill.inspect_notebook(str(notebook)).items():
        try:
            default = ast.literal_eval(info.get("default") or "None")
            literal = True
        except (ValueError, SyntaxError):
            default, literal = None, False
        kind = _annotation_kind(info.get("inferred_type_name") or "")
        if kind is None:
            kind = _kind_of(default) if literal and default is not None else "any"
        specs[name] = ParamSpec(name, default, kind, info.get("help") or "")
    return specs


def check_plain(value: Any, where: str) -> Any:
    """Returns ``value`` if it is plain data (JSON-like); else raises ParameterError."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ParameterError(f"{where}: {value!r} is not a finite number")
        return value
    if isinstance(value, list | tuple):
        return [check_plain(v, where) for v in value]
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise ParameterError(f"{where}: mapping keys must be strings, got {dict(value)!r}")
        return {k: check_plain(v, where) for k, v in value.items()}
    raise ParameterError(
        f"{where}: {value!r} ({type(value).__name__}) is not plain data; "
        "use a number, bool, string, null, or a list/mapping of these"
    )


def parse_value(text: str, where: str = "value") -> Any:
    """Parses one command-line value as YAML plain data (``3``, ``true``, ``[1, 2]``, ``x``)."""
    import yaml

    if text in ("None", "none"):
        return None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid YAML"
        raise ParameterError(f"{where}: cannot parse {text!r} as plain data ({first})") from None
    return check_plain(value, where)


def coerce(spec: ParamSpec, value: Any, raw: str | None = None) -> Any:
    """Checks ``value`` against ``spec``'s type; returns the value to inject.

    Args:
        spec: The parameter.
        value: The parsed value.
        raw: The text it was parsed from (a ``str`` parameter keeps the text as given).

    Raises:
        ParameterError: The value does not fit the parameter's type.
    """
    where = f"parameter {spec.name!r}"
    value = check_plain(value, where)
    kind = spec.kind
    if kind == "any" or (value is None and spec.default is None):
        return value
    if kind == "str":
        if raw is not None:
            return raw
        if isinstance(value, str):
            return value
    elif kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind == "list":
        if isinstance(value, list):
            return value
    elif kind == "dict" and isinstance(value, dict):
        return value
    shown = raw if raw is not None else repr(value)
    raise ParameterError(
        f"{where} expects {kind} (default {spec.default!r}), got {shown!r} ({type(value).__name__})"
    )


def resolve(
    specs: Mapping[str, ParamSpec],
    given: Mapping[str, Any],
    raw: Mapping[str, str] | None = None,
    *,
    reserved: tuple[str, ...] = RESERVED,
) -> dict[str, Any]:
    """Validates parameter values against ``specs``; returns the checked values to inject.

    Args:
        specs: The notebook's parameters.
        given: Parsed values (from a grid or the Python API).
        raw: Command-line texts, parsed here: verbatim for ``str`` parameters, else as YAML data.
        reserved: Names the runner sets itself (``out_dir``), refused here.

    Raises:
        ParameterError: An unknown or reserved name, or a value of the wrong type.
    """
    raw = dict(raw or {})
    out = {}
    for name in [*given, *(n for n in raw if n not in given)]:
        if name in reserved:
            raise ParameterError(f"parameter {name!r} is set by the runner (use --out), not by -p")
        if name not in specs:
            known = ", ".join(n for n in specs if n not in reserved) or "none"
            raise ParameterError(f"unknown parameter {name!r}; the notebook takes: {known}")
        spec = specs[name]
        if name in given:
            value = given[name]
        elif spec.kind == "str":
            value = raw[name]
        else:
            value = parse_value(raw[name], f"parameter {name!r}")
        out[name] = coerce(spec, value, raw.get(name))
    return out


def defaults(specs: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """Every parameter's default (``None`` where the default is not a literal)."""
    return {name: spec.default for name, spec in specs.items()}
