"""Frozen results of the AcMAS study: per-schedule detection, restoration, the whole study.

``to_dict()``/``from_dict()`` is also the cache format; ``figure(kind=...)`` draws with
:mod:`.figures`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from workbench.analyses.acmas import summary
from workbench.analyses.base import StudyResult
from workbench.claims import Claim
from workbench.codec import Record
from workbench.criteria import Shortfall

if TYPE_CHECKING:
    import plotly.graph_objects as go

FIGURES = ("score_distributions", "f1_by_layer", "roc", "restoration")
"""The figure kinds of :class:`AcmasResult`."""


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class ScheduleResult(Record):
    """Detection on the test half of one schedule's attacked run.

    Attributes:
        schedule: ``sync`` or ``async``.
        layers: Layer names (``early``, ``middle``, ``final``).
        detectors: Activation detector names.
        f1, auroc, fpr: ``(n_detectors, n_layers)``.
        scores: ``(n_detectors, n_layers, n_test)`` anomaly scores.
        preds: ``(n_detectors, n_layers, n_test)`` 0/1 decisions.
        labels: ``(n_test,)`` 1 for a compromised agent's message.
        text_scores: ``(n_test,)`` the text baseline's disagreement flags.
        text_metrics: The text baseline's ``(F1, AUROC, FPR)``.
        tasks: ``(n_test,)`` the task of each scored message (intervals resample tasks).
    """

    schedule: str
    layers: tuple[str, ...]
    detectors: tuple[str, ...]
    f1: np.ndarray
    auroc: np.ndarray
    fpr: np.ndarray
    scores: np.ndarray
    preds: np.ndarray
    labels: np.ndarray
    text_scores: np.ndarray
    text_metrics: tuple[float, float, float]
    tasks: np.ndarray | None = None

    def __post_init__(self) -> None:
        shape = (len(self.detectors), len(self.layers))
        for name in ("f1", "auroc", "fpr"):
            object.__setattr__(self, name, _arr(getattr(self, name)))
            if getattr(self, name).shape != shape:
                raise ValueError(f"{name} has shape {getattr(self, name).shape}, expected {shape}")
        object.__setattr__(self, "scores", _arr(self.scores))
        object.__setattr__(self, "preds", np.asarray(self.preds, dtype=int))
        object.__setattr__(self, "labels", np.asarray(self.labels, dtype=int))
        object.__setattr__(self, "text_scores", _arr(self.text_scores))
        n = len(self.labels)
        if (
            self.scores.shape != (*shape, n)
            or self.preds.shape != self.scores.shape
            or self.text_scores.shape != (n,)
        ):
            raise ValueError(
                f"scores {self.scores.shape} / text {self.text_scores.shape} vs {n} labels"
            )
        object.__setattr__(self, "text_metrics", tuple(float(v) for v in self.text_metrics))
        if self.tasks is not None:
            object.__setattr__(self, "tasks", np.asarray(self.tasks, dtype=int))
            if self.tasks.shape != (n,):
                raise ValueError(f"tasks has shape {self.tasks.shape}, expected ({n},)")

    def metric(self, name: str, detector: str = "prototype", layer: str | None = None) -> float:
        """``f1``/``auroc``/``fpr`` of ``detector`` at ``layer`` (default: the deepest selected)."""
        j = self.layers.index(layer) if layer else len(self.layers) - 1
        return float(getattr(self, name)[self.detectors.index(detector), j])


@dataclass(frozen=True, eq=False)
class RestorationResult(Record):
    """Task completion and attack success with no defense, isolation and steering.

    Attributes:
        defenses: ``("none", "isolate", "steer")``.
        task_completion: ``(3,)`` fraction of required final answers delivered and correct.
        attack_success: ``(3,)`` fraction of attack opportunities (compromised agent, triggered
            question) whose delivered final answer is wrong.
        flagged: Agents the detector flagged (acted on).
        compromised: The truly compromised agents.
        steer_layer: Name of the steered site.
    """

    defenses: tuple[str, ...]
    task_completion: np.ndarray
    attack_success: np.ndarray
    flagged: tuple[int, ...]
    compromised: tuple[int, ...]
    steer_layer: str

    def __post_init__(self) -> None:
        for name in ("task_completion", "attack_success"):
            object.__setattr__(self, name, _arr(getattr(self, name)))
            if getattr(self, name).shape != (len(self.defenses),):
                raise ValueError(f"{name} must have one value per defense")

    def value(self, name: str, defense: str) -> float:
        """``task_completion`` or ``attack_success`` under ``defense``."""
        return float(getattr(self, name)[self.defenses.index(defense)])


@dataclass(frozen=True, eq=False, repr=False)
class AcmasResult(Record, StudyResult):
    """The whole study: detection per schedule, restoration (built-in system only), notes.

    ``toy`` is the toy agent LM's training record (steps to the criterion, seconds, held-out
    accuracy, cache key), ``None`` for another model.
    """

    STUDY: ClassVar[str] = "acmas"
    CLAIMS: ClassVar[tuple[Claim, ...]] = summary.CLAIMS
    METRIC_KEYS: ClassVar[tuple[str, ...]] = summary.METRIC_KEYS
    FIGURES: ClassVar[tuple[str, ...]] = FIGURES
    MAIN_FIGURE: ClassVar[str] = "f1_by_layer"

    model: str
    schedules: tuple[ScheduleResult, ...]
    restoration: RestorationResult | None
    notes: list[str] = field(default_factory=list)
    toy: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.schedules:
            raise ValueError("an AcMAS result needs at least one schedule")

    def schedule(self, name: str) -> ScheduleResult | None:
        """The result of schedule ``name`` (``None`` if it was not run)."""
        return next((s for s in self.schedules if s.schedule == name), None)

    def figure_kinds(self) -> list[str]:
        """The figure kinds this result can draw."""
        return [k for k in FIGURES if k != "restoration" or self.restoration is not None]

    def compute_metrics(self) -> dict[str, Any]:
        """The ``results.json`` metrics (see :mod:`workbench.analyses.acmas.summary`)."""
        return summary.metrics(self)

    def shortfalls(self) -> tuple[Shortfall, ...]:
        """The toy agent LM, when it reached its step cap before its criterion (every claim)."""
        toy = self.toy
        if not toy or toy.get("learned", True):
            return ()
        reached = ", ".join(f"{k} {v:.3f}" for k, v in toy["accuracy"].items())
        return (
            Shortfall(
                "toy agent LM training",
                toy["criterion"],
                f"held-out accuracy {reached}",
                int(toy["steps"]),
                "raise toy_steps (the cap)",
            ),
        )

    def figure_builders(self) -> dict[str, Callable[[Any], go.Figure]]:
        """Figure kind to builder (:mod:`workbench.analyses.acmas.figures`)."""
        from workbench.analyses.acmas import figures

        return figures.BUILDERS

    def provenance(self) -> dict[str, Any]:
        """The model the agents' activations were read from (the toy, or a loaded model)."""
        return {"model": self.model, "revision": None}
