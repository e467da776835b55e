"""Tangent-subspace energy test: do gradients concentrate in a given subspace more than chance?

Given an r-dimensional subspace with orthonormal basis ``Q`` (d x r), e.g. the top principal
directions of a layer's activations or an estimate of the representation manifold's tangent space,
and gradients ``G`` (d x m), the share of gradient energy inside the subspace is

    s(Q) = ‖Qᵀ G‖²_F / ‖G‖²_F.

A random r-dimensional subspace captures ``r / d`` of the energy on average, so the share alone is
hard to read. We compare it with ``n_null`` random r-dimensional subspaces drawn uniformly in the
orthogonal complement of ``Q`` (Gaussian matrices projected off ``Q`` and orthonormalised), and
report the permutation-style p-value ``(1 + #{null share >= observed}) / (1 + n_null)`` (Phipson &
Smyth 2010, "Permutation p-values should never be zero"). This is the tangent-subspace test of the
anisotropy paper (arXiv 2604.08764) as we read it; the null construction is ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.arrays import frozen
from workbench.errors import InputError
from workbench.geometry._input import _to_numpy, as_matrix, check_positive_int

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["TangentEnergyTest", "tangent_energy_test"]


@dataclass(frozen=True, eq=False)
class TangentEnergyTest:
    """Observed energy share in the subspace, its null distribution and p-value.

    Attributes:
        share: ``‖Qᵀ G‖² / ‖G‖²`` for the given subspace, in [0, 1].
        null_shares: The same share for each random subspace in Q's complement, shape (n_null,).
        p_value: ``(1 + #{null >= share}) / (1 + n_null)``.
        rank: The subspace dimension ``r``.
        dim: The ambient dimension ``d``.
    """

    share: float
    null_shares: np.ndarray = field(repr=False)
    p_value: float
    rank: int
    dim: int

    def __post_init__(self) -> None:
        null = frozen(self.null_shares)
        if null.ndim != 1 or null.size == 0:
            raise InputError(f"null_shares has shape {null.shape}; a non-empty 1-D array is needed")
        object.__setattr__(self, "null_shares", null)

    @property
    def chance(self) -> float:
        """The expected share of a uniformly random r-dimensional subspace, ``r / d``."""
        return self.rank / self.dim

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary for ``results.json``."""
        return {
            "share": self.share,
            "p_value": self.p_value,
            "rank": self.rank,
            "dim": self.dim,
            "chance": self.chance,
            "null_mean": float(self.null_shares.mean()),
            "null_max": float(self.null_shares.max()),
            "n_null": int(self.null_shares.size),
        }

    def figure(self) -> go.Figure:
        """The null shares as a strip of points, with the observed share and chance marked."""
        import plotly.graph_objects as go

        from workbench.figures import style

        fig = go.Figure(
            go.Box(
                x=self.null_shares,
                name="null",
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                orientation="h",
            )
        )
        fig.add_vline(x=self.share, line_dash="solid", annotation_text=f"observed {self.share:.3f}")
        fig.add_vline(x=self.chance, line_dash="dot", annotation_text=f"r/d = {self.chance:.3f}")
        fig.update_layout(
            xaxis_title="share of gradient energy",
            showlegend=False,
        )
        return style(
            fig, title=f"Gradient energy in a rank-{self.rank} subspace (p = {self.p_value:.3g})"
        )


def _orthonormal(q: np.ndarray) -> np.ndarray:
    basis, upper = np.linalg.qr(q)
    diag = np.abs(np.diag(upper))
    if diag.min() <= max(q.shape) * np.finfo(np.float64).eps * diag.max():
        raise InputError(
            f"Q of shape {q.shape} has rank below {q.shape[1]}; independent columns are needed"
        )
    return basis


def tangent_energy_test(
    q: Any, g: Any, n_null: int = 20, random_state: int | None = 0
) -> TangentEnergyTest:
    """Share of gradient energy in span(Q), against random subspaces in Q's complement.

    Args:
        q: Subspace basis, shape (d, r) with 2r <= d; orthonormalised here (QR) if it is not.
        g: One gradient of shape (d,) or several as columns of shape (d, m).
        n_null: Number of random subspaces in the null distribution.
        random_state: Seed for the random subspaces.

    Returns:
        A :class:`TangentEnergyTest`.

    Raises:
        ConfigError: ``n_null`` not a positive integer.
        InputError: Bad shapes, rank-deficient Q, zero or non-finite gradients, or 2r > d.
    """
    n_null = check_positive_int(n_null, "n_null")
    qm = as_matrix(q, "Q", min_rows=2)
    d, r = qm.shape
    if 2 * r > d:
        raise InputError(f"Q has rank {r} in {d} dimensions; the null needs 2r <= d")
    g_arr = _to_numpy(g, "G")
    if g_arr.ndim == 1:
        g_arr = g_arr[:, None]
    gm = as_matrix(g_arr, "G", min_rows=1)
    if gm.shape[0] != d:
        raise InputError(f"G has {gm.shape[0]} rows; {d} (the rows of Q) are needed")
    total = float(np.sum(gm * gm))
    if not total > 0.0:
        raise InputError("G is all zeros; the energy share is undefined")
    basis = _orthonormal(qm)
    share = float(np.sum((basis.T @ gm) ** 2)) / total

    rng = np.random.default_rng(random_state)
    null = np.empty(n_null)
    for i in range(n_null):
        a = rng.standard_normal((d, r))
        for _ in range(2):  # project off Q twice: one pass leaves rounding-level components
            a -= basis @ (basis.T @ a)
        null_basis, _ = np.linalg.qr(a)
        null[i] = float(np.sum((null_basis.T @ gm) ** 2)) / total
    p_value = (1 + int(np.sum(null >= share))) / (1 + n_null)
    return TangentEnergyTest(
        share=min(share, 1.0), null_shares=null, p_value=p_value, rank=r, dim=d
    )
