"""One way to write a result record as JSON and read it back: a small codec over dataclasses.

A result dataclass that inherits :class:`Record` gets ``to_dict()`` and ``from_dict()`` from its
fields and their type annotations, instead of a hand-written pair:

- writing (:func:`encode`): each ``init`` field by name, nested dataclasses as dicts, tuples and
  lists as lists, arrays as nested lists, numpy scalars as Python numbers, and non-finite floats
  as ``null`` (the ``results.json`` policy of :func:`workbench.arrays.plain`);
- reading (:func:`decode`): each field rebuilt from its annotation: ``float`` reads ``null`` as
  NaN (:func:`workbench.arrays.float_or_nan`), ``X | None`` keeps ``null``, ``tuple[X, ...]``,
  ``list[X]`` and ``dict[str, X]`` decode their items, a nested dataclass decodes itself, and an
  ``np.ndarray`` field becomes an array (``null`` entries NaN) that the class's own
  ``__post_init__`` freezes with its dtype. A field missing from the data keeps its default, so a
  record written before a field was added still reads.

A field whose value is not data (a model, a cached tensor) is marked
``field(metadata={"record": False})`` and left out of the record; it must have a default.
Classes whose record is not their fields (derived keys, renamed fields) keep a hand-written pair.

Example::

    @dataclass(frozen=True)
    class Curve(Record):
        steps: tuple[int, ...]
        loss: np.ndarray
        note: str | None = None

    Curve.from_dict(curve.to_dict()) == curve
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Self

import numpy as np

from workbench.arrays import float_or_nan, plain

_HINTS: dict[type, dict[str, Any]] = {}


def encode(value: Any) -> Any:
    """The JSON-ready form of ``value`` (see the module docstring)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: encode(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.init and f.metadata.get("record", True)
        }
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    return plain(value)


def decode(hint: Any, data: Any) -> Any:
    """``data`` (as :func:`encode` wrote it) read back as the type ``hint`` names."""
    if hint is Any or hint is None:
        return data
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        if data is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        return decode(options[0], data) if len(options) == 1 else data
    if origin is typing.Literal or isinstance(hint, typing.TypeVar):
        return data
    if dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, data)
    if hint is float:
        return float_or_nan(data)
    if hint is bool:
        return bool(data)
    if hint is int:
        return int(data)
    if hint is str:
        return str(data)
    if hint is np.ndarray:
        return _array(data)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v) for v in data)
        if args:
            return tuple(decode(a, v) for a, v in zip(args, data, strict=True))
        return tuple(data)
    if origin in (list, collections.abc.Sequence):
        item = args[0] if args else Any
        return [decode(item, v) for v in data]
    if origin in (dict, collections.abc.Mapping):
        key, item = args if args else (Any, Any)
        return {(int(k) if key is int else k): decode(item, v) for k, v in data.items()}
    return data


def _array(data: Any) -> np.ndarray:
    """Nested lists as an array; ``null`` entries read as NaN (a float array)."""
    arr = np.asarray(data)
    if arr.dtype == object:
        arr = np.asarray(data, dtype=np.float64)
    return arr


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _decode_dataclass(cls: type, data: Mapping[str, Any]) -> Any:
    hints = _hints(cls)
    kwargs = {
        f.name: decode(hints.get(f.name, Any), data[f.name])
        for f in dataclasses.fields(cls)
        if f.init and f.metadata.get("record", True) and f.name in data
    }
    return cls(**kwargs)


class Record:
    """``to_dict()`` / ``from_dict()`` from a dataclass's fields (see the module docstring)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (also the cache format)."""
        return encode(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Inverse of :meth:`to_dict`."""
        return _decode_dataclass(cls, data)
