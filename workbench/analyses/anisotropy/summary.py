"""The anisotropy study's ``results.json`` metrics and its claims.

:data:`METRIC_KEYS`, :data:`CLAIMS` and :func:`metrics`, a pure function of an
:class:`~workbench.analyses.anisotropy.results.AnisotropyResult` (its ``compute_metrics``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.analyses.anisotropy.config import LAYER_METRICS
from workbench.claims import Claim

if TYPE_CHECKING:
    from workbench.analyses.anisotropy.results import AnisotropyResult

METRIC_KEYS = (
    "per_layer",
    "per_checkpoint",
    "mean_cosine_peak_gain",
    "mean_cosine_peak_step",
    "freq_distance_corr",
    "freq_distance_by_layer",
    "embedding_freq_distance_corr",
    "tangent_energy_share",
    "tangent_random_share",
    "tangent_p_value",
    "n_tokens",
)
"""The keys of :func:`metrics` (the ``metrics`` block of ``results.json``)."""


CLAIMS = (
    Claim(
        "anisotropy rises early in training (last layer)",
        "mean_cosine_peak_gain",
        ">",
        0.0,
        paper="mean cosine rises sharply in the first steps",
    ),
    Claim(
        "frequent tokens sit nearer the centroid (last layer)",
        "freq_distance_corr",
        "<",
        0.0,
        paper="about -0.5 in decoders",
    ),
    Claim(
        "the early tangent subspace keeps excess gradient energy",
        "tangent_energy_share",
        ">",
        "tangent_random_share",
        paper="tangent-subspace test of early training",
    ),
)
"""The paper effects the default must show (see :mod:`workbench.claims`)."""


def metrics(result: AnisotropyResult) -> dict[str, Any]:
    """The ``results.json`` metrics block; its keys are :data:`METRIC_KEYS`.

    ``mean_cosine_peak_gain`` is how far the last layer's mean cosine peaks above its value at the
    first checkpoint (the initialization for ``tiny-lm``), over the later ones; positive when
    anisotropy rises in training. ``mean_cosine_peak_step`` is the step of that peak. Both are
    ``None`` for a single checkpoint.
    """
    final, tangent_result = result.final, result.tangent
    last = tangent_result.points[-1] if tangent_result is not None else None
    rise = peak_gain([c.layers[-1].mean_cosine for c in result.checkpoints])
    return {
        "per_layer": [
            {"layer": m.layer, **{k: getattr(m, k) for k in LAYER_METRICS}} for m in final.layers
        ],
        "per_checkpoint": result.rows(),
        "mean_cosine_peak_gain": rise[0] if rise else None,
        "mean_cosine_peak_step": result.checkpoints[rise[1]].step if rise else None,
        "freq_distance_corr": final.freq_distance_corr,
        "freq_distance_by_layer": list(final.freq_distance_by_layer),
        "embedding_freq_distance_corr": final.embedding_freq_corr,
        "tangent_energy_share": last.share if last else None,
        "tangent_random_share": last.null_mean if last else None,
        "tangent_p_value": last.p_value if last else None,
        "n_tokens": final.n_tokens,
    }


def peak_gain(values: Sequence[float]) -> tuple[float, int] | None:
    """How far a curve over training peaks above its first value, and where.

    Args:
        values: A metric at each checkpoint, in training order (the first is the initialization).

    Returns:
        ``(max(values[1:]) - values[0], index of that maximum)``, or ``None`` for fewer than two
        values (a single checkpoint has no training curve).
    """
    if len(values) < 2:
        return None
    later = np.asarray(values[1:], dtype=np.float64)
    peak = int(np.argmax(later))
    return float(later[peak] - values[0]), peak + 1
