"""The geometric-memory study's parameters, typed and validated (the notebook's parameters cell)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from workbench.analyses.base import StudyConfig
from workbench.analyses.geometric_memory.graphs import GraphTask, build_graph
from workbench.errors import ConfigError

Directions = Literal["forward", "both", "forward+self", "both+self"]


@dataclass(frozen=True)
class GeometricMemoryConfig(StudyConfig):
    """Parameters of the geometric-memory study.

    The defaults follow the release's tiny transformer runs (1 layer, width 32, 1 head, tied
    input/output embeddings, weight decay 0, lr 0.01 decayed to 0.001, full batch, layer norm,
    learned positions, a task token before each fact, no pause token), memorizing both edge
    directions as the release's path-finding runs do; the ingredient table varies one of these at
    a time.

    Attributes:
        graph: ``path_star``, ``grid``, ``cycle``, ``tree``, ``irregular``, ``release_grid``,
            ``release_irregular`` or an edge-list file (``u=v`` a line).
        degree: Arms of a path-star; branching of a tree.
        path_length: Hops of each arm (path-star), depth (tree), or hops of each path query.
        n_nodes: Nodes of a grid, cycle or irregular graph.
        n_layers: Transformer blocks.
        d_model: Transformer width (and the Node2Vec dimension).
        epochs: Full-batch steps of edge memorization (one step is one epoch); continued through
            warm restarts of its schedule, up to four times them, until the transformer's loss
            is within 0.01 nats of its floor.
        seed: Seeds the labels, the split, every initialization and UMAP.
        edges: Edge directions memorized: ``forward`` (as listed; outward from a path-star's
            centre) or ``both``; a ``+self`` suffix adds a self-edge ``u -> u`` per node.
        tied: Tie the input and output embeddings.
        weight_decay: AdamW weight decay of edge memorization.
        lr: Peak learning rate of edge memorization (cosine decay to a tenth).
        n_heldout: Held-out targets per fold, each with all its queries (default: a quarter of
            the targets).
        path_epochs: Full-batch steps of path fine-tuning (paths mixed with the edges);
            continued through warm restarts of its schedule, up to four times them, until every
            fine-tuning path's first step is one hop nearer its target.
        incontext_epochs: Steps of the in-context control (0 skips it).
        ingredients: Run the ingredient table (four more edge-memorization runs).
        umap: Compute UMAP projections (numba compiles UMAP on first use: ~20-60 s of CPU).
        device: Torch device (``auto``, ``cpu``, ``cuda``...).
    """

    POSITIVE: ClassVar[tuple[str, ...]] = (
        "degree",
        "path_length",
        "n_nodes",
        "n_layers",
        "d_model",
        "epochs",
        "path_epochs",
    )
    CACHE_IGNORES: ClassVar[tuple[str, ...]] = ("device",)
    CACHE_VERSION: ClassVar[int] = 5

    graph: str = "path_star"
    degree: int = 8
    path_length: int = 3
    n_nodes: int = 16
    n_layers: int = 1
    d_model: int = 32
    epochs: int = 700
    seed: int = 0
    edges: Directions = "both"
    tied: bool = True
    weight_decay: float = 0.0
    lr: float = 0.01
    n_heldout: int | None = None
    path_epochs: int = 300
    incontext_epochs: int = 300
    ingredients: bool = True
    umap: bool = True
    device: str = "auto"

    def __post_init__(self) -> None:
        self.validate()
        if not isinstance(self.graph, str) or not self.graph.strip():
            raise ConfigError(
                "graph must name a family (path_star, grid, ...) or an edge-list file"
            )
        for name in ("tied", "ingredients", "umap"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.n_heldout is not None and (
            isinstance(self.n_heldout, bool)
            or not isinstance(self.n_heldout, int)
            or self.n_heldout < 1
        ):
            raise ConfigError(
                f"n_heldout must be an integer of at least 1 or None, got {self.n_heldout!r}"
            )
        if (
            isinstance(self.incontext_epochs, bool)
            or not isinstance(self.incontext_epochs, int)
            or self.incontext_epochs < 0
        ):
            raise ConfigError(
                f"incontext_epochs must be an integer of at least 0, got {self.incontext_epochs!r}"
            )
        for name in ("lr", "weight_decay"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise ConfigError(f"{name} must be a number, got {value!r}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ConfigError(
                "lr must be positive and weight_decay at least 0, "
                f"got {self.lr}, {self.weight_decay}"
            )
        if self.seed < 0:
            raise ConfigError(f"seed must be at least 0, got {self.seed}")
        self.graph_task()  # a bad file, a disconnected graph or too many held-out paths fail here

    def graph_task(self) -> GraphTask:
        """The graph, its path queries and labels (cheap: the config builds it once to check)."""
        return build_graph(
            self.graph,
            degree=self.degree,
            path_length=self.path_length,
            n_nodes=self.n_nodes,
            n_heldout=self.n_heldout,
            seed=self.seed,
        )
