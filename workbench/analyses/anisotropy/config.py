"""The anisotropy study's parameters, typed and validated (the notebook's parameters cell)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from workbench.analyses.base import StudyConfig
from workbench.errors import ConfigError

LAYER_METRICS = ("mean_cosine", "mev", "isoscore", "effective_rank", "twonn")
"""The geometry measured at every layer (fields of :class:`~.results.LayerMetrics`)."""
CHECKPOINT_METRICS = ("mean_cosine", "isoscore", "effective_rank", "twonn")
"""The metrics followed across checkpoints (the heatmap panels)."""

Site = Literal["resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out"]


@dataclass(frozen=True)
class AnisotropyConfig(StudyConfig):
    """Parameters of the anisotropy study.

    Attributes:
        model: ``tiny-lm``, ``minilm``, a local folder or an HF id.
        checkpoints: ``"all"`` (every local ``step-N``), ``"none"`` (the model as loaded), or a
            comma list of revisions such as ``"step1000,step8000,step143000"``.
        layers: Layer selection (``"all"``, ``"0,3,-1"``, ``"2:6"``).
        site: Site kind measured at each layer (input sites such as ``resid_pre`` included).
        text_source: Where the texts come from (``builtin:pydoc``, a ``.txt``/``.jsonl`` file).
        n_texts: How many texts are captured.
        max_length: Tokens per text at most.
        seed: Seed for subsampling and the tangent test's random bases.
        max_points: Rows subsampled for the nearest-neighbour metric (TwoNN).
        freq_texts: Texts of the source (the first ones, at least ``n_texts``) whose token counts
            are the corpus frequencies of the frequency-distance correlation. For ``tiny-lm`` on
            ``builtin:pydoc`` the default covers its whole training corpus.
        tangent_rank: Rank of the early-training tangent subspace.
        tangent_fit: How many earliest non-initial checkpoints fit the tangent subspace.
        tangent_null: Random subspaces drawn for the tangent test's null distribution.
        batch_size: Texts per forward pass.
        device: Torch device (``auto``, ``cpu``, ``cuda``...).
    """

    POSITIVE: ClassVar[tuple[str, ...]] = (
        "n_texts",
        "max_length",
        "max_points",
        "freq_texts",
        "tangent_rank",
        "tangent_fit",
        "tangent_null",
        "batch_size",
    )
    CACHE_IGNORES: ClassVar[tuple[str, ...]] = ("device", "batch_size")
    CACHE_VERSION: ClassVar[int] = 3

    model: str = "tiny-lm"
    checkpoints: str = "all"
    layers: str = "all"
    site: Site = "resid_post"
    text_source: str = "builtin:pydoc"
    n_texts: int = 200
    max_length: int = 64
    seed: int = 0
    max_points: int = 5000
    freq_texts: int = 5000
    tangent_rank: int = 8
    tangent_fit: int = 3
    tangent_null: int = 20
    batch_size: int = 16
    device: str = "auto"

    def __post_init__(self) -> None:
        self.validate()
        if not str(self.checkpoints).strip():
            raise ConfigError("checkpoints must be 'all', 'none' or a comma list of revisions")
        if not str(self.model).strip():
            raise ConfigError("model must name a model: tiny-lm, minilm, a folder or an HF id")
