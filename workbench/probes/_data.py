"""Inputs shared by the probes and the sweep: devices, float32 tensors, labels, store batches."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from workbench import devices
from workbench.errors import ConfigError, ProbeError, SiteError
from workbench.store import ActivationStore


def resolve_device(device: str | torch.device | None) -> torch.device:
    """:func:`workbench.devices.resolve_device`, raising a ``ProbeError`` on a bad name.

    ``None`` is the best device here; the error is a ``ValueError``, as scikit-learn expects.
    """
    try:
        return devices.resolve_device(device)
    except ConfigError as exc:
        raise ProbeError(str(exc)) from exc


def as_float32(x: Any) -> Tensor:
    """A CPU float32 tensor of ``x`` (numpy or torch), copying only when needed."""
    if isinstance(x, Tensor):
        return x.detach().to(device="cpu", dtype=torch.float32)
    arr = np.asarray(x)
    if arr.dtype != np.float32 or not arr.flags.writeable or not arr.flags.c_contiguous:
        arr = np.array(arr, dtype=np.float32, order="C")
    return torch.from_numpy(arr)


def to_numpy(x: Any) -> Any:
    """A CPU numpy view of a tensor (float16/bfloat16 widened to float32); other input as is."""
    if not isinstance(x, Tensor):
        return x
    x = x.detach().cpu()
    if x.dtype not in (torch.float32, torch.float64):
        x = x.to(torch.float32)
    return x.numpy()


def check_discrete(y: np.ndarray) -> None:
    """Raises :class:`ProbeError` for continuous (regression-like) labels."""
    from sklearn.utils.multiclass import type_of_target

    try:
        kind = type_of_target(y)
    except ValueError as exc:
        raise ProbeError(f"labels cannot be read as classes ({exc})") from exc
    if kind not in ("binary", "multiclass"):
        raise ProbeError(f"labels look {kind}; class labels (ints, strings, bools) are accepted")


def check_classes(classes: np.ndarray) -> None:
    """Raises :class:`ProbeError` unless there are at least two classes."""
    if len(classes) < 2:
        only = classes[0] if len(classes) else "none"
        raise ProbeError(f"the labels hold one class ({only!r}); a probe needs at least 2 classes")


def align_labels(labels: Any, n_rows: int, offsets: np.ndarray) -> tuple[np.ndarray, str]:
    """Returns per-row labels and ``"row"`` or ``"text"`` (how they were given).

    Labels of length ``n_rows`` are per row (token); labels of length ``n_texts`` are per text and
    are repeated over each text's rows.

    Raises:
        ProbeError: The length matches neither.
    """
    y = labels.cpu().numpy() if isinstance(labels, Tensor) else np.asarray(labels)
    if y.ndim != 1:
        raise ProbeError(f"labels have shape {y.shape}; a 1-D sequence of labels is accepted")
    n_texts = len(offsets) - 1
    if len(y) == n_rows:
        return y, "row"
    if len(y) == n_texts:
        return np.repeat(y, np.diff(offsets)), "text"
    raise ProbeError(
        f"{len(y)} labels for {n_rows} rows in {n_texts} texts; give one label per row "
        f"({n_rows}) or per text ({n_texts})"
    )


def check_site(store: ActivationStore, site: str) -> None:
    """Raises :class:`SiteError` for a site the store does not hold."""
    if site not in store.sites:
        raise SiteError(f"unknown site {site!r}; the store holds: {', '.join(store.sites)}")


def site_width(store: ActivationStore, site: str) -> int:
    """The number of columns of ``site`` (read from the first shard's header)."""
    return int(next(store.iter_batches(site, 1)).shape[1])


def fits_in_memory(n_rows: int, width: int) -> bool:
    """Whether two float32 copies of an ``(n_rows, width)`` site take under half the free RAM."""
    try:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return True
    return 2 * n_rows * width * 4 < free // 2


def store_batches(
    store: ActivationStore, site: str, codes: Tensor, batch_size: int | None
) -> Iterator[tuple[Tensor, Tensor]]:
    """Yields ``(rows, labels)`` for one site, streaming the store from disk."""
    start = 0
    for x in store.iter_batches(site, batch_size):
        yield x, codes[start : start + len(x)]
        start += len(x)


def gather_rows(store: ActivationStore, site: str, index: Tensor, batch_size: int | None) -> Tensor:
    """Rows ``index`` (sorted) of one site, in one streaming pass."""
    parts, start = [], 0
    for x in store.iter_batches(site, batch_size):
        lo, hi = np.searchsorted(index.numpy(), [start, start + len(x)])
        if hi > lo:
            parts.append(as_float32(x[index[lo:hi] - start]))
        start += len(x)
    return torch.cat(parts)
