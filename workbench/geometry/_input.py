"""Input checks shared by the geometry metrics: the one place arrays become float64 matrices."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from workbench.errors import ConfigError, InputError

__all__ = ["as_matrix", "as_vector", "check_fraction", "check_positive_int", "matrix_chunks"]


def _to_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.is_complex():
            raise InputError(f"{name} is a complex tensor; a real-valued array is accepted")
        x = x.cpu()
        if x.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            x = x.to(torch.float32)  # exact; numpy has no such dtypes
        # a zero-copy view: numpy's float64 cast (in as_matrix) is about 1.5x faster than torch's
        return x.numpy()
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise InputError(
            f"{name} cannot be read as an array ({exc}); a 2-D array is accepted"
        ) from exc
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating)
        or np.issubdtype(arr.dtype, np.integer)
        or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise InputError(f"{name} has dtype {arr.dtype}; a real-valued numeric array is accepted")
    return arr


def as_matrix(x: Any, name: str = "X", *, min_rows: int = 3, min_cols: int = 1) -> np.ndarray:
    """Returns ``x`` as a C-contiguous float64 numpy matrix after checking shape and values.

    Args:
        x: A 2-D numpy array, torch tensor (any device, any real dtype) or nested sequence.
        name: The argument's name, used in error messages.
        min_rows: Fewest rows accepted.
        min_cols: Fewest columns accepted.

    Raises:
        InputError: ``x`` is not 2-D, has too few rows or columns, or holds NaN or infinity.
    """
    arr = _to_numpy(x, name)
    if arr.ndim != 2:
        raise InputError(f"{name} has shape {tuple(arr.shape)}; a 2-D (n, d) array is accepted")
    n, d = arr.shape
    if n < min_rows:
        raise InputError(f"{name} has {n} rows; at least {min_rows} rows are needed")
    if d < min_cols:
        raise InputError(f"{name} has {d} columns; at least {min_cols} columns are needed")
    out = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.isfinite(out).all():
        raise InputError(f"{name} contains NaN or infinite values; finite values are accepted")
    return out


def matrix_chunks(
    x: Any, name: str = "X", *, min_rows: int = 3, min_cols: int = 1, chunk_bytes: int = 32 << 20
) -> Iterator[np.ndarray]:
    """Checks the shape of ``x`` now, then yields it as checked float64 row chunks.

    Used by the metrics that only need running sums, so that a large float32 array is never
    copied whole to float64. Each chunk holds about ``chunk_bytes`` of float64.

    Raises:
        InputError: As :func:`as_matrix` (non-finite values are found when their chunk is read).
    """
    arr = x if isinstance(x, torch.Tensor) else _to_numpy(x, name)
    if isinstance(arr, torch.Tensor) and arr.is_complex():
        raise InputError(f"{name} is a complex tensor; a real-valued array is accepted")
    shape = tuple(arr.shape)
    if len(shape) != 2:
        raise InputError(f"{name} has shape {shape}; a 2-D (n, d) array is accepted")
    n, d = shape
    if n < min_rows:
        raise InputError(f"{name} has {n} rows; at least {min_rows} rows are needed")
    if d < min_cols:
        raise InputError(f"{name} has {d} columns; at least {min_cols} columns are needed")
    rows = max(1, chunk_bytes // (8 * max(d, 1)))
    return (as_matrix(arr[i : i + rows], name, min_rows=0) for i in range(0, n, rows))


def as_vector(x: Any, name: str, *, length: int | None = None) -> np.ndarray:
    """Returns ``x`` as a 1-D numpy array (dtype kept), checking its length when given."""
    arr = _to_numpy(x, name)
    if arr.ndim != 1:
        raise InputError(f"{name} has shape {tuple(arr.shape)}; a 1-D array is accepted")
    if length is not None and arr.shape[0] != length:
        raise InputError(
            f"{name} has {arr.shape[0]} entries; {length} (one per row of X) are needed"
        )
    return arr


def check_fraction(
    value: float, name: str, *, low_open: bool = True, high_open: bool = True
) -> float:
    """Returns ``value`` as a float after checking it lies in (0, 1) (ends open or closed)."""
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"{name}={value!r} is not a number; a value in (0, 1) is accepted"
        ) from exc
    lo_ok = v > 0 if low_open else v >= 0
    hi_ok = v < 1 if high_open else v <= 1
    if not (lo_ok and hi_ok):
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ConfigError(
            f"{name}={value!r} is outside {interval}; a value in {interval} is accepted"
        )
    return v


def check_positive_int(value: int, name: str, *, minimum: int = 1) -> int:
    """Returns ``value`` after checking it is an integer of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(f"{name}={value!r} is not an integer >= {minimum}")
    return int(value)


def fold_batches(
    from_batch: Callable[[Any], Any], batches: Iterable[Any], *, desc: str, progress: bool
) -> Any:
    """Merges ``from_batch(b)`` over every batch (an accumulator's ``from_batches``).

    Raises:
        InputError: No batch was given.
    """
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc=desc, unit="batch")
    acc = None
    for batch in batches:
        part = from_batch(batch)
        acc = part if acc is None else acc.merge(part)
    if acc is None:
        raise InputError("batches is empty; at least one (rows, d) batch is needed")
    return acc
