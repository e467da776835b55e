"""Small array helpers shared by result dataclasses across the package: frozen arrays, JSON."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np


def frozen(a: Any, dtype: Any = np.float64) -> np.ndarray:
    """A read-only contiguous copy (or view) of ``a`` as ``dtype``, for frozen result fields.

    Args:
        a: Anything ``np.asarray`` accepts.
        dtype: The array's dtype.

    Returns:
        An array whose ``writeable`` flag is off, so a frozen dataclass stays frozen.
    """
    out = np.ascontiguousarray(a, dtype=dtype)
    if out is a:
        out = out.view()
    out.flags.writeable = False
    return out


def frozen_or_none(a: Any, dtype: Any = np.float64) -> np.ndarray | None:
    """:func:`frozen`, passing ``None`` through."""
    return None if a is None else frozen(a, dtype)


def plain(value: Any) -> Any:
    """Converts numpy/torch scalars and arrays, tuples and paths into JSON-ready values.

    Non-finite floats become ``None`` so the file stays valid JSON.
    """
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def finite_or_none(value: Any, digits: int | None = None) -> float | None:
    """A number for ``results.json``: ``None`` for ``None``, NaN or infinity, else a float.

    The one rounding policy of the metrics blocks: ``digits`` decimals where a study reports
    rounded numbers (:func:`round`), full precision without.

    Args:
        value: A Python or numpy number, or ``None``.
        digits: Decimals to round to, or ``None`` to keep every digit.
    """
    if value is None:
        return None
    x = float(value)
    if not math.isfinite(x):
        return None
    return x if digits is None else round(x, digits)


def finite_list(values: Any, digits: int | None = None) -> list[float | None]:
    """:func:`finite_or_none` of every element of a 1-d array or sequence."""
    return [finite_or_none(v, digits) for v in np.asarray(values, dtype=np.float64).reshape(-1)]


def float_or_none(value: Any) -> float | None:
    """``float(value)``, passing ``None`` through (NaN stays NaN: a field value, not JSON)."""
    return None if value is None else float(value)


def float_or_nan(value: Any) -> float:
    """``float(value)``, reading ``None`` as NaN (the inverse of :func:`finite_or_none`).

    For a number read back from JSON, where NaN was written as ``null``.
    """
    return math.nan if value is None else float(value)
