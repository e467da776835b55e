"""Mean pairwise cosine similarity and the rogue dimensions that dominate it, exactly in O(n d).

**Mean cosine.** With unit vectors ``u_a = x_a / ‖x_a‖`` and their sum ``s = Σ_a u_a``,
``‖s‖² = Σ_a Σ_b u_a·u_b = n + Σ_{a≠b} cos(x_a, x_b)``, so the mean over the ``n (n - 1)`` ordered
pairs of distinct rows is ``(‖s‖² - n) / (n (n - 1))``: one pass over the data, no n x n matrix.
It is the usual anisotropy measure of contextual embeddings (Ethayarajh 2019): near 0 for isotropic
data, near 1 when all vectors point the same way.

**Rogue dimensions** (Timkey & van Schijndel 2021, "All bark and no bite: rogue dimensions in
transformer language models obscure representational quality"). Cosine similarity is a sum over
coordinates, ``cos(x_a, x_b) = Σ_i u_ai u_bi``, so the expected cosine splits into per-dimension
contributions ``CC_i = E_{a≠b}[u_ai u_bi]``. The same trick gives them exactly::

    CC_i = (s_i² - Σ_a u_ai²) / (n (n - 1)),     Σ_i CC_i = mean cosine

In many language models a handful of dimensions carry most of the mean cosine: those are the rogue
dimensions, and they make cosine similarity reflect a few outlier coordinates rather than the
representation as a whole.

Rows that are exactly zero have no direction: they are left out (``n`` counts the non-zero rows),
and the number left out is reported by the accumulator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workbench.arrays import frozen
from workbench.errors import InputError
from workbench.geometry._input import as_matrix, check_positive_int, fold_batches, matrix_chunks

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "RogueDimensions",
    "UnitSumAccumulator",
    "mean_cosine",
    "rogue_dimensions",
    "streaming_mean_cosine",
    "streaming_rogue_dimensions",
]


@dataclass(frozen=True, eq=False)
class UnitSumAccumulator:
    """Sums of unit-normalised rows, mergeable across batches (float64, immutable).

    Attributes:
        n: Non-zero rows seen.
        zero_rows: All-zero rows seen and left out.
        unit_sum: ``Σ_a u_a``, shape (d,).
        unit_sq_sum: ``Σ_a u_a²`` per coordinate, shape (d,).
    """

    n: int
    zero_rows: int
    unit_sum: np.ndarray = field(repr=False)
    unit_sq_sum: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        s, q = frozen(self.unit_sum), frozen(self.unit_sq_sum)
        if s.ndim != 1 or q.shape != s.shape:
            raise InputError(f"unit_sum {s.shape} and unit_sq_sum {q.shape} must both be (d,)")
        object.__setattr__(self, "unit_sum", s)
        object.__setattr__(self, "unit_sq_sum", q)

    @property
    def dim(self) -> int:
        """Number of columns ``d``."""
        return self.unit_sum.shape[0]

    @classmethod
    def empty(cls, dim: int) -> UnitSumAccumulator:
        """An accumulator for ``dim`` columns that has seen no rows."""
        return cls(n=0, zero_rows=0, unit_sum=np.zeros(dim), unit_sq_sum=np.zeros(dim))

    @classmethod
    def from_batch(cls, batch: Any) -> UnitSumAccumulator:
        """Sums over one (rows, d) array or tensor."""
        return _unit_sums(as_matrix(batch, "batch", min_rows=0))

    @classmethod
    def from_batches(cls, batches: Iterable[Any], *, progress: bool = False) -> UnitSumAccumulator:
        """Sums over an iterable of (rows, d) batches, e.g. ``store.iter_batches(site)``."""
        return fold_batches(cls.from_batch, batches, desc="unit sums", progress=progress)

    def update(self, batch: Any) -> UnitSumAccumulator:
        """This accumulator merged with the sums over ``batch``."""
        return self.merge(UnitSumAccumulator.from_batch(batch))

    def merge(self, other: UnitSumAccumulator) -> UnitSumAccumulator:
        """The sums over both accumulators' rows."""
        if other.dim != self.dim:
            raise InputError(f"cannot merge sums of {other.dim} columns into {self.dim} columns")
        return UnitSumAccumulator(
            n=self.n + other.n,
            zero_rows=self.zero_rows + other.zero_rows,
            unit_sum=self.unit_sum + other.unit_sum,
            unit_sq_sum=self.unit_sq_sum + other.unit_sq_sum,
        )

    def contributions(self) -> np.ndarray:
        """Per-dimension contributions ``CC_i`` to the mean pairwise cosine (they sum to it)."""
        if self.n < 2:
            raise InputError(
                f"mean cosine needs at least 2 non-zero rows; {self.n} were seen "
                f"({self.zero_rows} all-zero rows left out)"
            )
        return (self.unit_sum**2 - self.unit_sq_sum) / (self.n * (self.n - 1.0))

    def mean_cosine(self) -> float:
        """Mean cosine similarity over ordered pairs of distinct non-zero rows."""
        return float(self.contributions().sum())


def _unit_sums(x: np.ndarray) -> UnitSumAccumulator:
    norms = np.sqrt(np.einsum("nd,nd->n", x, x))
    nonzero = norms > 0
    u = x / norms[:, None] if nonzero.all() else x[nonzero] / norms[nonzero, None]
    return UnitSumAccumulator(
        n=int(nonzero.sum()),
        zero_rows=int((~nonzero).sum()),
        unit_sum=u.sum(axis=0),
        unit_sq_sum=np.einsum("nd,nd->d", u, u),
    )


def _unit_sums_of_matrix(x: Any) -> UnitSumAccumulator:
    acc: UnitSumAccumulator | None = None
    for chunk in matrix_chunks(x, min_rows=2):
        part = _unit_sums(chunk)
        acc = part if acc is None else acc.merge(part)
    assert acc is not None  # matrix_chunks checked that there are rows
    return acc


def _as_unit_sums(source: Any, progress: bool) -> UnitSumAccumulator:
    if isinstance(source, UnitSumAccumulator):
        return source
    if isinstance(source, np.ndarray | torch.Tensor) and source.ndim == 2:
        return UnitSumAccumulator.from_batch(source)
    if not isinstance(source, Iterable):
        raise InputError(
            f"batches is a {type(source).__name__}; an iterable of (rows, d) arrays is accepted"
        )
    return UnitSumAccumulator.from_batches(source, progress=progress)


@dataclass(frozen=True, eq=False)
class RogueDimensions:
    """Per-dimension contributions to the mean cosine, and the dimensions that dominate it.

    Attributes:
        contributions: ``CC_i`` for every dimension, shape (d,); they sum to ``mean_cosine``.
        mean_cosine: The mean pairwise cosine similarity.
        top: Indices of the ``k`` largest contributions, largest first.
        share: ``Σ CC_top / mean_cosine``: the fraction of the mean cosine the top dimensions
            account for (can exceed 1 when other dimensions contribute negatively; meaningless
            when the mean cosine is near 0).
    """

    contributions: np.ndarray = field(repr=False)
    mean_cosine: float
    top: np.ndarray
    share: float

    def __post_init__(self) -> None:
        c = frozen(self.contributions)
        top = frozen(self.top, np.int64)
        if c.ndim != 1 or top.ndim != 1 or (top.size and (top.min() < 0 or top.max() >= c.size)):
            raise InputError(f"top {top.shape} must index contributions {c.shape}")
        object.__setattr__(self, "contributions", c)
        object.__setattr__(self, "top", top)

    @property
    def top_contributions(self) -> np.ndarray:
        """``CC_i`` of the top dimensions, largest first."""
        return self.contributions[self.top]

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary for ``results.json``."""
        return {
            "mean_cosine": self.mean_cosine,
            "top": self.top.tolist(),
            "top_contributions": self.top_contributions.tolist(),
            "share": self.share,
            "dim": int(self.contributions.size),
        }

    def figure(self, n_bars: int = 20) -> go.Figure:
        """Bar chart of the ``n_bars`` largest per-dimension contributions."""
        import plotly.graph_objects as go

        from workbench.figures import style

        order = np.argsort(-self.contributions, kind="stable")[:n_bars]
        fig = go.Figure(
            go.Bar(x=[str(i) for i in order], y=self.contributions[order], name="contribution")
        )
        fig.update_layout(
            xaxis_title="dimension",
            yaxis_title="contribution to mean cosine",
            xaxis_type="category",
        )
        return style(
            fig,
            title=f"Rogue dimensions: top {self.top.size} carry {self.share:.0%} of mean cosine "
            f"{self.mean_cosine:.3f}",
        )


def _rogue(acc: UnitSumAccumulator, k: int) -> RogueDimensions:
    k = check_positive_int(k, "k")
    if k > acc.dim:
        raise InputError(f"k={k} exceeds the {acc.dim} dimensions of X")
    c = acc.contributions()
    total = float(c.sum())
    top = np.argsort(-c, kind="stable")[:k]
    share = float(c[top].sum() / total) if total != 0.0 else float("nan")
    return RogueDimensions(contributions=c, mean_cosine=total, top=top, share=share)


def mean_cosine(x: Any) -> float:
    """Mean cosine similarity over all ordered pairs of distinct rows, exactly, in O(n d).

    All-zero rows have no direction and are left out.

    Args:
        x: An (n, d) array or tensor with at least 2 non-zero rows.

    Raises:
        InputError: Bad shape, non-finite values, or fewer than 2 non-zero rows.
    """
    return _unit_sums_of_matrix(x).mean_cosine()


def rogue_dimensions(x: Any, k: int = 3) -> RogueDimensions:
    """The ``k`` coordinates contributing most to the mean cosine (Timkey & van Schijndel 2021).

    Args:
        x: An (n, d) array or tensor with at least 2 non-zero rows.
        k: How many top dimensions to report.

    Raises:
        ConfigError: ``k`` is not a positive integer.
        InputError: Bad shape, non-finite values, too few non-zero rows, or ``k > d``.
    """
    return _rogue(_unit_sums_of_matrix(x), k)


def streaming_mean_cosine(
    batches: Iterable[Any] | UnitSumAccumulator, *, progress: bool = False
) -> float:
    """:func:`mean_cosine` over an iterable of batches (or a :class:`UnitSumAccumulator`)."""
    return _as_unit_sums(batches, progress).mean_cosine()


def streaming_rogue_dimensions(
    batches: Iterable[Any] | UnitSumAccumulator, k: int = 3, *, progress: bool = False
) -> RogueDimensions:
    """:func:`rogue_dimensions` over an iterable of batches (or a :class:`UnitSumAccumulator`)."""
    return _rogue(_as_unit_sums(batches, progress), k)
