"""What a training run returns: losses, evaluations, checkpoints, and the loss-curve figure."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench.arrays import finite_list
from workbench.train.config import TrainConfig


@dataclass(frozen=True)
class EvalRecord:
    """The evaluation callback's numbers at one step.

    Attributes:
        step: Weights after this many updates.
        values: Metric name to value.
    """

    step: int
    values: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"step": ..., **values}``."""
        return {"step": self.step, **self.values}


@dataclass(frozen=True)
class Checkpoint:
    """One saved set of weights.

    Attributes:
        step: Weights after this many updates (0: the initialization).
        path: Its folder (``<out>/step-N``), or ``None`` when the run kept checkpoints in memory.
        values: The evaluation at this step (empty without an evaluation callback).
        state: A CPU copy of the state dict when the run had no ``out`` folder, else ``None``.
    """

    step: int
    path: Path | None = None
    values: dict[str, float] = field(default_factory=dict)
    state: dict[str, torch.Tensor] | None = field(default=None, repr=False, compare=False)

    @property
    def revision(self) -> str:
        """The checkpoint's name, ``step-N`` (what ``load_model(folder, revision=...)`` takes)."""
        return f"step-{self.step}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form ``{"step", "revision", **values}`` (path and state are left out)."""
        return {"step": self.step, "revision": self.revision, **self.values}


@dataclass(frozen=True)
class TrainResult:
    """A finished training run.

    Attributes:
        config: The configuration it ran with.
        losses: Training loss of every update, ``losses[s]`` at step ``s`` (``config.steps`` of
            them).
        grad_norms: Global gradient L2 norm of every update, before clipping.
        evals: The evaluation callback's records, by step.
        checkpoints: The saved weights, by step.
        seconds: Wall time of the run.
        out: The run's folder (with ``training.json``), or ``None`` for an in-memory run.
        model: The trained model (not part of :meth:`to_dict`).
        stopped_at: The step at which ``train(stop_when=...)``'s criterion held and the run
            ended, or ``None`` when it ran all ``config.steps`` (no criterion, or the cap reached
            first).
    """

    config: TrainConfig
    losses: tuple[float, ...]
    grad_norms: tuple[float, ...]
    evals: tuple[EvalRecord, ...] = ()
    checkpoints: tuple[Checkpoint, ...] = ()
    seconds: float = 0.0
    out: Path | None = None
    model: torch.nn.Module | None = field(default=None, repr=False, compare=False)
    stopped_at: int | None = None

    def __post_init__(self) -> None:
        n = self.steps
        if self.stopped_at is not None and not 0 < self.stopped_at < self.config.steps:
            raise ValueError(f"stopped_at {self.stopped_at} is outside (0, {self.config.steps})")
        if len(self.losses) != n or len(self.grad_norms) != n:
            raise ValueError(
                f"{len(self.losses)} losses and {len(self.grad_norms)} gradient norms for {n} steps"
            )
        expected = [s for s in self.config.checkpoints if s <= n]
        if self.stopped_at is not None and self.config.steps in self.config.checkpoints:
            expected = sorted({*expected, n})
        if [c.step for c in self.checkpoints] != expected:
            raise ValueError(
                f"checkpoints at {[c.step for c in self.checkpoints]}, expected {expected} "
                f"(config asked for {list(self.config.checkpoints)}, ran {n} steps)"
            )
        steps = [e.step for e in self.evals]
        if steps != sorted(set(steps)) or any(not 0 <= s <= n for s in steps):
            raise ValueError(f"evaluation steps {steps} are not increasing within [0, {n}]")

    @property
    def steps(self) -> int:
        """Updates made: ``stopped_at`` when a criterion ended the run, else ``config.steps``."""
        return self.config.steps if self.stopped_at is None else self.stopped_at

    @property
    def final(self) -> Checkpoint:
        """The last checkpoint saved (with a criterion, the one at ``stopped_at``)."""
        if not self.checkpoints:
            raise KeyError("no checkpoint was saved; give TrainConfig(checkpoints=(steps,))")
        return self.checkpoints[-1]

    def checkpoint(self, step: int) -> Checkpoint:
        """The checkpoint saved at ``step``."""
        for c in self.checkpoints:
            if c.step == step:
                return c
        available = ", ".join(str(c.step) for c in self.checkpoints) or "none"
        raise KeyError(f"no checkpoint at step {step}; saved: {available}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (also what ``training.json`` holds, next to the caller's record)."""
        return {
            "train_config": self.config.to_dict(),
            "losses": finite_list(self.losses),
            "grad_norms": finite_list(self.grad_norms),
            "evals": [e.to_dict() for e in self.evals],
            "checkpoints": [c.to_dict() for c in self.checkpoints],
            "seconds": round(self.seconds, 3),
            "steps": self.steps,
            "stopped_at": self.stopped_at,
        }

    def figure_kinds(self) -> list[str]:
        """The kinds :meth:`figure` draws: the loss curve, the gradient norms."""
        return ["loss", "grad_norm"]

    def figure(self, kind: str = "loss") -> Any:
        """The training curve.

        Args:
            kind: ``"loss"`` (training loss per step, evaluation metrics as markers on a second
                axis) or ``"grad_norm"`` (gradient norm per step, the clip level dashed).
        """
        import plotly.graph_objects as go

        from workbench.errors import check_figure_kind
        from workbench.figures import style

        check_figure_kind(kind, self.figure_kinds())
        steps = list(range(len(self.losses)))
        fig = go.Figure()
        if kind == "grad_norm":
            fig.add_trace(go.Scatter(x=steps, y=list(self.grad_norms), name="gradient norm"))
            if self.config.grad_clip is not None:
                fig.add_hline(y=self.config.grad_clip, line_dash="dash", annotation_text="clip")
            fig.update_yaxes(title_text="gradient L2 norm (before clipping)", type="log")
        else:
            fig.add_trace(go.Scatter(x=steps, y=list(self.losses), name="training loss"))
            names = sorted({k for e in self.evals for k in e.values})
            for name in names:
                points = [(e.step, e.values[name]) for e in self.evals if name in e.values]
                fig.add_trace(
                    go.Scatter(
                        x=[p[0] for p in points],
                        y=[p[1] for p in points],
                        mode="lines+markers",
                        name=name,
                        yaxis="y2" if name != "loss" and not name.endswith("loss") else "y",
                    )
                )
            fig.update_yaxes(title_text="loss")
            if any(not n.endswith("loss") for n in names):
                fig.update_layout(yaxis2={"overlaying": "y", "side": "right", "showgrid": False})
        fig.update_xaxes(title_text="step")
        return style(fig, title=kind.replace("_", " ") + " over training")
