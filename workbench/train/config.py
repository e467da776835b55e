"""The trainer's configuration and its learning-rate schedule."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from workbench.errors import ConfigError


def log_steps(
    steps: int, *, first: int = 10, mantissas: Sequence[int] = (1, 2, 5)
) -> tuple[int, ...]:
    """Log-spaced checkpoint steps: 0, then ``m * 10**k`` from ``first`` below ``steps``, then it.

    ``log_steps(500) == (0, 10, 20, 50, 100, 200, 500)``; step 0 is the initialization.

    Args:
        steps: The last step (always included).
        first: Smallest nonzero step (a power of ten).
        mantissas: Multipliers of each power of ten.
    """
    if steps < 0:
        raise ConfigError(f"steps must be at least 0, got {steps}")
    out = {0, steps}
    decade = first
    while decade < steps:
        out |= {m * decade for m in mantissas if m * decade < steps}
        decade *= 10
    return tuple(sorted(out))


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters of one training run (frozen; validated on creation).

    The learning rate at step ``s`` (0-based, the update that turns the weights of step ``s`` into
    those of step ``s + 1``) is ``lr * lr_factor(s)``: a linear warm-up ``(s + 1) / warmup`` for
    ``s < warmup``, then a cosine decay from 1 to ``min_lr_ratio`` reached at ``decay_steps``
    (``steps`` unless set), and the floor after it.

    Attributes:
        steps: Optimizer steps.
        lr: Peak learning rate.
        optimizer: ``adamw`` (default) or ``sgd``: plain gradient descent ``w -= lr * g`` (no
            momentum; ``weight_decay`` is then L2 added to the gradient), which the spectral
            analyses of embedding training assume.
        weight_decay: AdamW decoupled weight decay (applied to every trainable parameter).
        betas: AdamW moment coefficients.
        eps: AdamW epsilon.
        warmup: Linear warm-up steps.
        min_lr_ratio: Floor of the cosine decay as a fraction of ``lr`` (1.0: constant after the
            warm-up).
        decay_steps: Step at which the cosine reaches its floor, or ``None`` for ``steps``. With a
            criterion (``train(stop_when=...)``) and ``steps`` as its cap, ``decay_steps`` and
            ``min_steps`` set to the same schedule length run that schedule whole, then go on at
            the floor only as long as the criterion is not met: a run that meets it at the end of
            its schedule is bitwise the run of ``steps=decay_steps``.
        min_steps: No ``stop_when`` criterion is asked before this step (0: from the first
            evaluation on).
        restarts: Warm restarts (Loshchilov & Hutter, 2017, SGDR, with ``T_mult = 2``): past
            ``decay_steps`` the cosine starts again from ``lr``, each cycle twice as long as the
            one before (the first is ``decay_steps - warmup`` steps), instead of staying at the
            floor. With a criterion, a run that has not met it at the end of its schedule trains
            on through longer and longer cycles from where it is.
        grad_clip: Maximum global L2 norm of the gradient, or ``None`` for no clipping.
        batch_size: Rows per step drawn from tensor data, or ``None`` for full batch. Ignored
            when the batches come from a ``sample`` function.
        seed: Seeds the global torch RNG before a model factory builds the model (its
            initialization, and dropout), and the generator of the data order.
        checkpoints: Steps at which the weights are saved (``0`` is the initialization, ``steps``
            the end); :func:`log_steps` gives log-spaced ones.
        eval_every: Run the evaluation callback every this many steps (it also runs at every
            checkpoint and at the end), or ``None`` for checkpoints and the end only.
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``.
        threads: CPU threads for the run (``torch.set_num_threads``, restored afterwards), or
            ``None`` to keep the process's setting. The thread count changes how float sums are
            split, so bitwise reproducibility holds for a fixed count; on a CPU shared with other
            busy processes, 1 thread can be several times faster than 2.
    """

    steps: int
    lr: float = 1e-3
    weight_decay: float = 0.01
    optimizer: str = "adamw"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup: int = 0
    min_lr_ratio: float = 0.1
    decay_steps: int | None = None
    min_steps: int = 0
    restarts: bool = False
    grad_clip: float | None = 1.0
    batch_size: int | None = None
    seed: int = 0
    checkpoints: tuple[int, ...] = ()
    eval_every: int | None = None
    device: str = "cpu"
    threads: int | None = None

    def __post_init__(self) -> None:
        def bad(name: str, accepted: str) -> ConfigError:
            return ConfigError(f"{name} must be {accepted}, got {getattr(self, name)!r}")

        if not _is_int(self.steps) or self.steps < 1:
            raise bad("steps", "an integer of at least 1")
        if not _is_real(self.lr) or not self.lr > 0:
            raise bad("lr", "a positive number")
        if self.optimizer not in ("adamw", "sgd"):
            raise bad("optimizer", "'adamw' or 'sgd'")
        if not _is_real(self.weight_decay) or not self.weight_decay >= 0:
            raise bad("weight_decay", "a number of at least 0")
        betas = tuple(self.betas) if isinstance(self.betas, Sequence) else ()
        if len(betas) != 2 or not all(_is_real(b) and 0 <= b < 1 for b in betas):
            raise bad("betas", "two numbers in [0, 1)")
        object.__setattr__(self, "betas", tuple(float(b) for b in betas))
        if not _is_real(self.eps) or not self.eps > 0:
            raise bad("eps", "a positive number")
        if not _is_int(self.warmup) or self.warmup < 0:
            raise bad("warmup", "an integer of at least 0")
        if not _is_real(self.min_lr_ratio) or not 0 <= self.min_lr_ratio <= 1:
            raise bad("min_lr_ratio", "a number in [0, 1]")
        if self.decay_steps is not None and (
            not _is_int(self.decay_steps) or not 1 <= self.decay_steps <= self.steps
        ):
            raise bad("decay_steps", f"an integer in [1, steps={self.steps}] or None")
        if not _is_int(self.min_steps) or not 0 <= self.min_steps <= self.steps:
            raise bad("min_steps", f"an integer in [0, steps={self.steps}]")
        if self.grad_clip is not None and (not _is_real(self.grad_clip) or not self.grad_clip > 0):
            raise bad("grad_clip", "a positive number or None")
        if self.batch_size is not None and (not _is_int(self.batch_size) or self.batch_size < 1):
            raise bad("batch_size", "an integer of at least 1 or None (full batch)")
        if not _is_int(self.seed):
            raise bad("seed", "an integer")
        if self.eval_every is not None and (not _is_int(self.eval_every) or self.eval_every < 1):
            raise bad("eval_every", "an integer of at least 1 or None")
        if isinstance(self.checkpoints, str | bytes) or not isinstance(self.checkpoints, Sequence):
            raise bad("checkpoints", "a sequence of steps (e.g. log_steps(steps))")
        wrong = [s for s in self.checkpoints if not _is_int(s) or not 0 <= s <= self.steps]
        if wrong:
            raise ConfigError(
                f"checkpoint step {wrong[0]!r} is outside [0, steps={self.steps}]; "
                "give integer steps in that range"
            )
        object.__setattr__(self, "checkpoints", tuple(sorted({int(s) for s in self.checkpoints})))
        if self.threads is not None and (not _is_int(self.threads) or self.threads < 1):
            raise bad("threads", "an integer of at least 1 or None")
        if not isinstance(self.device, str) or not self.device.strip():
            raise bad("device", "'cpu', 'cuda', 'cuda:N' or 'auto'")

    def lr_factor(self, step: int) -> float:
        """Multiplier of ``lr`` for the update at ``step`` (warm-up, then cosine to the floor)."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        end = self.steps if self.decay_steps is None else self.decay_steps
        period = max(1, end - self.warmup)
        progress = (step - self.warmup) / period
        if self.restarts and progress >= 1.0:
            into = step - self.warmup
            while into >= period:  # SGDR with T_mult = 2: each cycle twice the one before
                into -= period
                period *= 2
            progress = into / period
        floor = self.min_lr_ratio
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    def lr_at(self, step: int) -> float:
        """The learning rate of the update at ``step``."""
        return self.lr * self.lr_factor(step)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = asdict(self)
        out["betas"] = list(self.betas)
        out["checkpoints"] = list(self.checkpoints)
        return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )
