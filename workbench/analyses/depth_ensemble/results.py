"""The depth-ensemble study's results: frozen, typed, JSON round-trippable, each with its figures.

``to_dict()`` gives plain JSON data (non-finite numbers as ``null``) and ``from_dict()`` rebuilds
the object; that pair is also the per-unit cache format (:class:`workbench.cache.UnitCache`).
:class:`DepthEnsembleResult` draws every figure through ``figure(kind=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from workbench.analyses.base import StudyResult
from workbench.analyses.depth_ensemble import summary
from workbench.analyses.depth_ensemble.layers import LayerGeometry, _check
from workbench.arrays import frozen
from workbench.claims import Claim
from workbench.codec import Record
from workbench.errors import InputError

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from workbench.analyses.depth_ensemble.scaling import ScalingFit
    from workbench.analyses.depth_ensemble.toy_results import ToyResult

FIGURES = ("angles_norms", "lens_loss", "layer_skip", "toy_depth", "toy_geometry", "scaling_fit")
"""Every figure kind of :meth:`DepthEnsembleResult.figure`, in notebook order."""


@dataclass(frozen=True)
class LensLoss(Record):
    """Per-layer next-token loss through the lenses, and early exits.

    Attributes:
        logit: Mean loss of the logit lens at each layer's output, ``(L,)``.
        tuned: The same through the tuned lens (``None`` when it was not trained).
        final_loss: The model's own loss on the same tokens.
        exit_counts: Tokens whose logit-lens top-1 settles on the final top-1 from layer
            ``0..L-1``, and ``L`` for never, ``(L + 1,)``.
        early_exit_fraction: Share of tokens settled before the middle layer (logit lens).
        early_exit_fraction_tuned: The same through the tuned lens (``None`` without it).
    """

    logit: np.ndarray
    tuned: np.ndarray | None
    final_loss: float
    exit_counts: np.ndarray
    early_exit_fraction: float
    early_exit_fraction_tuned: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "logit", frozen(self.logit))
        object.__setattr__(self, "exit_counts", frozen(self.exit_counts, np.int64))
        n = len(self.logit)
        if self.tuned is not None:
            object.__setattr__(self, "tuned", frozen(self.tuned))
            _check("LensLoss", "tuned", self.tuned, (n,))
        _check("LensLoss", "exit_counts", self.exit_counts, (n + 1,))


@dataclass(frozen=True)
class LayerSkip(Record):
    """Loss changes when layers are removed or reordered (``skip()``, ``reorder_layers``).

    Attributes:
        baseline: The intact model's mean next-token loss.
        single: Loss change with each layer removed, ``(L,)``.
        block_sizes: Size of each removed contiguous block, ``(B,)``.
        block_starts: Its first layer, ``(B,)``.
        block_deltas: The loss change, ``(B,)``.
        middle: ``(first, last)`` middle layers reordered (all but the first and the last).
        reverse: Loss change with the middle layers reversed (``NaN`` with fewer than 2).
        shuffle_orders: The random orders tried, ``(S, n_middle)`` (layer ids, in run order).
        shuffle_deltas: Their loss changes, ``(S,)``.
    """

    baseline: float
    single: np.ndarray
    block_sizes: np.ndarray
    block_starts: np.ndarray
    block_deltas: np.ndarray
    middle: tuple[int, int]
    reverse: float
    shuffle_orders: np.ndarray
    shuffle_deltas: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "single", frozen(self.single))
        object.__setattr__(self, "block_deltas", frozen(self.block_deltas))
        object.__setattr__(self, "shuffle_deltas", frozen(self.shuffle_deltas))
        for name in ("block_sizes", "block_starts"):
            object.__setattr__(self, name, frozen(getattr(self, name), np.int64))
        object.__setattr__(self, "middle", tuple(int(m) for m in self.middle))
        n_middle = max(self.middle[1] - self.middle[0] + 1, 0)
        orders = np.asarray(self.shuffle_orders, dtype=np.int64)
        orders = frozen(
            orders.reshape(-1, n_middle) if orders.size else np.zeros((0, n_middle)), np.int64
        )
        object.__setattr__(self, "shuffle_orders", orders)
        b = len(self.block_deltas)
        _check("LayerSkip", "block_sizes", self.block_sizes, (b,))
        _check("LayerSkip", "block_starts", self.block_starts, (b,))
        _check("LayerSkip", "shuffle_deltas", self.shuffle_deltas, (len(orders),))

    @property
    def n_layers(self) -> int:
        """Layers of the model."""
        return len(self.single)

    def shuffle_mean(self) -> float:
        """Mean loss change over the shuffles (``NaN`` without any)."""
        return float(self.shuffle_deltas.mean()) if len(self.shuffle_deltas) else float("nan")


@dataclass(frozen=True)
class ModelResult(Record):
    """What the study measured on the model.

    Attributes:
        model: The model's name.
        revision: Its revision (``None``: as loaded).
        geometry: The residual stream's layer geometry.
        lens: Lens losses and early exits (``None`` for a model without an LM head).
        skip: Layer removal and reordering (``None`` for a model without an LM head).
    """

    model: str
    revision: str | None
    geometry: LayerGeometry
    lens: LensLoss | None = None
    skip: LayerSkip | None = None

    def __post_init__(self) -> None:
        n = self.geometry.n_layers
        for part, size in (
            ("lens", self.lens and len(self.lens.logit)),
            ("skip", self.skip and self.skip.n_layers),
        ):
            if size is not None and size != n:
                raise InputError(f"ModelResult.{part} covers {size} layers, geometry {n}")


@dataclass(frozen=True, repr=False)
class DepthEnsembleResult(StudyResult):
    """The whole study: the model's layers, the toys and the scaling fit.

    Attributes:
        model: The model part (``None`` when ``model="none"``).
        toys: The teacher-student toys.
        scaling: The scaling-law fit (``None`` when ``scaling_csv`` is empty).
        notes: What was skipped and why, and how the settings differ from the paper's.
    """

    STUDY: ClassVar[str] = "depth_ensemble"
    CLAIMS: ClassVar[tuple[Claim, ...]] = summary.CLAIMS
    METRIC_KEYS: ClassVar[tuple[str, ...]] = summary.METRIC_KEYS
    FIGURES: ClassVar[tuple[str, ...]] = FIGURES
    MAIN_FIGURE: ClassVar[str] = "angles_norms"

    model: ModelResult | None
    toys: ToyResult
    scaling: ScalingFit | None = None
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "notes", tuple(self.notes))

    def figure_kinds(self) -> list[str]:
        """The figure kinds this result can draw."""
        kinds = []
        if self.model is not None:
            kinds.append("angles_norms")
            if self.model.lens is not None:
                kinds.append("lens_loss")
            if self.model.skip is not None:
                kinds.append("layer_skip")
        kinds += ["toy_depth", "toy_geometry"]
        if self.scaling is not None:
            kinds.append("scaling_fit")
        return kinds

    def compute_metrics(self) -> dict[str, Any]:
        """The ``results.json`` metrics (see :mod:`workbench.analyses.depth_ensemble.summary`)."""
        return summary.metrics(self)

    def figure_builders(self) -> dict[str, Callable[[Any], go.Figure]]:
        """Figure kind to builder (:mod:`workbench.analyses.depth_ensemble.figures`)."""
        from workbench.analyses.depth_ensemble import figures

        return figures.BUILDERS

    def provenance(self) -> dict[str, Any]:
        """The model the layer geometry was measured on (``none (toys only)`` without one)."""
        if self.model is None:
            return {"model": "none (toys only)", "revision": None}
        return {"model": self.model.model, "revision": self.model.revision}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "model": None if self.model is None else self.model.to_dict(),
            "toys": self.toys.to_dict(),
            "scaling": None if self.scaling is None else self.scaling.to_dict(),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DepthEnsembleResult:
        """Inverse of :meth:`to_dict`."""
        from workbench.analyses.depth_ensemble.scaling import ScalingFit
        from workbench.analyses.depth_ensemble.toy_results import ToyResult

        return cls(
            None if data["model"] is None else ModelResult.from_dict(data["model"]),
            ToyResult.from_dict(data["toys"]),
            None if data["scaling"] is None else ScalingFit.from_dict(data["scaling"]),
            tuple(data["notes"]),
        )
