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

    The defaults are sized for the embedded real LM, ``smollm2`` (30 layers, a 49,152-token
    vocabulary), on 2 CPU cores: every lens position costs a full-vocabulary softmax per layer,
    so the lenses read a random sample of ``lens_rows`` held-out positions, and the tuned lens's
    translators are fitted in closed form (``tuned_init="least_squares"``, ``tuned_steps=0``).
    Models with a small head (``tiny-lm``) can afford the paper's KL training
    (``tuned_init="identity"``, ``tuned_steps=250``) and every position (``lens_rows=None``).

    Attributes:
        model: ``smollm2``, ``tiny-lm``, a local folder or an HF id (a causal LM: lenses need an
            unembedding).
        text_source: Where the texts come from (``builtin:pydoc``, a ``.txt``/``.jsonl`` file).
        text_sampling: ``random``: the seed draws the tuned-lens texts and the held-out texts
            (disjoint) from the first ``text_pool`` texts of the source; ``first``: the first
            ``tuned_texts`` texts train the tuned lens and the next ``n_texts`` are held out,
            whatever the seed.
        text_pool: Texts the ``random`` sampling draws from.
        n_texts: Held-out texts the lenses, probes and steering are measured on.
        tuned_texts: Texts the tuned lens is trained on.
        tuned_init: ``identity`` (the paper's start: the logit lens) or ``least_squares`` (each
            translator fitted in closed form to the last layer's residual; see
            :class:`~workbench.lens.TunedLensTraining`).
        tuned_steps: KL optimizer steps of the tuned lens's training (0 only with
            ``least_squares``).
        max_length: Tokens per text at most.
        lens: Comma list of ``logit``, ``last_block``, ``tuned``.
        lens_rows: Held-out positions (with a next token) the lens curves are read at, drawn by
            the seed; ``None``: every position.
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
        steer_texts: Held-out texts the steering is measured on (and prompts of the generation
            test).
        steer_new_tokens: Tokens each prompt's greedy continuation runs for in the generation
            test (0: no generation test).
        seed: Seed of the text sample, the lens positions, the folds, the control labels, the
            tuned lens and the random vectors.
        batch_size: Texts per forward pass.
        device: Torch device (``auto``, ``cpu``, ``cuda``...).
    """

    POSITIVE: ClassVar[tuple[str, ...]] = (
        "text_pool",
        "n_texts",
        "tuned_texts",
        "max_length",
        "probe_seeds",
        "steer_random",
        "steer_texts",
        "batch_size",
    )
    CACHE_IGNORES: ClassVar[tuple[str, ...]] = ("device", "batch_size")
    CACHE_VERSION: ClassVar[int] = 2

    model: str = "smollm2"
    text_source: str = "builtin:pydoc"
    text_sampling: Literal["random", "first"] = "random"
    text_pool: int = 512
    n_texts: int = 64
    tuned_texts: int = 192
    tuned_init: Literal["least_squares", "identity"] = "least_squares"
    tuned_steps: int = 0
    max_length: int = 32
    lens: str = "logit,tuned"
    lens_rows: int | None = 192
    probe_task: Literal["word_start", "char_class"] = "word_start"
    layers: str = "all"
    probe_cv: int = 5
    probe_seeds: int = 3
    steer_layer: int | None = None
    steer_scale: float = 2.0
    steer_random: int = 8
    steer_texts: int = 16
    steer_new_tokens: int = 16
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
        least = 0 if self.tuned_init == "least_squares" else 1
        if isinstance(self.tuned_steps, bool) or not (
            isinstance(self.tuned_steps, int) and self.tuned_steps >= least
        ):
            raise ConfigError(
                f"tuned_steps must be an integer of at least {least} with tuned_init="
                f"{self.tuned_init!r}, got {self.tuned_steps!r}"
            )
        if self.lens_rows is not None and (
            isinstance(self.lens_rows, bool)
            or not isinstance(self.lens_rows, int)
            or self.lens_rows < 1
        ):
            raise ConfigError(f"lens_rows must be None or an integer >= 1, got {self.lens_rows!r}")
        if isinstance(self.steer_new_tokens, bool) or not (
            isinstance(self.steer_new_tokens, int) and self.steer_new_tokens >= 0
        ):
            raise ConfigError(
                f"steer_new_tokens must be an integer >= 0, got {self.steer_new_tokens!r}"
            )
        if self.text_sampling == "random" and self.text_pool < self.tuned_texts + self.n_texts:
            raise ConfigError(
                f"text_pool={self.text_pool} is smaller than tuned_texts + n_texts = "
                f"{self.tuned_texts + self.n_texts}; raise text_pool or lower them"
            )

    @property
    def lenses(self) -> tuple[str, ...]:
        """The lenses asked for, in :data:`LENSES` order."""
        asked = {x.strip() for x in str(self.lens).split(",") if x.strip()}
        return tuple(x for x in LENSES if x in asked) + tuple(sorted(asked - set(LENSES)))
