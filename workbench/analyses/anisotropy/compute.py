"""Pure steps of the anisotropy study: arrays in, results out (no models, no disk, no plotly)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from workbench import geometry
from workbench.analyses.anisotropy.results import (
    CheckpointResult,
    LayerMetrics,
)
from workbench.analyses.anisotropy.tangent import TangentBasis, TangentPoint
from workbench.arrays import finite_or_none
from workbench.errors import InputError, WorkbenchError


def step_of(revision: str | None) -> int | None:
    """The training step a revision names (``step-200`` and ``step200`` give 200), else ``None``."""
    if revision is None or not revision.startswith("step"):
        return None
    digits = revision.removeprefix("step").lstrip("-")
    return int(digits) if digits.isdigit() else None


def layer_metrics(x: Any, layer: int, *, max_points: int = 5000, seed: int = 0) -> LayerMetrics:
    """The geometry of one layer's ``(n, d)`` token representations.

    TwoNN uses a random subsample of at most ``max_points`` rows (seeded); the other metrics use
    every row.
    """
    x = np.asarray(x, dtype=np.float64)
    sub = x
    if len(x) > max_points:
        sub = x[np.random.default_rng(seed).choice(len(x), max_points, replace=False)]
    return LayerMetrics(
        layer=int(layer),
        mean_cosine=float(geometry.mean_cosine(x)),
        mev=float(geometry.mev(x)),
        isoscore=float(geometry.isoscore(x)),
        effective_rank=float(geometry.effective_rank(x)),
        twonn=float(geometry.twonn(sub)),
    )


def measure_checkpoint(
    revision: str | None,
    states: Mapping[int, Any],
    token_ids: Any,
    counts: Any,
    embedding_table: Any,
    *,
    max_points: int = 5000,
    seed: int = 0,
) -> CheckpointResult:
    """Everything the study measures on one checkpoint.

    Args:
        revision: The checkpoint's revision (``None`` for the model as loaded).
        states: Layer to ``(n_tokens, d)`` representations at the studied site, in layer order.
        token_ids: Token id of each row, ``(n_tokens,)``.
        counts: Corpus count per token id (array indexed by id).
        embedding_table: The input embedding table, ``(vocab, d)``.
        max_points: Subsample size for TwoNN.
        seed: Subsampling seed.
    """
    token_ids = np.asarray(token_ids, dtype=np.int64)
    layers, by_layer, freq = [], [], None
    for layer, x in states.items():
        x = np.asarray(x, dtype=np.float64)
        layers.append(layer_metrics(x, layer, max_points=max_points, seed=seed))
        try:
            freq = geometry.frequency_distance_correlation(x, token_ids, counts)
        except WorkbenchError:  # too few repeated types: the correlation is undefined here
            freq = None
        by_layer.append(finite_or_none(freq.r) if freq is not None else None)
    try:
        embed = geometry.embedding_frequency_correlation(embedding_table, counts)
        embed_r = finite_or_none(embed.r)
    except WorkbenchError:
        embed_r = None
    return CheckpointResult(
        revision=revision,
        step=step_of(revision),
        layers=tuple(layers),
        freq_distance_by_layer=tuple(by_layer),
        embedding_freq_corr=embed_r,
        n_tokens=len(token_ids),
        frequency=freq,
    )


def tangent_basis(
    base: Any, moved: Sequence[Any], rank: int, *, layer: int, site: str, fit: Sequence[str]
) -> TangentBasis:
    """The early tangent subspace: top directions of the representations' displacement.

    Args:
        base: ``(n, d)`` representations at the first checkpoint.
        moved: The same rows at each fitting checkpoint.
        rank: Number of directions kept.
        layer: The layer (recorded).
        site: The site name (recorded).
        fit: The fitting checkpoints' revisions (recorded).

    Returns:
        The top ``rank`` right singular vectors of the stacked, centred displacements.
    """
    base = np.asarray(base, dtype=np.float64)
    rows = []
    for x in moved:
        x = np.asarray(x, dtype=np.float64)
        if x.shape != base.shape:
            raise InputError(f"displacement of shape {x.shape} against base {base.shape}")
        d = x - base
        rows.append(d - d.mean(0))
    if rank > base.shape[1]:
        raise InputError(f"tangent rank {rank} exceeds the width {base.shape[1]}")
    _, _, vt = np.linalg.svd(np.concatenate(rows), full_matrices=False)
    return TangentBasis(layer, site, tuple(fit), vt[:rank].T)


def tangent_point(
    basis: TangentBasis, grads: Any, revision: str, *, n_null: int = 20, seed: int = 0
) -> TangentPoint:
    """The tangent test at one checkpoint: gradient energy in the subspace vs random subspaces.

    Args:
        basis: The tangent subspace.
        grads: ``(d, n_tokens)`` loss gradients with respect to the same site's representations.
        revision: The checkpoint tested.
        n_null: Random subspaces in the null.
        seed: Seed of the random subspaces.
    """
    test = geometry.tangent_energy_test(basis.basis, grads, n_null=n_null, random_state=seed)
    return TangentPoint(
        revision=revision,
        step=step_of(revision),
        share=float(test.share),
        null_mean=float(np.mean(test.null_shares)),
        p_value=float(test.p_value),
    )
