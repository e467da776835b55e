"""The concept-oscillation study's results: frozen, typed, JSON round-trippable, with figures.

``to_dict()`` gives plain JSON data and ``from_dict()`` rebuilds the object; that pair is also the
per-unit cache format. :class:`ConceptOscillationResult` draws every figure through
``figure(kind=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from workbench.analyses.base import StudyResult
from workbench.analyses.concept_oscillation import summary
from workbench.analyses.concept_oscillation.readout import (
    CaseRun,
    ProbeCurve,
    Readout,
    check_shape,
)
from workbench.arrays import frozen
from workbench.claims import Claim
from workbench.codec import Record
from workbench.criteria import Shortfall
from workbench.errors import InputError

if TYPE_CHECKING:
    import plotly.graph_objects as go

FIGURES = ("follow_curve", "oscillations", "logit_diff_heatmap", "probe_accuracy")
"""Every figure kind of :meth:`ConceptOscillationResult.figure`, in notebook order."""

__all__ = [
    "FIGURES",
    "CaseRun",
    "ConceptOscillationResult",
    "FollowCurve",
    "LogitDiffMap",
    "OscillationSummary",
    "ProbeCurve",
    "Readout",
]


@dataclass(frozen=True)
class FollowCurve(Record):
    """``P(follow a | dH)`` over the conflict cases.

    Attributes:
        dh: ``(n,)`` relative uncertainty ``2 (H_a - H_b) / (H_a + H_b)`` of every conflict.
        follow_a: ``(n,)`` the answer with both sources is ``Y_a``.
        used: ``(n,)`` it is ``Y_a`` or ``Y_b`` (only these enter the fit).
        intercept: Logistic intercept (``None`` when the used cases hold one outcome only).
        slope: Logistic slope in ``dH`` (the paper: negative).
        balance_point: ``dH`` where the curve crosses 0.5.
        balance_ci: Percentile bootstrap 95% interval of the balance point.
        n_bootstrap: Bootstrap resamples.
        bin_centers: Mean ``dH`` of each quantile bin.
        bin_rates: Follow-A rate of each bin.
        bin_counts: Cases in each bin.
    """

    dh: np.ndarray = field(repr=False)
    follow_a: np.ndarray = field(repr=False)
    used: np.ndarray = field(repr=False)
    intercept: float | None
    slope: float | None
    balance_point: float | None
    balance_ci: tuple[float, float] | None
    n_bootstrap: int
    bin_centers: np.ndarray = field(repr=False)
    bin_rates: np.ndarray = field(repr=False)
    bin_counts: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        sets = object.__setattr__
        sets(self, "dh", frozen(self.dh))
        sets(self, "follow_a", frozen(self.follow_a, bool))
        sets(self, "used", frozen(self.used, bool))
        for name in ("bin_centers", "bin_rates"):
            sets(self, name, frozen(getattr(self, name)))
        sets(self, "bin_counts", frozen(self.bin_counts, np.int64))
        for name in ("follow_a", "used"):
            check_shape(name, getattr(self, name), self.dh.shape)
        for name in ("bin_rates", "bin_counts"):
            check_shape(name, getattr(self, name), self.bin_centers.shape)
        if self.balance_ci is not None:
            sets(self, "balance_ci", (float(self.balance_ci[0]), float(self.balance_ci[1])))

    @property
    def monotone(self) -> bool:
        """Whether the binned follow-A rate never rises with ``dH``."""
        return bool(len(self.bin_rates) >= 2 and np.all(np.diff(self.bin_rates) <= 0))

    def predict(self, dh: Any) -> np.ndarray:
        """The fitted ``P(follow a)`` at ``dh`` (NaN without a fit)."""
        x = np.asarray(dh, dtype=np.float64)
        if self.slope is None or self.intercept is None:
            return np.full(x.shape, np.nan)
        return 1.0 / (1.0 + np.exp(-(self.intercept + self.slope * x)))


def _mean(a: np.ndarray) -> float | None:
    return float(a.mean()) if len(a) else None


def _sem(a: np.ndarray) -> float | None:
    return float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else None


@dataclass(frozen=True)
class OscillationSummary(Record):
    """Oscillation counts per case of the ambiguous conflicts, the clear ones and the controls.

    Attributes:
        ambiguous: Counts of the conflicts within 0.5 of the balance point.
        clear: Counts of the other conflicts.
        control: Counts of the control cases (source A irrelevant).
    """

    ambiguous: np.ndarray
    clear: np.ndarray
    control: np.ndarray

    GROUPS = ("ambiguous", "clear", "control")

    def __post_init__(self) -> None:
        for name in self.GROUPS:
            a = frozen(getattr(self, name), np.int64)
            if a.ndim != 1 or (a < 0).any():
                raise InputError(f"{name} oscillation counts must be a 1-D array of counts >= 0")
            object.__setattr__(self, name, a)

    def mean(self, group: str) -> float | None:
        """Mean count of a group (``None`` when it is empty)."""
        return _mean(getattr(self, group))

    def sem(self, group: str) -> float | None:
        """Standard error of that mean (``None`` with fewer than two cases)."""
        return _sem(getattr(self, group))

    @property
    def ratio(self) -> float | None:
        """Ambiguous over clear mean (``None`` when undefined)."""
        a, c = self.mean("ambiguous"), self.mean("clear")
        return None if a is None or not c else a / c


@dataclass(frozen=True)
class LogitDiffMap(Record):
    """Mean lens ``logit(Y_a) - logit(Y_b)`` per layer and ``dH`` bin.

    Attributes:
        layers: ``(n_layers,)``.
        dh_centers: ``(n_bins,)`` mean ``dH`` of each equal-count bin.
        mean_diff: ``(n_layers, n_bins)``.
        counts: ``(n_bins,)`` cases per bin.
    """

    layers: np.ndarray
    dh_centers: np.ndarray
    mean_diff: np.ndarray
    counts: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", frozen(self.layers, np.int64))
        object.__setattr__(self, "dh_centers", frozen(self.dh_centers))
        object.__setattr__(self, "mean_diff", frozen(self.mean_diff))
        object.__setattr__(self, "counts", frozen(self.counts, np.int64))
        check_shape("mean_diff", self.mean_diff, (len(self.layers), len(self.dh_centers)))
        check_shape("counts", self.counts, self.dh_centers.shape)


@dataclass(frozen=True, repr=False)
class ConceptOscillationResult(Record, StudyResult):
    """The whole study on one model and case set.

    Attributes:
        run: The model's readouts and the probe (:class:`CaseRun`).
        follow: The follow curve over the conflicts.
        ambiguous: ``(n_conflicts,)`` whether each conflict is within 0.5 of the balance point.
        conflict_oscillations: ``(n_conflicts,)`` oscillation count of each conflict.
        oscillations: The group summary.
        heatmap: Lens logit difference by layer and ``dH``.
        ratio_ci: Bootstrap 95% interval of the ambiguous-to-clear oscillation ratio (``None``
            when a group is empty).
        cases: Where the cases came from.
        training: For the toy: the training summary (steps, losses, seconds); else ``None``.
        notes: What was skipped or could not be shown.
    """

    STUDY: ClassVar[str] = "concept_oscillation"
    CLAIMS: ClassVar[tuple[Claim, ...]] = summary.CLAIMS
    METRIC_KEYS: ClassVar[tuple[str, ...]] = summary.METRIC_KEYS
    FIGURES: ClassVar[tuple[str, ...]] = FIGURES
    MAIN_FIGURE: ClassVar[str] = "follow_curve"

    run: CaseRun
    follow: FollowCurve
    ambiguous: np.ndarray = field(repr=False)
    conflict_oscillations: np.ndarray = field(repr=False)
    oscillations: OscillationSummary = field(repr=False)
    heatmap: LogitDiffMap = field(repr=False)
    ratio_ci: tuple[float, float] | None = None
    cases: str = ""
    training: dict[str, Any] | None = field(default=None, repr=False)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "ambiguous", frozen(self.ambiguous, bool))
        object.__setattr__(
            self, "conflict_oscillations", frozen(self.conflict_oscillations, np.int64)
        )
        object.__setattr__(self, "notes", tuple(self.notes))
        if self.ratio_ci is not None:
            object.__setattr__(self, "ratio_ci", (float(self.ratio_ci[0]), float(self.ratio_ci[1])))
        n = self.run.conflicts.n
        check_shape("ambiguous", self.ambiguous, (n,))
        check_shape("conflict_oscillations", self.conflict_oscillations, (n,))
        check_shape("follow.dh", self.follow.dh, (n,))

    @property
    def model(self) -> str:
        """The model studied."""
        return self.run.model

    def shortfalls(self) -> tuple[Shortfall, ...]:
        """The toy decoder, when it reached ``toy_max_steps`` before its KL criterion.

        Every claim rests on the toy, so every claim depends on it.
        """
        t = self.training
        if not t or t.get("converged") is not False:
            return ()
        return (
            Shortfall(
                "toy decoder training",
                f"excess KL to the Bayes posterior <= {t['target_kl']} nats",
                f"excess KL {t['excess_kl']:.3f} nats",
                int(t["steps"]),
                "raise toy_max_steps or toy_steps",
            ),
        )

    @property
    def lens(self) -> str:
        """The lens the layers were read through."""
        return self.run.lens

    @property
    def probe(self) -> ProbeCurve | None:
        """The per-layer probe."""
        return self.run.probe

    def figure_kinds(self) -> list[str]:
        """The figures this result can draw."""
        return [k for k in FIGURES if k != "probe_accuracy" or self.probe is not None]

    def compute_metrics(self) -> dict[str, Any]:
        """The ``results.json`` metrics (see :mod:`.summary`)."""
        return summary.metrics(self)

    def figure_builders(self) -> dict[str, Callable[[Any], go.Figure]]:
        """Figure kind to builder (:mod:`workbench.analyses.concept_oscillation.figures`)."""
        from workbench.analyses.concept_oscillation import figures

        return figures.BUILDERS

    def provenance(self) -> dict[str, Any]:
        """The model (the toy, or the model the text cases ran on) and the lens read through."""
        return {"model": self.model, "revision": None, "lens": self.lens}
