"""The anisotropy study: representation geometry by layer and across training checkpoints.

Reproduces the measurements of *Revisiting Anisotropy in Language Transformers: The Geometry of
Learning Dynamics* (arXiv 2604.08764) on any model the workbench can load:

1. **Per layer**: mean pairwise cosine (anisotropy), top-eigenvalue share (MEV), IsoScore,
   effective rank and TwoNN intrinsic dimension of the token representations at one site.
2. **Across checkpoints**: the same for every checkpoint of a series (``tiny-lm``'s ``step-N``,
   Pythia's ``stepN`` revisions, ...). The paper's finding: anisotropy rises early in training.
3. **Frequency**: a token's corpus frequency against its occurrences' mean distance from the
   centroid; a trained decoder puts frequent tokens nearer the centroid (negative correlation).
4. **Tangent subspace**: the top directions along which early training moved a layer's
   representations span a low-rank subspace; later loss gradients with respect to the same
   representations hold more energy there than in random subspaces of equal rank.

Our operationalizations, where the paper's exact constructions are not public: the frequency
correlation averages each occurrence's distance per token type (the distance of a type's mean
shrinks by averaging alone); the tangent subspace is the top right singular vectors of the stacked
displacements from the first checkpoint; its null draws random subspaces in the complement.

Layout (every study has the same rooms):

* :mod:`.config`: :class:`AnisotropyConfig`, built from the notebook's parameters;
* :mod:`.compute`: pure steps, arrays in and results out;
* :mod:`.results`: frozen results with ``to_dict``/``from_dict`` and ``figure(kind=...)``;
* :mod:`.figures`: the plotly builders;
* :mod:`.collect`: the only place that loads models (capture and gradients through the hooks);
* :mod:`.study`: :func:`run` with a per-unit cache, :func:`metrics`, :func:`save`.

Example::

    from workbench.analyses import anisotropy
    config = anisotropy.AnisotropyConfig(model="tiny-lm", n_texts=100)
    result = anisotropy.run(config, cache_dir="runs/cache")
    result.figure("layer_step_heatmaps").show()
    result.metrics()["freq_distance_corr"]
"""

from workbench.analyses.anisotropy.collect import resolve_checkpoints
from workbench.analyses.anisotropy.compute import (
    layer_metrics,
    measure_checkpoint,
    step_of,
    tangent_basis,
    tangent_point,
)
from workbench.analyses.anisotropy.config import LAYER_METRICS, AnisotropyConfig
from workbench.analyses.anisotropy.results import (
    CHECKPOINT_METRICS,
    FIGURES,
    AnisotropyResult,
    CheckpointResult,
    LayerMetrics,
)
from workbench.analyses.anisotropy.study import ANALYSIS, STUDY, run
from workbench.analyses.anisotropy.summary import CLAIMS, METRIC_KEYS, peak_gain
from workbench.analyses.anisotropy.tangent import TangentBasis, TangentPoint, TangentResult

__all__ = [
    "ANALYSIS",
    "CHECKPOINT_METRICS",
    "CLAIMS",
    "FIGURES",
    "LAYER_METRICS",
    "METRIC_KEYS",
    "STUDY",
    "AnisotropyConfig",
    "AnisotropyResult",
    "CheckpointResult",
    "LayerMetrics",
    "TangentBasis",
    "TangentPoint",
    "TangentResult",
    "layer_metrics",
    "measure_checkpoint",
    "peak_gain",
    "resolve_checkpoints",
    "run",
    "step_of",
    "tangent_basis",
    "tangent_point",
]
