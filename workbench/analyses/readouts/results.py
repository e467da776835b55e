"""The readouts study's results: lens curves, the probe sweep and the steering test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from workbench.analyses.base import StudyResult
from workbench.analyses.readouts import summary
from workbench.claims import Claim
from workbench.codec import Record
from workbench.errors import InputError
from workbench.lens import LensResult
from workbench.probes import ProbeSweepResult

if TYPE_CHECKING:
    import plotly.graph_objects as go

FIGURES = ("lens_heatmap", "lens_kl", "lens_loss", "probe", "steering")
"""Every figure kind of :meth:`ReadoutsResult.figure`, in notebook order."""


@dataclass(frozen=True)
class LensCurve(Record):
    """One lens's held-out numbers by layer (means over every position).

    Attributes:
        lens: ``logit``, ``last_block`` or ``tuned``.
        layers: The layers read.
        kl: KL(final || lens) in nats.
        loss: Next-token cross-entropy in nats.
        entropy: Entropy of the lens's distribution in nats.
        final_loss: The model's own next-token loss on the same positions.
    """

    lens: str
    layers: tuple[int, ...]
    kl: tuple[float, ...]
    loss: tuple[float, ...]
    entropy: tuple[float, ...]
    final_loss: float

    def __post_init__(self) -> None:
        for name in ("layers", "kl", "loss", "entropy"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not len(self.layers) == len(self.kl) == len(self.loss) == len(self.entropy):
            raise InputError(f"lens {self.lens}: per-layer lists of different lengths")

    @classmethod
    def of(cls, result: LensResult) -> LensCurve:
        """The curve of a :class:`~workbench.lens.LensResult`."""
        return cls(
            result.lens,
            tuple(int(x) for x in result.layers),
            tuple(float(x) for x in result.kl_by_layer()),
            tuple(float(x) for x in result.loss_by_layer()),
            tuple(float(x) for x in result.entropy_by_layer()),
            float(result.final_loss()),
        )


@dataclass(frozen=True)
class SteeringResult(Record):
    """Steering with a difference-of-means vector against random vectors of the same norm.

    Attributes:
        layer: The block whose output was steered.
        norm: Norm of the steering vector (and of each random one).
        scales: Multipliers applied (0 is the unsteered model).
        effect: Change of the word-start probability mass at each scale (steering vector).
        random: The same for each random vector, ``(n_random, n_scales)``.
        base_mass: The unsteered model's mean word-start mass.
        n_rows: Positions averaged.
        generated: Tokens generated in each run of the generation test (0: not run).
        gen_base: Share of word-starting tokens among the unsteered model's greedy
            continuations (``nan`` when not run).
        gen_effect: Change of that share under the steering vector at the largest scale.
        gen_random: The same for each random vector of the same norm.
        gen_examples: A few ``(prompt, unsteered, steered)`` continuations, as text.
    """

    layer: int
    norm: float
    scales: tuple[float, ...]
    effect: tuple[float, ...]
    random: tuple[tuple[float, ...], ...]
    base_mass: float
    n_rows: int
    generated: int = 0
    gen_base: float = float("nan")
    gen_effect: float = float("nan")
    gen_random: tuple[float, ...] = ()
    gen_examples: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "scales", tuple(float(s) for s in self.scales))
        object.__setattr__(self, "effect", tuple(float(s) for s in self.effect))
        object.__setattr__(self, "random", tuple(tuple(float(x) for x in r) for r in self.random))
        object.__setattr__(self, "gen_random", tuple(float(x) for x in self.gen_random))
        object.__setattr__(
            self, "gen_examples", tuple(tuple(str(x) for x in e) for e in self.gen_examples)
        )
        for name in ("gen_base", "gen_effect"):
            value = getattr(self, name)
            object.__setattr__(self, name, float("nan") if value is None else float(value))
        if len(self.effect) != len(self.scales) or any(
            len(r) != len(self.scales) for r in self.random
        ):
            raise InputError("steering effects do not match the scales")
        if any(len(e) != 3 for e in self.gen_examples):
            raise InputError("each generation example is (prompt, unsteered, steered)")

    @property
    def effect_at_max(self) -> float:
        """The steering vector's effect at the largest scale."""
        return self.effect[-1]

    @property
    def random_at_max(self) -> float:
        """The mean effect of the random vectors at the largest scale."""
        return float(np.mean([r[-1] for r in self.random])) if self.random else float("nan")

    @property
    def random_max_at_max(self) -> float:
        """The largest effect of any random vector at the largest scale."""
        return float(max(r[-1] for r in self.random)) if self.random else float("nan")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        """The notebook card: effect by scale, the generation test and its continuations."""
        from workbench.display.results import steering_bundle

        return steering_bundle(self, include, exclude)

    @property
    def gen_random_max(self) -> float:
        """The largest generation effect of any random vector (``nan`` when not run)."""
        return float(max(self.gen_random)) if self.gen_random else float("nan")


@dataclass(frozen=True, repr=False)
class ReadoutsResult(StudyResult):
    """Everything the readouts study measured on one model.

    Attributes:
        model: The model.
        revision: Its revision.
        curves: One :class:`LensCurve` per lens, logit lens first.
        heatmap: The logit lens on one held-out text (every position), for the classic picture.
        probe: The probe sweep by layer, with its control and selectivity.
        probe_task: Which labels the probe predicts.
        steering: The steering test.
        notes: What was skipped and why.
    """

    STUDY: ClassVar[str] = "readouts"
    CLAIMS: ClassVar[tuple[Claim, ...]] = summary.CLAIMS
    METRIC_KEYS: ClassVar[tuple[str, ...]] = summary.METRIC_KEYS
    FIGURES: ClassVar[tuple[str, ...]] = FIGURES
    MAIN_FIGURE: ClassVar[str] = "lens_kl"

    model: str
    revision: str | None
    curves: tuple[LensCurve, ...]
    heatmap: LensResult
    probe: ProbeSweepResult
    probe_task: str
    steering: SteeringResult
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "curves", tuple(self.curves))
        object.__setattr__(self, "notes", tuple(self.notes))
        if not self.curves or self.curves[0].lens != "logit":
            raise InputError("the readouts result needs the logit lens's curve first")

    @property
    def model_loss(self) -> float:
        """The model's own held-out next-token loss."""
        return self.curves[0].final_loss

    def curve(self, lens: str) -> LensCurve | None:
        """The curve of ``lens`` (``None`` if it was not run)."""
        return next((c for c in self.curves if c.lens == lens), None)

    def compute_metrics(self) -> dict[str, Any]:
        """The ``results.json`` metrics (see :mod:`workbench.analyses.readouts.summary`)."""
        return summary.metrics(self)

    def figure_builders(self) -> dict[str, Callable[[ReadoutsResult], go.Figure]]:
        """Figure kind to builder (:mod:`workbench.analyses.readouts.figures`)."""
        from workbench.analyses.readouts import figures

        return figures.BUILDERS

    def provenance(self) -> dict[str, Any]:
        """The model, its revision and the ``resid_post`` sites the lenses and probes read."""
        layers = self.curves[0].layers
        return {
            "model": self.model,
            "revision": self.revision,
            "sites": [f"resid_post.{layer}" for layer in layers],
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "model": self.model,
            "revision": self.revision,
            "curves": [c.to_dict() for c in self.curves],
            "heatmap": self.heatmap.to_dict(full=True),
            "probe": self.probe.to_dict(),
            "probe_task": self.probe_task,
            "steering": self.steering.to_dict(),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReadoutsResult:
        """Inverse of :meth:`to_dict`."""
        return cls(
            data["model"],
            data["revision"],
            tuple(LensCurve.from_dict(c) for c in data["curves"]),
            LensResult.from_dict(data["heatmap"]),
            ProbeSweepResult.from_dict(data["probe"]),
            data["probe_task"],
            SteeringResult.from_dict(data["steering"]),
            tuple(data["notes"]),
        )
