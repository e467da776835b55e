"""Geometry metrics for representations: pure functions on an (n, d) array.

Every function takes a numpy array or torch tensor (any real dtype, any device), computes in
float64, and returns a float or a small frozen result dataclass. Bad input raises a
:class:`~workbench.errors.WorkbenchError` subclass with a one-line message.

==========================================  ================================================
Anisotropy and isotropy                     :func:`mean_cosine`, :func:`rogue_dimensions`,
                                            :func:`mev`, :func:`isoscore`,
                                            :func:`isoscore_star`, :func:`partition_isotropy`
Dimensionality                              :func:`effective_rank`, :func:`twonn`,
                                            :func:`knn_entropy`
Frequency                                   :func:`frequency_distance_correlation`,
                                            :func:`embedding_frequency_correlation`
Gradients                                   :func:`tangent_energy_test`
Data larger than memory                     :class:`MomentAccumulator`,
                                            :class:`UnitSumAccumulator`, ``streaming_*``
==========================================  ================================================

The streaming functions take an iterable of (rows, d) batches, such as
``store.iter_batches(site)``, and return the same numbers as their in-memory twins (they share the
code: the in-memory functions summarise their input as a single batch).
"""

from workbench.geometry.cosine import (
    RogueDimensions,
    UnitSumAccumulator,
    mean_cosine,
    rogue_dimensions,
    streaming_mean_cosine,
    streaming_rogue_dimensions,
)
from workbench.geometry.entropy import knn_entropy
from workbench.geometry.frequency import (
    FrequencyDistance,
    embedding_frequency_correlation,
    frequency_distance_correlation,
)
from workbench.geometry.intrinsic_dim import twonn
from workbench.geometry.isoscore import (
    isoscore,
    isoscore_star,
    streaming_isoscore,
    streaming_isoscore_star,
)
from workbench.geometry.moments import MomentAccumulator, covariance_eigenvalues
from workbench.geometry.partition import partition_isotropy
from workbench.geometry.spectrum import (
    effective_rank,
    mev,
    streaming_effective_rank,
    streaming_mev,
)
from workbench.geometry.tangent import TangentEnergyTest, tangent_energy_test

__all__ = [
    "FrequencyDistance",
    "MomentAccumulator",
    "RogueDimensions",
    "TangentEnergyTest",
    "UnitSumAccumulator",
    "covariance_eigenvalues",
    "effective_rank",
    "embedding_frequency_correlation",
    "frequency_distance_correlation",
    "isoscore",
    "isoscore_star",
    "knn_entropy",
    "mean_cosine",
    "mev",
    "partition_isotropy",
    "rogue_dimensions",
    "streaming_effective_rank",
    "streaming_isoscore",
    "streaming_isoscore_star",
    "streaming_mean_cosine",
    "streaming_mev",
    "streaming_rogue_dimensions",
    "tangent_energy_test",
    "twonn",
]
