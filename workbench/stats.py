"""The package's one bootstrap: resample rows (or groups of rows, or within strata), recompute.

Every interval a study reports over its evaluation items goes through :func:`bootstrap`: the
depth ensemble's power-law refits over resampled examples or runs, the concept-oscillation
balance point and oscillation ratio, the AcMAS detection scores over resampled tasks. The
statistic is a function of row indices, so it can refit a model, weight a regression or pool
groups as it needs; the resampling scheme is the only thing this module decides.

Example:
    >>> import numpy as np
    >>> x = np.arange(10.0)
    >>> boot = bootstrap(lambda idx: x[idx].mean(), len(x), n_samples=200, seed=0)
    >>> low, high = boot.interval()[:, 0]
    >>> bool(low < x.mean() < high)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.errors import InputError

FAILURES: tuple[type[BaseException], ...] = (
    InputError,
    ValueError,
    ZeroDivisionError,
    np.linalg.LinAlgError,
)
"""Exceptions that mark one resample's statistic as undefined (e.g. a refit that does not
converge, a score that needs both classes); anything else propagates."""


@dataclass(frozen=True)
class Bootstrap:
    """A statistic recomputed on resamples.

    Attributes:
        samples: ``(n_ok, P)`` the statistic on each resample where it was defined and finite.
        failed: Resamples where it raised one of :data:`FAILURES` or was not finite.
    """

    samples: np.ndarray
    failed: int

    def se(self) -> np.ndarray:
        """Standard deviation of each component over the resamples (``NaN`` with fewer than 2)."""
        if len(self.samples) < 2:
            return np.full(self.samples.shape[1], np.nan)
        return self.samples.std(axis=0, ddof=1)

    def interval(self, level: float = 0.95) -> np.ndarray:
        """Percentile interval of each component, ``(2, P)`` (``NaN`` without samples)."""
        if not 0 < level < 1:
            raise InputError(f"level must lie in (0, 1), got {level!r}")
        if not len(self.samples):
            return np.full((2, self.samples.shape[1]), np.nan)
        tail = 50 * (1 - level)
        return np.percentile(self.samples, [tail, 100 - tail], axis=0)


def resamples(
    n: int,
    n_samples: int,
    seed: int,
    *,
    groups: Any = None,
    strata: Any = None,
) -> Iterator[np.ndarray]:
    """Index arrays of ``n_samples`` bootstrap resamples of ``range(n)``, with replacement.

    Args:
        n: Rows.
        n_samples: Resamples.
        seed: Seed of the resampling (its own generator; global random state is untouched).
        groups: ``(n,)`` group label per row: whole groups are drawn (a cluster bootstrap, for
            rows that are not independent, such as the messages of one task).
        strata: ``(n,)`` stratum label per row: each stratum is resampled apart and keeps its
            size (two samples compared, e.g. ambiguous against clear cases).

    Yields:
        ``(m,)`` int64 row indices (``m == n`` except with groups of unequal size).
    """
    if n < 1 or n_samples < 0:
        raise InputError(f"need at least one row and no negative resamples, got {n}, {n_samples}")
    if groups is not None and strata is not None:
        raise InputError("resample by groups or within strata, not both")
    rng = np.random.default_rng(seed)
    if groups is not None:
        members = _partition(groups, n, "groups")
        for _ in range(n_samples):
            drawn = rng.integers(0, len(members), len(members))
            yield np.concatenate([members[g] for g in drawn])
    elif strata is not None:
        members = _partition(strata, n, "strata")
        for _ in range(n_samples):
            yield np.concatenate([rng.choice(rows, len(rows)) for rows in members])
    else:
        for _ in range(n_samples):
            yield rng.integers(0, n, n)


def _partition(labels: Any, n: int, name: str) -> list[np.ndarray]:
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise InputError(f"{name} must hold one label per row ({n}), got shape {labels.shape}")
    return [np.flatnonzero(labels == u) for u in np.unique(labels)]


def bootstrap(
    statistic: Callable[[np.ndarray], Any],
    n: int,
    *,
    n_samples: int = 1000,
    seed: int = 0,
    groups: Any = None,
    strata: Any = None,
    size: int | None = None,
) -> Bootstrap:
    """Calls ``statistic(indices)`` on each resample of :func:`resamples`.

    Args:
        statistic: Returns a scalar or a 1-D array computed on the rows ``indices``; it may raise
            one of :data:`FAILURES` where it is undefined on a resample.
        n: Rows to resample.
        n_samples: Resamples.
        seed: Seed of the resampling.
        groups: Draw whole groups (see :func:`resamples`).
        strata: Resample within each stratum (see :func:`resamples`).
        size: Components of the statistic, checked on every resample and giving ``samples`` its
            width when none is defined (default: taken from the first defined resample, else 1).

    Returns:
        The defined, finite samples and the count of the others.
    """
    kept: list[np.ndarray] = []
    failed = 0
    width = size
    for idx in resamples(n, n_samples, seed, groups=groups, strata=strata):
        try:
            value = np.atleast_1d(np.asarray(statistic(idx), dtype=np.float64))
        except FAILURES:
            failed += 1
            continue
        if value.ndim != 1 or (width is not None and len(value) != width):
            raise InputError(f"statistic must return a scalar or one 1-D shape, got {value.shape}")
        width = len(value)
        if np.all(np.isfinite(value)):
            kept.append(value)
        else:
            failed += 1
    samples = np.array(kept, dtype=np.float64).reshape(len(kept), 1 if width is None else width)
    return Bootstrap(samples, failed)
