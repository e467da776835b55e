"""The anisotropy study end to end: ``run(config, cache_dir)`` and its :data:`STUDY` record.

Units are cached with :class:`workbench.cache.UnitCache`: one record per checkpoint, the tangent
basis, and one record per checkpoint the tangent test visits. A rerun with the same config loads no
model; a rerun after an interruption redoes only the missing units.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
from tqdm.auto import tqdm

from workbench.analyses.anisotropy import collect, compute
from workbench.analyses.anisotropy.config import AnisotropyConfig
from workbench.analyses.anisotropy.results import (
    AnisotropyResult,
    CheckpointResult,
)
from workbench.analyses.anisotropy.tangent import TangentBasis, TangentPoint, TangentResult
from workbench.analyses.base import Study
from workbench.cache import UnitCache

log = logging.getLogger(__name__)

ANALYSIS = "anisotropy"


def sweep(
    config: AnisotropyConfig,
    revisions: Sequence[str | None],
    cache: UnitCache,
    *,
    progress: bool = True,
) -> list[CheckpointResult]:
    """Measures every checkpoint (cached per checkpoint), one model in memory at a time."""
    inputs = collect.texts(config)
    counts: np.ndarray | None = None
    results = []
    for revision in tqdm(revisions, desc="checkpoints", disable=not progress):

        def measure(revision: str | None = revision) -> CheckpointResult:
            nonlocal counts
            with collect.loaded(config, revision) as subject:
                if counts is None:  # a series shares its tokenizer: count once
                    counts = collect.token_counts(subject, config)
                states, token_ids = collect.layer_states(subject, inputs, config)
                table = collect.embedding_table(subject)
            return compute.measure_checkpoint(
                revision,
                states,
                token_ids,
                counts,
                table,
                max_points=config.max_points,
                seed=config.seed,
            )

        results.append(cache.get(revision or "as-loaded", measure, CheckpointResult.from_dict))
    return results


def tangent(
    config: AnisotropyConfig,
    revisions: Sequence[str | None],
    layer: int,
    cache: UnitCache,
    *,
    progress: bool = True,
) -> tuple[TangentResult | None, str | None]:
    """The tangent-subspace test at ``layer`` over a checkpoint series.

    The subspace is spanned by the top ``tangent_rank`` directions of the displacement of the
    layer's representations from the first checkpoint to each of the next ``tangent_fit`` ones;
    each later checkpoint's loss gradient with respect to the same representations is tested
    against it (:func:`workbench.geometry.tangent_energy_test`).

    Returns:
        ``(result, None)``, or ``(None, why)`` when the series or the model does not allow it.
    """
    steps = [r for r in revisions if r is not None]
    if len(steps) < config.tangent_fit + 2:
        return None, (
            f"tangent test skipped: it needs at least {config.tangent_fit + 2} checkpoints "
            f"(tangent_fit + 2), got {len(steps)}"
        )
    site = f"{config.site}.{layer}"
    fit, tested = steps[1 : 1 + config.tangent_fit], steps[1 + config.tangent_fit :]
    inputs = collect.texts(config)
    unit = f"tangent-basis-{site}-{'-'.join([steps[0], *fit])}-r{config.tangent_rank}"

    def states(revision: str) -> dict[int, np.ndarray]:
        # one checkpoint in memory at a time: the model is freed when this returns, before the
        # next one loads (a `with ... as subject` in a loop would keep it bound while loading)
        with collect.loaded(config, revision) as subject:
            if not collect.has_lm_head(subject):
                raise _NoLMHead
            return collect.layer_states(subject, inputs, config, layers=str(layer))[0]

    def fit_basis() -> TangentBasis:
        base = states(steps[0])
        moved = [states(revision) for revision in fit]
        return compute.tangent_basis(
            base[layer],
            [m[layer] for m in moved],
            config.tangent_rank,
            layer=layer,
            site=site,
            fit=fit,
        )

    try:
        basis = cache.get(unit, fit_basis, TangentBasis.from_dict)
    except _NoLMHead:
        return None, f"tangent test skipped: {config.model} has no language-model head"
    points = []
    for revision in tqdm(tested, desc="tangent test", disable=not progress):

        def test(revision: str = revision) -> TangentPoint:
            with collect.loaded(config, revision) as subject:
                grads = collect.representation_gradients(subject, inputs, site, config)
            return compute.tangent_point(
                basis, grads, revision, n_null=config.tangent_null, seed=config.seed
            )

        points.append(cache.get(f"tangent-{site}-{revision}-{unit}", test, TangentPoint.from_dict))
    d_model = basis.basis.shape[0]
    return TangentResult(layer, site, config.tangent_rank, d_model, tuple(fit), tuple(points)), None


class _NoLMHead(Exception):
    """Internal: the model has no language-model head (the tangent test is skipped)."""


def run(
    config: AnisotropyConfig,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> AnisotropyResult:
    """The whole study: the checkpoint sweep and, where the series allows it, the tangent test.

    Args:
        config: The study's parameters.
        cache_dir: Folder of the per-unit cache (``None``: compute everything, store nothing).
        progress: Show progress bars.
    """
    cache = UnitCache(cache_dir, config.key("checkpoints"))
    revisions = collect.resolve_checkpoints(config.model, config.checkpoints)
    checkpoints = sweep(config, revisions, cache, progress=progress)
    notes = []
    result_tangent = None
    if len(revisions) > 1:
        layer = checkpoints[-1].layers[-1].layer
        result_tangent, why = tangent(config, revisions, layer, cache, progress=progress)
        if why:
            notes.append(why)
    else:
        notes.append("a single checkpoint: no training curves and no tangent test")
    if checkpoints[-1].frequency is None:
        notes.append("frequency correlation undefined at the last layer: too few repeated tokens")
    log.info("cache: %d hit(s), %d computed", len(cache.hits), len(cache.misses))
    return AnisotropyResult(config.model, config.site, tuple(checkpoints), result_tangent, notes)


STUDY = Study(
    name=ANALYSIS,
    config=AnisotropyConfig,
    result=AnisotropyResult,
    run=run,
    paper="Revisiting anisotropy in language transformers (arXiv 2604.08764)",
)
"""The anisotropy study's record in :mod:`workbench.analyses.registry`."""
