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
