"""The geometric-memory study's results: frozen, typed, JSON round-trippable, each with its figures.

``to_dict()`` gives plain JSON data and ``from_dict()`` rebuilds the object; that pair is also the
per-unit cache format (:class:`workbench.cache.UnitCache`). :class:`GeometricMemoryResult` draws
every figure through ``figure(kind=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from workbench.analyses.base import StudyResult
from workbench.analyses.geometric_memory import summary
from workbench.analyses.geometric_memory.graphs import GraphTask
from workbench.arrays import frozen, frozen_or_none
from workbench.claims import Claim
from workbench.codec import Record
from workbench.criteria import Shortfall
from workbench.errors import InputError

if TYPE_CHECKING:
    import plotly.graph_objects as go

FIGURES = ("projections", "spectral_energy", "similarity", "training", "ingredients")
"""Every figure kind of :meth:`GeometricMemoryResult.figure`, in notebook order."""


@dataclass(frozen=True)
class EmbeddingGeometry(Record):
    """The geometry of one set of node embeddings against the graph.

    Attributes:
        name: Which embeddings (``transformer``, ``control``, ``node2vec``, ``node2vec_walks``,
            ``eigenmap``, or a model's name).
        embeddings: ``(n_nodes, d)`` in canonical node order.
        geometric_level: Edge minus non-edge mean cosine.
        spectral_energy: ``(n_nodes - 1,)`` energy share per non-trivial Laplacian eigenvector,
            eigenvalues ascending.
        spectral_top_energy: Share on the top ``k`` of them (see ``compute.top_k``).
        distance_spearman: Spearman of cosine distance with graph distance.
        edge_recovery: Top-5 recovery of the memorized edges (models that predict tokens only).
        umap: ``(n_nodes, 2)`` UMAP coordinates, when computed.
    """

    name: str
    embeddings: np.ndarray = field(repr=False)
    geometric_level: float
    spectral_energy: np.ndarray = field(repr=False)
    spectral_top_energy: float
    distance_spearman: float
    edge_recovery: float | None = None
    umap: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        e = frozen(self.embeddings)
        energy = frozen(self.spectral_energy)
        if e.ndim != 2 or energy.shape != (e.shape[0] - 1,):
            raise InputError(
                f"{self.name}: embeddings {e.shape} need spectral energy of shape "
                f"({e.shape[0] - 1},), got {energy.shape}"
            )
        umap = frozen_or_none(self.umap)
        if umap is not None and umap.shape != (e.shape[0], 2):
            raise InputError(f"{self.name}: UMAP coordinates {umap.shape}, need ({e.shape[0]}, 2)")
        object.__setattr__(self, "embeddings", e)
        object.__setattr__(self, "spectral_energy", energy)
        object.__setattr__(self, "umap", umap)

    def scalars(self) -> dict[str, float | None]:
        """The four numbers (for tables and ``results.json``)."""
        return {
            "edge_recovery": self.edge_recovery,
            "geometric_level": self.geometric_level,
            "spectral_top_energy": self.spectral_top_energy,
            "distance_spearman": self.distance_spearman,
        }


@dataclass(frozen=True)
class TrainingCurve(Record):
    """Memorization and geometry over edge-memorization training.

    Attributes:
        steps: Steps at which the model was evaluated.
        edge_recovery: Top-5 edge recovery at each step.
        geometric_level: Geometric level of the node embeddings at each step.
        loss: Training loss at each step (``nan`` at step 0, before any update).
    """

    steps: tuple[int, ...]
    edge_recovery: tuple[float, ...]
    geometric_level: tuple[float, ...]
    loss: tuple[float, ...]

    def __post_init__(self) -> None:
        for name in ("steps", "edge_recovery", "geometric_level", "loss"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        n = len(self.steps)
        if not n or any(
            len(getattr(self, k)) != n for k in ("edge_recovery", "geometric_level", "loss")
        ):
            raise InputError("a training curve needs one value of each series per step")


@dataclass(frozen=True)
class PathAccuracy(Record):
    """First-step accuracy of path queries.

    Attributes:
        correct: One flag per query: the model's first step after the start is one hop nearer
            the target (the path's own step on a tree; any shortest-path step on a grid).
        chance: One chance level per query: the share of the start's neighbours one hop nearer
            the target (``1 / degree(start)`` on a tree).
        train_accuracy: The same on the fine-tuning queries (how well they were fitted).
        steps: Fine-tuning steps trained (the most over folds), when fine-tuned.
    """

    correct: tuple[bool, ...]
    chance: tuple[float, ...]
    train_accuracy: float | None = None
    steps: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "correct", tuple(bool(c) for c in self.correct))
        object.__setattr__(self, "chance", tuple(float(c) for c in self.chance))
        if not self.correct or len(self.correct) != len(self.chance):
            raise InputError("path accuracy needs one chance level per query, and a query")

    @property
    def accuracy(self) -> float:
        """Share of queries answered with the right first step."""
        return float(np.mean(self.correct))

    @property
    def chance_accuracy(self) -> float:
        """Mean chance level over the queries."""
        return float(np.mean(self.chance))


@dataclass(frozen=True)
class ModelRun(Record):
    """One trained sequence model: its embeddings' geometry, curve and path queries.

    Attributes:
        geometry: The node embeddings' geometry after edge memorization.
        curve: Memorization and geometry during edge memorization.
        paths: Held-out path queries after path fine-tuning (``None`` when not run).
        excess_loss: Final edge-memorization loss above its floor, nats (how converged).
    """

    geometry: EmbeddingGeometry
    curve: TrainingCurve
    paths: PathAccuracy | None = None
    excess_loss: float | None = None

    @property
    def steps(self) -> int:
        """Edge-memorization steps trained."""
        return int(self.curve.steps[-1])


@dataclass(frozen=True)
class Ingredient:
    """One row of the ingredient table: edge memorization with one setting changed.

    Attributes:
        name: What changed (``release`` for the release's tiny setting itself).
        tied: Input and output embeddings tied.
        weight_decay: AdamW weight decay.
        directions: ``forward`` or ``both`` edge directions memorized.
        n_layers: Transformer blocks.
        geometry: The resulting node-embedding geometry (embeddings dropped to keep it small).
    """

    name: str
    tied: bool
    weight_decay: float
    directions: str
    n_layers: int
    edge_recovery: float
    geometric_level: float
    spectral_top_energy: float
    distance_spearman: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (also the cache format)."""
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ingredient:
        """Inverse of :meth:`to_dict`."""
        spearman = data["distance_spearman"]
        return cls(
            data["name"],
            bool(data["tied"]),
            float(data["weight_decay"]),
            data["directions"],
            int(data["n_layers"]),
            float(data["edge_recovery"]),
            float(data["geometric_level"]),
            float(data["spectral_top_energy"]),
            float("nan") if spearman is None else float(spearman),
        )


@dataclass(frozen=True, repr=False)
class GeometricMemoryResult(Record, StudyResult):
    """The whole study on one graph.

    Attributes:
        graph: The graph task (edges, paths, labels).
        eigenvalues: Non-trivial normalized-Laplacian eigenvalues, ascending, ``(n_nodes - 1,)``.
        top_k: How many of them count as the top for ``spectral_top_energy``.
        transformer: The edge-memorizing transformer, fine-tuned on paths.
        control: The same model with frozen random embeddings (associative memory).
        baselines: Embeddings without a sequence model: the paper's tied Node2Vec, random-walk
            Node2Vec and the Laplacian eigenmap, by name.
        incontext: First-step accuracy of a transformer that reads a fresh relabelled graph in its
            prompt (``None`` when not run).
        ingredients: One row per setting of the ingredient table.
        notes: What was skipped or noticed, in plain words.
        recovery_ceiling: The best top-5 edge recovery the memorized facts allow (below 1 when a
            node has more than five memorized successors).
    """

    STUDY: ClassVar[str] = "geometric_memory"
    CLAIMS: ClassVar[tuple[Claim, ...]] = summary.CLAIMS
    METRIC_KEYS: ClassVar[tuple[str, ...]] = summary.METRIC_KEYS
    FIGURES: ClassVar[tuple[str, ...]] = FIGURES
    MAIN_FIGURE: ClassVar[str] = "spectral_energy"

    graph: GraphTask
    eigenvalues: np.ndarray = field(repr=False)
    top_k: int
    transformer: ModelRun
    control: ModelRun
    baselines: dict[str, EmbeddingGeometry] = field(repr=False)
    incontext: PathAccuracy | None = None
    ingredients: tuple[Ingredient, ...] = ()
    notes: tuple[str, ...] = ()
    recovery_ceiling: float = 1.0

    def __post_init__(self) -> None:
        n = self.graph.n_nodes
        values = frozen(self.eigenvalues)
        if values.shape != (n - 1,):
            raise InputError(
                f"{values.shape} eigenvalues for a graph of {n} nodes; need ({n - 1},)"
            )
        object.__setattr__(self, "eigenvalues", values)
        object.__setattr__(self, "ingredients", tuple(self.ingredients))
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "baselines", dict(self.baselines))
        for geo in self.geometries().values():
            if geo.embeddings.shape[0] != n:
                raise InputError(f"{geo.name} has {geo.embeddings.shape[0]} rows for {n} nodes")

    def geometries(self) -> dict[str, EmbeddingGeometry]:
        """Every set of node embeddings, by name (the transformer's first)."""
        return {
            "transformer": self.transformer.geometry,
            "control": self.control.geometry,
            **self.baselines,
        }

    def figure_kinds(self) -> list[str]:
        """The figure kinds this result can draw."""
        return [k for k in FIGURES if k != "ingredients" or self.ingredients]

    def ingredient_table(self) -> str:
        """The ingredient table as fixed-width text (the notebook prints it)."""
        head = f"{'setting':<22}{'recovery':>9}{'geo level':>10}{'top energy':>11}{'spearman':>9}"
        rows = [head]
        for r in self.ingredients:
            rows.append(
                f"{r.name:<22}{r.edge_recovery:>9.3f}{r.geometric_level:>10.3f}"
                f"{r.spectral_top_energy:>11.3f}{r.distance_spearman:>9.3f}"
            )
        return "\n".join(rows)

    def compute_metrics(self) -> dict[str, Any]:
        """The ``results.json`` metrics (see :mod:`workbench.analyses.geometric_memory.summary`)."""
        return summary.metrics(self)

    def shortfalls(self) -> tuple[Shortfall, ...]:
        """Edge memorization or path fine-tuning that missed its criterion (read from metrics)."""
        return summary.shortfalls(self.metrics())

    def figure_builders(self) -> dict[str, Callable[[Any], go.Figure]]:
        """Figure kind to builder (:mod:`workbench.analyses.geometric_memory.figures`)."""
        from workbench.analyses.geometric_memory import figures

        return figures.BUILDERS

    def provenance(self) -> dict[str, Any]:
        """The model is the study's own: a sequence model trained here on the graph."""
        graph = self.graph
        model = f"sequence model trained here on {graph.name} ({graph.n_nodes} nodes)"
        return {"model": model, "revision": None}

    def record_model(self, config: Any) -> str:
        """``results.json`` names the trained transformer's shape."""
        return f"gpt2 {config.n_layers}x{config.d_model} (trained here)"
