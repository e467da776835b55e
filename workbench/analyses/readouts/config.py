"""The readouts study's parameters, typed and validated (the notebook's parameters cell)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from workbench.analyses.base import StudyConfig
from workbench.errors import ConfigError

LENSES = ("logit", "last_block", "tuned")
"""Every lens the study can draw."""


@dataclass(frozen=True)
class ReadoutsConfig(StudyConfig):
    """Parameters of the readouts study.

    Attributes:
        model: ``tiny-lm``, a local folder or an HF id (a causal LM: lenses need an unembedding).
        text_source: Where the texts come from (``builtin:pydoc``, a ``.txt``/``.jsonl`` file).
        n_texts: Held-out texts the lenses, probes and steering are measured on.
        tuned_texts: Texts the tuned lens is trained on: the first ones of the source; the
            held-out texts are the ``n_texts`` after them.
        max_length: Tokens per text at most.
        lens: Comma list of ``logit``, ``last_block``, ``tuned``.
        probe_task: ``word_start`` (does the next token start a new word?) or ``char_class``
            (letter, digit, punctuation or space: the class of the token's first character);
            both labels are read off the text itself.
        layers: Layers probed and lensed (``all``, ``0,3,-1``, ``2:6``).
        probe_cv: Folds of the probe's cross-validation.
        probe_seeds: Repetitions with new folds; intervals are over them.
        steer_layer: The layer whose output is steered (``None``: the middle one).
        steer_scale: Multiplier of the steering vector at its largest (it is also drawn at
            fractions of it).
        steer_random: Random vectors of the same norm the steering effect is compared with.
        seed: Seed of the folds, the control labels, the tuned lens and the random vectors.
        batch_size: Texts per forward pass.
        device: Torch device (``auto``, ``cpu``, ``cuda``...).
    """

    POSITIVE: ClassVar[tuple[str, ...]] = (
        "n_texts",
        "tuned_texts",
        "max_length",
        "probe_seeds",
        "steer_random",
        "batch_size",
    )
    CACHE_IGNORES: ClassVar[tuple[str, ...]] = ("device", "batch_size")

    model: str = "tiny-lm"
    text_source: str = "builtin:pydoc"
    n_texts: int = 200
    tuned_texts: int = 400
    max_length: int = 64
    lens: str = "logit,last_block,tuned"
    probe_task: Literal["word_start", "char_class"] = "word_start"
    layers: str = "all"
    probe_cv: int = 5
    probe_seeds: int = 3
    steer_layer: int | None = None
    steer_scale: float = 4.0
    steer_random: int = 8
    seed: int = 0
    batch_size: int = 16
    device: str = "auto"

    def __post_init__(self) -> None:
        self.validate()
        unknown = sorted(set(self.lenses) - set(LENSES))
        if unknown or not self.lenses:
            raise ConfigError(
                f"lens={self.lens!r}: unknown lens(es) {unknown}; use a comma list of "
                + ", ".join(LENSES)
            )
        if "logit" not in self.lenses:
            raise ConfigError(f"lens={self.lens!r} must include 'logit' (the reference readout)")
        if self.probe_cv < 2:
            raise ConfigError(f"probe_cv must be at least 2, got {self.probe_cv}")
        if not self.steer_scale > 0:
            raise ConfigError(f"steer_scale must be positive, got {self.steer_scale}")

    @property
    def lenses(self) -> tuple[str, ...]:
        """The lenses asked for, in :data:`LENSES` order."""
        asked = {x.strip() for x in str(self.lens).split(",") if x.strip()}
        return tuple(x for x in LENSES if x in asked) + tuple(sorted(asked - set(LENSES)))
