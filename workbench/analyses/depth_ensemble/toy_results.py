"""Results of the teacher-student toys: a teacher, one trained student, a depth fit, the set."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.analyses.depth_ensemble.layers import LayerGeometry
from workbench.arrays import finite_or_none, float_or_nan, frozen, plain
from workbench.codec import Record
from workbench.errors import InputError


@dataclass(frozen=True)
class ToyTeacher(Record):
    """One teacher and the target it defines.

    Attributes:
        kind: ``independent`` or ``tied``.
        depth: Its layers.
        temperature: Softmax temperature of its logits.
        entropy: Mean entropy of its output distribution on the held-out inputs (nats).
        max_entropy: ``log(vocab)``, the entropy of the uniform distribution.
        geometry: Its residual stream's layer geometry on held-out inputs.
    """

    kind: str
    depth: int
    temperature: float
    entropy: float
    max_entropy: float
    geometry: LayerGeometry


@dataclass(frozen=True)
class ToyStudent:
    """One trained student.

    Attributes:
        teacher: The teacher's kind.
        depth: Its layers.
        steps: Optimizer steps it trained for.
        test_loss: Mean held-out KL to the teacher.
        final_train_loss: Mean training loss over the last 1% of steps (at least 10).
        per_example: Held-out KL of each held-out example, ``(n_test,)`` (the bootstrap's data).
        geometry: Its residual stream's layer geometry on held-out inputs.
        seconds: Training time.
    """

    teacher: str
    depth: int
    steps: int
    test_loss: float
    final_train_loss: float
    per_example: np.ndarray = field(repr=False)
    geometry: LayerGeometry = field(repr=False)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_example", frozen(self.per_example))
        if self.per_example.ndim != 1 or not len(self.per_example):
            raise InputError(f"ToyStudent.per_example has shape {self.per_example.shape}")
        if self.geometry.n_layers != self.depth:
            raise InputError(f"a depth-{self.depth} student with {self.geometry.n_layers} layers")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (also the cache format)."""
        return {
            "teacher": self.teacher,
            "depth": self.depth,
            "steps": self.steps,
            "test_loss": self.test_loss,
            "final_train_loss": finite_or_none(self.final_train_loss),
            "per_example": plain(self.per_example),
            "geometry": self.geometry.to_dict(),
            "seconds": round(self.seconds, 3),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToyStudent:
        """Inverse of :meth:`to_dict`."""
        return cls(
            data["teacher"],
            int(data["depth"]),
            int(data["steps"]),
            float(data["test_loss"]),
            float_or_nan(data["final_train_loss"]),
            data["per_example"],
            LayerGeometry.from_dict(data["geometry"]),
            float(data["seconds"]),
        )


@dataclass(frozen=True)
class ToyFit(Record):
    """``L = L0 + c / l^a`` fitted to one teacher's students (see :func:`.compute.fit_toy`).

    Attributes:
        teacher: The teacher's kind.
        depths: Student depths, ``(n,)``.
        losses: Their held-out losses, ``(n,)``.
        L0: Fitted floor.
        c: Fitted coefficient.
        a: Fitted exponent (the paper's alpha).
        a_se: Standard error of ``a`` from the Jacobian (``NaN`` with 3 depths: no spare
            degree of freedom).
        a_bootstrap_se: Its spread over refits on resampled held-out examples.
        a_low: 2.5th percentile of the bootstrap.
        a_high: 97.5th percentile.
        n_bootstrap: Refits that converged.
        loglog_slope: Minus the slope of ``log L`` on ``log l`` (a power law without floor).
    """

    teacher: str
    depths: np.ndarray
    losses: np.ndarray
    L0: float
    c: float
    a: float
    a_se: float
    a_bootstrap_se: float
    a_low: float
    a_high: float
    n_bootstrap: int
    loglog_slope: float

    SCALARS = ("L0", "c", "a", "a_se", "a_bootstrap_se", "a_low", "a_high", "loglog_slope")

    def __post_init__(self) -> None:
        object.__setattr__(self, "depths", frozen(self.depths, np.int64))
        object.__setattr__(self, "losses", frozen(self.losses))
        if self.losses.shape != self.depths.shape or self.depths.ndim != 1:
            raise InputError(f"ToyFit: {self.losses.shape} losses for {self.depths.shape} depths")

    def curve(self, depths: np.ndarray) -> np.ndarray:
        """The fitted loss at ``depths``."""
        return self.L0 + self.c * np.asarray(depths, dtype=np.float64) ** -self.a


@dataclass(frozen=True)
class ToyResult:
    """The toys: teachers, their students and the depth fits.

    Attributes:
        preset: The settings they ran with (:class:`~.config.ToyPreset` as a dict).
        teachers: One per teacher kind, in the order trained.
        students: Every student, teacher by teacher, in depth order.
        fits: One fit per teacher.
    """

    preset: dict[str, Any]
    teachers: tuple[ToyTeacher, ...]
    students: tuple[ToyStudent, ...]
    fits: tuple[ToyFit, ...]

    def __post_init__(self) -> None:
        for name in ("teachers", "students", "fits"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        kinds = [t.kind for t in self.teachers]
        if [f.teacher for f in self.fits] != kinds:
            raise InputError(f"toy fits for {[f.teacher for f in self.fits]}, teachers {kinds}")
        for fit in self.fits:
            depths = [s.depth for s in self.students if s.teacher == fit.teacher]
            if depths != fit.depths.tolist():
                raise InputError(f"{fit.teacher} students at {depths}, fit at {fit.depths}")

    def teacher(self, kind: str) -> ToyTeacher | None:
        """The teacher of that kind, if trained."""
        return next((t for t in self.teachers if t.kind == kind), None)

    def fit(self, kind: str) -> ToyFit | None:
        """The depth fit of that teacher's students, if trained."""
        return next((f for f in self.fits if f.teacher == kind), None)

    def students_of(self, kind: str) -> list[ToyStudent]:
        """That teacher's students, in depth order."""
        return [s for s in self.students if s.teacher == kind]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "preset": dict(self.preset),
            "teachers": [t.to_dict() for t in self.teachers],
            "students": [s.to_dict() for s in self.students],
            "fits": [f.to_dict() for f in self.fits],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToyResult:
        """Inverse of :meth:`to_dict`."""
        return cls(
            dict(data["preset"]),
            tuple(ToyTeacher.from_dict(t) for t in data["teachers"]),
            tuple(ToyStudent.from_dict(s) for s in data["students"]),
            tuple(ToyFit.from_dict(f) for f in data["fits"]),
        )
