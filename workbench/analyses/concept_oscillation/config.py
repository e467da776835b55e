"""The concept-oscillation study's parameters, typed and validated (the notebook's parameters)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from workbench.analyses.base import StudyConfig
from workbench.analyses.concept_oscillation.cases import MIN_CASES
from workbench.errors import ConfigError

TOY = "toy"
"""The embedded default model: a small decoder trained on the two-channel conflict task."""
MIN_BOOTSTRAP = 100
"""Fewest bootstrap resamples accepted for the balance point's interval."""


@dataclass(frozen=True)
class ConceptOscillationConfig(StudyConfig):
    """Parameters of the concept-oscillation study.

    Attributes:
        model: ``toy`` (a decoder the study trains on its two-channel task), a local folder or a
            Hugging Face id of a causal LM (or a vision-language model whose family file
            declares its sites).
        cases: ``builtin`` (for ``toy``: generated conflicts; for another model: the shipped
            text-only cases, context against common knowledge) or a ``.jsonl`` file of cases.
        n_cases: Conflict cases used (generated for ``toy``, the first ones of a file).
        lens: How each layer is read: ``tuned`` (an affine translator per layer, trained on the
            study's own prompts first; the default: the logit lens of the toy's first layers
            shows neither answer in up to 30% of conflicts) or ``logit`` (final norm and
            unembedding).
        seed: Seed of the toy's task and training, the bootstrap and the probe folds.
        n_bootstrap: Bootstrap resamples for the balance point's interval.
        toy_steps: Training steps of the toy decoder (ignored for other models).
        batch_size: Prompts per forward pass.
        device: Torch device (``auto``, ``cpu``, ``cuda``...).
    """

    POSITIVE: ClassVar[tuple[str, ...]] = ("n_cases", "n_bootstrap", "toy_steps", "batch_size")
    CACHE_IGNORES: ClassVar[tuple[str, ...]] = ("device", "batch_size")
    # 2: the toy trains on one thread; 3: the toy also trains on irrelevant-A examples, the probe
    # reads the answers' unembedding difference; 4: the toy's record holds its excess KL
    CACHE_VERSION: ClassVar[int] = 4

    model: str = TOY
    cases: str = "builtin"
    n_cases: int = 2000
    lens: Literal["logit", "tuned"] = "tuned"
    seed: int = 0
    n_bootstrap: int = 1000
    toy_steps: int = 2000
    batch_size: int = 32
    device: str = "auto"

    def __post_init__(self) -> None:
        self.validate()
        if not str(self.model).strip():
            raise ConfigError("model must name a model: toy, a folder or a Hugging Face id")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        if self.n_cases < MIN_CASES:
            raise ConfigError(
                f"n_cases={self.n_cases} is fewer cases than the follow curve's bootstrap needs; "
                f"use at least {MIN_CASES}"
            )
        if self.n_bootstrap < MIN_BOOTSTRAP:
            raise ConfigError(
                f"n_bootstrap must be at least {MIN_BOOTSTRAP}, got {self.n_bootstrap}"
            )
        spec = str(self.cases).strip()
        if spec != "builtin":
            path = Path(spec).expanduser()
            if path.suffix != ".jsonl":
                raise ConfigError(f"cases={self.cases!r}: use 'builtin' or a .jsonl file of cases")
            if not path.is_file():
                raise ConfigError(f"cases={self.cases!r}: no such file")

    @property
    def is_toy(self) -> bool:
        """Whether the model is the embedded toy decoder."""
        return self.model == TOY
