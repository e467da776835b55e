"""The anisotropy study's results: frozen, typed, JSON round-trippable, each with its figures.

``to_dict()`` gives plain JSON data and ``from_dict()`` rebuilds the object exactly; that pair is
also the per-unit cache format (:class:`workbench.cache.UnitCache`). The study's result,
:class:`AnisotropyResult`, draws every figure through one method, ``figure(kind=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.analyses.anisotropy import summary
from workbench.analyses.anisotropy.config import CHECKPOINT_METRICS
from workbench.analyses.anisotropy.tangent import TangentResult
from workbench.analyses.base import StudyResult
from workbench.claims import Claim
from workbench.codec import Record
from workbench.errors import InputError
from workbench.geometry import FrequencyDistance

if TYPE_CHECKING:
    import plotly.graph_objects as go

FIGURES = ("by_layer", "layer_step_heatmaps", "mean_cosine_over_training", "frequency_distance",
           "tangent_test")  # fmt: skip
"""Every figure kind of :meth:`AnisotropyResult.figure`, in notebook order."""


@dataclass(frozen=True)
class LayerMetrics(Record):
    """The geometry of one layer's token representations.

    Attributes:
        layer: Layer index.
        mean_cosine: Mean pairwise cosine similarity (anisotropy).
        mev: Share of variance on the top principal direction.
        isoscore: IsoScore (1 = isotropic).
        effective_rank: Entropy effective rank of the covariance spectrum.
        twonn: TwoNN intrinsic dimension (on a subsample).
    """

    layer: int
    mean_cosine: float
    mev: float
    isoscore: float
    effective_rank: float
    twonn: float


@dataclass(frozen=True)
class CheckpointResult(Record):
    """Everything measured on one checkpoint.

    Attributes:
        revision: The checkpoint (``None`` for the model as loaded).
        step: Its training step, when the revision names one.
        layers: One :class:`LayerMetrics` per measured layer, in layer order.
        freq_distance_by_layer: Per-occurrence frequency-distance correlation at each layer
            (``None`` where undefined).
        embedding_freq_corr: Frequency vs distance to centroid of the input embedding table.
        n_tokens: Rows measured.
        frequency: The last layer's per-type points behind the last correlation, for the scatter.
    """

    revision: str | None
    step: int | None
    layers: tuple[LayerMetrics, ...]
    freq_distance_by_layer: tuple[float | None, ...]
    embedding_freq_corr: float | None
    n_tokens: int
    frequency: FrequencyDistance | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "freq_distance_by_layer", tuple(self.freq_distance_by_layer))
        if not self.layers:
            raise InputError("a checkpoint result needs at least one layer")
        if len(self.freq_distance_by_layer) != len(self.layers):
            raise InputError(
                f"{len(self.freq_distance_by_layer)} frequency correlations for "
                f"{len(self.layers)} layers"
            )

    @property
    def freq_distance_corr(self) -> float | None:
        """The frequency-distance correlation at the last measured layer."""
        return self.freq_distance_by_layer[-1]

    @property
    def label(self) -> str:
        """The step when known, else the revision (``"as loaded"`` for ``None``)."""
        if self.step is not None:
            return str(self.step)
        return self.revision or "as loaded"


@dataclass(frozen=True, repr=False)
class AnisotropyResult(Record, StudyResult):
    """The whole study: every checkpoint's geometry and, where possible, the tangent test.

    Attributes:
        model: The model studied.
        site: The site kind measured.
        checkpoints: One :class:`CheckpointResult` per checkpoint, in training order.
        tangent: The tangent test, or ``None`` when it could not run (see ``notes``).
        notes: What was skipped and why, in plain words.
    """

    STUDY: ClassVar[str] = "anisotropy"
    CLAIMS: ClassVar[tuple[Claim, ...]] = summary.CLAIMS
    METRIC_KEYS: ClassVar[tuple[str, ...]] = summary.METRIC_KEYS
    FIGURES: ClassVar[tuple[str, ...]] = FIGURES
    MAIN_FIGURE: ClassVar[str] = "by_layer"

    model: str
    site: str
    checkpoints: tuple[CheckpointResult, ...]
    tangent: TangentResult | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoints", tuple(self.checkpoints))
        object.__setattr__(self, "notes", tuple(self.notes))
        if not self.checkpoints:
            raise InputError("the study measured no checkpoint")
        layers = {tuple(m.layer for m in c.layers) for c in self.checkpoints}
        if len(layers) != 1:
            raise InputError(f"checkpoints measured different layers: {sorted(layers)}")

    @property
    def final(self) -> CheckpointResult:
        """The last checkpoint's result."""
        return self.checkpoints[-1]

    @property
    def layers(self) -> list[int]:
        """The measured layers."""
        return [m.layer for m in self.final.layers]

    def rows(self) -> list[dict[str, Any]]:
        """Tidy rows ``{step, revision, layer, metric...}`` for every checkpoint and layer."""
        return [
            {
                "step": c.step,
                "revision": c.revision,
                "layer": m.layer,
                **{k: getattr(m, k) for k in CHECKPOINT_METRICS},
            }
            for c in self.checkpoints
            for m in c.layers
        ]

    def figure_kinds(self) -> list[str]:
        """The figure kinds this result can draw (training figures need several checkpoints)."""
        kinds = ["by_layer"]
        if len(self.checkpoints) > 1:
            kinds += ["layer_step_heatmaps", "mean_cosine_over_training"]
        if self.final.frequency is not None:
            kinds.append("frequency_distance")
        if self.tangent is not None:
            kinds.append("tangent_test")
        return kinds

    def compute_metrics(self) -> dict[str, Any]:
        """The ``results.json`` metrics (see :mod:`workbench.analyses.anisotropy.summary`)."""
        return summary.metrics(self)

    def figure_builders(self) -> dict[str, Callable[[Any], go.Figure]]:
        """Figure kind to builder (:mod:`workbench.analyses.anisotropy.figures`)."""
        from workbench.analyses.anisotropy import figures

        return figures.BUILDERS

    def provenance(self) -> dict[str, Any]:
        """The model, the last checkpoint's revision and the site measured at each layer."""
        return {
            "model": self.model,
            "revision": self.final.revision,
            "sites": [f"{self.site}.{layer}" for layer in self.layers],
        }
