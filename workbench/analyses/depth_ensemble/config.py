"""The depth-ensemble study's parameters, typed and validated, and the toys' presets."""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal

from workbench.analyses.base import StudyConfig
from workbench.errors import ConfigError

Teacher = Literal["independent", "tied", "both"]
Preset = Literal["cpu", "paper"]

BUILTIN_CSV = "builtin:chinchilla"
"""The paper's Chinchilla table, shipped in this package (``data/``)."""


@dataclass(frozen=True)
class ToyPreset:
    """Settings of the teacher-student toys that the notebook does not list one by one.

    Attributes:
        name: ``cpu`` or ``paper``.
        steps: Optimizer steps per student (``toy_steps`` overrides it).
        batch_size: Rows per step, drawn from the fixed pool of teacher outputs.
        lr: Peak learning rate (Adam: AdamW without weight decay).
        min_lr_ratio: Floor of the cosine decay (1.0: constant after the warm-up).
        warmup: Linear warm-up steps.
        temperature: The teacher's softmax temperature (``toy_temperature`` overrides it); lower
            is a more peaked target.
        teacher_depth: Layers of the teacher.
        width: Residual width.
        vocab: Output classes.
        pool: Inputs whose teacher outputs are computed once and drawn from (``toy_pool``
            overrides it).
        n_test: Held-out inputs the test loss averages over (also what the bootstrap resamples).
    """

    name: str
    steps: int
    batch_size: int
    lr: float
    min_lr_ratio: float
    warmup: int
    temperature: float
    teacher_depth: int = 128
    width: int = 32
    vocab: int = 128
    pool: int = 65_536
    n_test: int = 4096

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


PRESETS: dict[str, ToyPreset] = {
    # CPU: a few minutes for both teachers and depths 4-32 on 2 cores (see the notebook).
    "cpu": ToyPreset(
        "cpu", steps=1500, batch_size=256, lr=2e-3, min_lr_ratio=0.1, warmup=50, temperature=1.0
    ),
    # The paper's runs (exp-9 of liuyz0/DepthScaling): Adam 6e-4, batch 1024, 40k steps; a fresh
    # Gaussian batch every step there, a pool of 2^20 precomputed teacher outputs here.
    "paper": ToyPreset(
        "paper",
        steps=40_000,
        batch_size=1024,
        lr=6e-4,
        min_lr_ratio=1.0,
        warmup=0,
        temperature=0.1,
        pool=2**20,
        n_test=16_384,
    ),
}
"""The toys' presets: ``cpu`` (the notebook's default) and ``paper`` (for a GPU)."""


def parse_depths(spec: Any, field: str = "toy_depths") -> tuple[int, ...]:
    """Student depths from ``"4,8,16,32"`` (or a list of ints): at least 3, each >= 1, increasing.

    Raises:
        ConfigError: One line naming the bad value.
    """
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
    elif isinstance(spec, list | tuple):
        parts = list(spec)
    else:
        parts = None
    try:
        depths = tuple(int(p) for p in parts) if parts is not None else ()
        exact = parts is not None and all(str(p).strip().lstrip("-").isdigit() for p in parts)
    except (TypeError, ValueError):
        depths, exact = (), False
    if not exact or len(depths) < 3:
        raise ConfigError(
            f"{field}={spec!r} is not accepted; give at least 3 integer depths, e.g. '4,8,16,32'"
        )
    if min(depths) < 1:
        raise ConfigError(f"{field}={spec!r} has a depth below 1; every depth must be >= 1")
    if any(b <= a for a, b in itertools.pairwise(depths)):
        raise ConfigError(f"{field}={spec!r} is not sorted; give strictly increasing depths")
    return depths


@dataclass(frozen=True)
class DepthEnsembleConfig(StudyConfig):
    """Parameters of the depth-ensemble study.

    Attributes:
        model: ``tiny-lm``, a local folder or an HF id (a causal LM for the lenses and the layer
            skipping; an encoder gets the geometry only); ``none`` skips the model part.
        text_source: Where the texts come from (``builtin:pydoc``, a ``.txt``/``.jsonl`` file).
        n_texts: Texts measured (the tuned lens trains on the next ``n_texts`` of the source).
        max_length: Tokens per text at most.
        toy_depths: Student depths, e.g. ``"4,8,16,32"`` (at least 3, increasing).
        toy_steps: Optimizer steps per student; ``None``: the preset's.
        teacher: Which teachers' students are trained: ``independent``, ``tied`` or ``both``.
        preset: ``cpu`` (minutes on a laptop) or ``paper`` (the paper's 40k-step runs, a GPU).
        toy_temperature: The teacher's softmax temperature; ``None``: the preset's.
        toy_pool: Inputs whose teacher outputs are precomputed; ``None``: the preset's.
        scaling_csv: Runs to fit ``L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0`` to:
            ``builtin:chinchilla`` (the paper's table), a CSV path, or ``""`` to skip.
        seed: Seed of the toys, the shuffles, the tuned lens and the bootstraps.
        lens_steps: Training steps of the tuned lens.
        shuffles: Random orders of the middle layers tried.
        bootstrap: Resamples of every bootstrap (toy fits and the scaling fit).
        batch_size: Texts per forward pass.
        device: Torch device (``auto``, ``cpu``, ``cuda``...), for the model and the toys.
    """

    POSITIVE: ClassVar[tuple[str, ...]] = (
        "n_texts",
        "max_length",
        "lens_steps",
        "shuffles",
        "bootstrap",
        "batch_size",
    )
    CACHE_IGNORES: ClassVar[tuple[str, ...]] = ("device", "batch_size")
    MODEL_FIELDS: ClassVar[tuple[str, ...]] = (
        "model",
        "text_source",
        "n_texts",
        "max_length",
        "seed",
        "lens_steps",
        "shuffles",
    )
    """Fields the model part's numbers depend on."""

    model: str = "tiny-lm"
    text_source: str = "builtin:pydoc"
    n_texts: int = 64
    max_length: int = 64
    toy_depths: str = "4,8,16,32"
    toy_steps: int | None = None
    teacher: Teacher = "both"
    preset: Preset = "cpu"
    toy_temperature: float | None = None
    toy_pool: int | None = None
    scaling_csv: str = BUILTIN_CSV
    seed: int = 0
    lens_steps: int = 200
    shuffles: int = 4
    bootstrap: int = 200
    batch_size: int = 16
    device: str = "auto"

    def __post_init__(self) -> None:
        self.validate()
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError("model must name a model (tiny-lm, a folder or an HF id) or 'none'")
        parse_depths(self.toy_depths)
        for name in ("toy_steps", "toy_pool"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(f"{name} must be an integer of at least 1 or None, got {value!r}")
        t = self.toy_temperature
        if t is not None and (
            isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0
        ):
            raise ConfigError(f"toy_temperature must be a positive number or None, got {t!r}")
        if not isinstance(self.scaling_csv, str):
            raise ConfigError(
                f"scaling_csv must be {BUILTIN_CSV!r}, a CSV path or '' (skip), "
                f"got {self.scaling_csv!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")

    @property
    def depths(self) -> tuple[int, ...]:
        """The student depths as ints."""
        return parse_depths(self.toy_depths)

    @property
    def teachers(self) -> tuple[str, ...]:
        """The teacher kinds trained (``both``: independent, then tied)."""
        return ("independent", "tied") if self.teacher == "both" else (self.teacher,)

    @property
    def toy(self) -> ToyPreset:
        """The preset with ``toy_steps``, ``toy_temperature`` and ``toy_pool`` applied."""
        from dataclasses import replace

        base = PRESETS[self.preset]
        return replace(
            base,
            steps=self.toy_steps or base.steps,
            temperature=float(self.toy_temperature or base.temperature),
            pool=self.toy_pool or base.pool,
        )

    @property
    def has_model(self) -> bool:
        """Whether the model part runs (``model != "none"``)."""
        return self.model.strip().lower() != "none"

    def part_key(self, fields: tuple[str, ...]) -> str:
        """A cache key over ``fields`` only (so the toys' cache survives a change of model)."""
        names = [n for n in self.parameter_names() if n not in fields]
        return self.key(*names)
