"""Sweep grids: a YAML mapping of parameter -> list of values, expanded as a cartesian product.

.. code-block:: yaml

    n: [4, 8, 16]          # every combination of the listed values
    scale: [0.5, 1.0]
    fixed:                 # optional: the same value in every run
      model: tiny-lm

Each point is identified by a hash of its checked parameter values (:func:`point_id`), which names
its folder ``runs/<id>/``; the same point always gets the same folder, whatever the file's order.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.runner.errors import GridError, ParameterError
from workbench.runner.params import check_plain


@dataclass(frozen=True)
class Grid:
    """A parameter grid.

    Attributes:
        axes: Parameter -> the values to sweep (in file order).
        fixed: Parameter -> the value every run gets.
    """

    axes: dict[str, list[Any]]
    fixed: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, values in self.axes.items():
            if not isinstance(values, list) or not values:
                raise GridError(f"grid entry {name!r} must be a non-empty list, got {values!r}")
        both = sorted(set(self.axes) & set(self.fixed))
        if both:
            raise GridError(f"parameters {both} are both swept and fixed")

    def points(self) -> list[dict[str, Any]]:
        """Every combination, as parameter dicts (fixed values included)."""
        names = list(self.axes)
        combos = itertools.product(*(self.axes[n] for n in names))
        return [{**self.fixed, **dict(zip(names, combo, strict=True))} for combo in combos]


def parse_grid(data: Any, source: str = "grid") -> Grid:
    """Builds a :class:`Grid` from parsed YAML.

    Raises:
        GridError: not a mapping of parameter -> list, or values that are not plain data.
    """
    if not isinstance(data, Mapping) or not data:
        raise GridError(f"{source}: expected a mapping of parameter -> list of values")
    data = dict(data)
    fixed = data.pop("fixed", None) or {}
    if not isinstance(fixed, Mapping):
        raise GridError(f"{source}: 'fixed' must be a mapping of parameter -> value")
    try:
        axes = {str(k): check_plain(v, f"{source}: {k}") for k, v in data.items()}
        fixed = {str(k): check_plain(v, f"{source}: fixed {k}") for k, v in fixed.items()}
    except ParameterError as exc:
        raise GridError(str(exc)) from None
    return Grid(axes, fixed)


def load_grid(path: str | Path) -> Grid:
    """Reads a grid YAML file.

    Raises:
        GridError: The file is unreadable, not YAML, or not a grid.
    """
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise GridError(f"cannot read grid file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid YAML"
        raise GridError(f"grid file {path} is not valid YAML ({first})") from None
    return parse_grid(data, str(path))


def point_id(params: Mapping[str, Any]) -> str:
    """A stable 12-hex-digit id of a parameter set (order-independent)."""
    canon = json.dumps(dict(params), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:12]
