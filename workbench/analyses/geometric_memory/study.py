"""The geometric-memory study end to end: ``run(config, cache_dir)`` and ``results.json``.

Every unit is cached with :class:`workbench.cache.UnitCache` (the transformer with its path
fine-tuning, the control, each baseline, the in-context control, each ingredient row, each UMAP), so
a rerun with the same config trains nothing; changing only ``umap`` or ``ingredients`` reuses every
trained model.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from workbench.analyses.base import Study
from workbench.analyses.geometric_memory import collect, compute
from workbench.analyses.geometric_memory.config import GeometricMemoryConfig
from workbench.analyses.geometric_memory.graphs import GraphTask
from workbench.analyses.geometric_memory.models import TransformerSpec
from workbench.analyses.geometric_memory.results import (
    EmbeddingGeometry,
    GeometricMemoryResult,
    Ingredient,
    ModelRun,
    PathAccuracy,
)
from workbench.analyses.geometric_memory.sequences import vocab_size
from workbench.cache import UnitCache
from workbench.criteria import report
from workbench.devices import torch_threads

log = logging.getLogger(__name__)

ANALYSIS = "geometric_memory"

INGREDIENT_DECAY = 0.1
"""Weight decay of the ingredient table's weight-decay row."""
PATH_LR = 1e-2
"""Peak learning rate of path fine-tuning (1e-3 fitted the fine-tuning paths but left held-out
ones at chance on the default path-star)."""


def _spec(config: GeometricMemoryConfig, graph: GraphTask, **changes: Any) -> TransformerSpec:
    longest = max(len(p) for p in graph.paths)
    spec = TransformerSpec(
        vocab_size(graph.n_nodes), longest + 3, config.d_model, config.n_layers, config.tied
    )
    return replace(spec, **changes)


def _paths_over_folds(
    run: collect.EdgeRun,
    graph: GraphTask,
    spec: TransformerSpec,
    config: GeometricMemoryConfig,
    device: str,
    progress: bool,
    name: str = "transformer",
    steps: int | None = None,
) -> PathAccuracy:
    """Held-out first-step accuracy over every fold (each query held out once).

    The transformer fine-tunes each fold until it fits its fine-tuning paths (see
    :func:`collect.finetune_paths`); with ``steps`` given (the control: the most steps the
    transformer needed) each fold trains exactly that long, fitted or not.
    """
    correct: list[bool] = []
    chance: list[float] = []
    fitted: list[float] = []
    used: list[int] = []
    for train_paths, test_paths in graph.folds():
        fold = replace(
            graph, paths=(*train_paths, *test_paths), n_heldout=len(test_paths), fixed_split=True
        )
        acc = collect.finetune_paths(
            run,
            fold,
            spec,
            directions=config.edges,
            epochs=config.path_epochs if steps is None else steps,
            lr=PATH_LR,
            seed=config.seed,
            device=device,
            progress=progress,
            converge=steps is None,
            desc=f"{name} paths",
        )
        correct += acc.correct
        chance += acc.chance
        fitted.append(acc.train_accuracy or 0.0)
        used.append(acc.steps or config.path_epochs)
    return PathAccuracy(tuple(correct), tuple(chance), float(np.mean(fitted)), max(used))


def _model_run(
    name: str,
    config: GeometricMemoryConfig,
    graph: GraphTask,
    frozen: bool,
    geometry: dict[str, Any],
    device: str,
    progress: bool,
    steps: int | None = None,
    path_steps: int | None = None,
) -> ModelRun:
    """Edge memorization, its geometry, then path fine-tuning over every fold.

    The control (``frozen``) trains as long as the transformer did: ``steps`` edge-memorization
    steps to start from instead of ``config.epochs`` (it must still recover every fact it can),
    and exactly ``path_steps`` fine-tuning steps per fold.
    """
    spec = _spec(config, graph, frozen=frozen)
    run = collect.memorize_edges(
        graph,
        spec,
        directions=config.edges,
        epochs=config.epochs if steps is None else steps,
        lr=config.lr,
        weight_decay=config.weight_decay,
        seed=config.seed,
        device=device,
        progress=progress,
        desc=f"{name} edges",
        criterion="recovery" if frozen else "floor",
    )
    geo = compute.measure_embeddings(
        name, run.embeddings, graph.adjacency, edge_recovery=run.recovery, **geometry
    )
    paths = _paths_over_folds(
        run, graph, spec, config, device, progress, name, path_steps if frozen else None
    )
    return ModelRun(geo, run.curve, paths, run.excess_loss)


def ingredient_settings(config: GeometricMemoryConfig) -> list[tuple[str, dict[str, Any]]]:
    """The ingredient table's rows: the release's tiny setting, then one change each."""
    base = {"tied": True, "weight_decay": 0.0, "directions": "forward", "n_layers": config.n_layers}
    return [
        ("release (forward, tied)", base),
        ("untied embeddings", {**base, "tied": False}),
        (f"weight decay {INGREDIENT_DECAY:g}", {**base, "weight_decay": INGREDIENT_DECAY}),
        ("both directions", {**base, "directions": "both"}),
        (f"{config.n_layers + 1} layers", {**base, "n_layers": config.n_layers + 1}),
    ]


def _ingredient(
    name: str,
    settings: dict[str, Any],
    config: GeometricMemoryConfig,
    graph: GraphTask,
    geometry: dict[str, Any],
    device: str,
    progress: bool,
) -> Ingredient:
    spec = _spec(config, graph, tied=settings["tied"], n_layers=settings["n_layers"])
    run = collect.memorize_edges(
        graph,
        spec,
        directions=settings["directions"],
        epochs=config.epochs,
        lr=config.lr,
        weight_decay=settings["weight_decay"],
        seed=config.seed,
        device=device,
        progress=progress,
        desc=name,
        criterion=None,
    )
    geo = compute.measure_embeddings(
        name, run.embeddings, graph.adjacency, edge_recovery=run.recovery, **geometry
    )
    return _row(name, settings, geo)


def _row(name: str, settings: dict[str, Any], geo: EmbeddingGeometry) -> Ingredient:
    return Ingredient(
        name,
        settings["tied"],
        float(settings["weight_decay"]),
        settings["directions"],
        settings["n_layers"],
        float(geo.edge_recovery or 0.0),
        geo.geometric_level,
        geo.spectral_top_energy,
        geo.distance_spearman,
    )


def run(
    config: GeometricMemoryConfig,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> GeometricMemoryResult:
    """The whole study on one graph.

    Args:
        config: The study's parameters.
        cache_dir: Folder of the per-unit cache (``None``: compute everything, store nothing).
        progress: Show progress bars.

    Warns (:class:`~workbench.errors.CriterionWarning`) once per training that reached its cap
    before its criterion (``result.shortfalls()``); the result is returned all the same, with
    the claims that depend on it not evaluable.
    """
    with single_thread():
        result = _run(config, cache_dir, progress)
    report(result.shortfalls())
    return result


@contextmanager
def single_thread() -> Iterator[None]:
    """Torch on one CPU thread inside the block (every toy's training and evaluation).

    The thread count changes how float sums are split; on one thread the study's numbers do not
    depend on the machine's cores, nor on whether tests run in parallel.
    """
    with torch_threads(collect.THREADS):
        yield


def _run(
    config: GeometricMemoryConfig,
    cache_dir: str | os.PathLike[str] | None,
    progress: bool,
) -> GeometricMemoryResult:
    from workbench.models.loading import resolve_device

    graph = config.graph_task()
    device = str(resolve_device(config.device))
    cache = UnitCache(cache_dir, config.key("umap", "ingredients", "incontext_epochs"))
    adjacency = graph.adjacency
    values, vectors = compute.laplacian_spectrum(adjacency)
    geometry = {"eigenvectors": vectors, "distances": compute.shortest_paths(adjacency)}

    transformer = cache.get(
        "transformer",
        lambda: _model_run("transformer", config, graph, False, geometry, device, progress),
        ModelRun.from_dict,
    )
    control = cache.get(
        "control",
        lambda: _model_run(
            "control",
            config,
            graph,
            True,
            geometry,
            device,
            progress,
            transformer.steps,
            transformer.paths.steps if transformer.paths else None,
        ),
        ModelRun.from_dict,
    )
    baselines = {
        "node2vec": cache.get(
            "node2vec",
            lambda: compute.measure_embeddings(
                "node2vec",
                collect.train_tied_node2vec(graph, config.d_model, seed=config.seed, device=device),
                adjacency,
                **geometry,
            ),
            EmbeddingGeometry.from_dict,
        ),
        "node2vec_walks": cache.get(
            "node2vec_walks",
            lambda: compute.measure_embeddings(
                "node2vec_walks",
                collect.train_walk_node2vec(graph, config.d_model, seed=config.seed),
                adjacency,
                **geometry,
            ),
            EmbeddingGeometry.from_dict,
        ),
        "eigenmap": compute.measure_embeddings(
            "eigenmap", compute.laplacian_eigenmap(adjacency, config.d_model), adjacency, **geometry
        ),
    }
    notes = list(graph.notes)
    incontext = None
    if config.incontext_epochs:
        incontext = cache.get(
            f"incontext-{config.incontext_epochs}",
            lambda: collect.train_incontext(
                graph,
                _spec(
                    config,
                    graph,
                    positions=3 * len(graph.directed_edges(config.edges))
                    + max(len(p) for p in graph.paths)
                    + 2,
                ),
                directions=config.edges,
                steps=config.incontext_epochs,
                seed=config.seed,
                device=device,
                progress=progress,
            ),
            PathAccuracy.from_dict,
        )
    else:
        notes.append("in-context control skipped (incontext_epochs=0)")
    rows: list[Ingredient] = []
    if config.ingredients:
        for name, settings in ingredient_settings(config):
            same = (
                settings["tied"] == config.tied
                and settings["weight_decay"] == config.weight_decay
                and settings["directions"] == config.edges
                and settings["n_layers"] == config.n_layers
            )
            if same:  # the main transformer already is this row
                rows.append(_row(name, settings, transformer.geometry))
                continue
            unit = "ingredient-" + "-".join(f"{k}={v}" for k, v in sorted(settings.items()))
            rows.append(
                cache.get(
                    unit,
                    lambda n=name, s=settings: _ingredient(
                        n, s, config, graph, geometry, device, progress
                    ),
                    Ingredient.from_dict,
                )
            )
    if config.umap:
        transformer, control, baselines = _with_umap(cache, config, transformer, control, baselines)
    else:
        notes.append("UMAP skipped (umap=False): projections show PCA only")
    log.info("cache: %d hit(s), %d computed", len(cache.hits), len(cache.misses))
    return GeometricMemoryResult(
        graph,
        values[1:],
        compute.top_k(graph.n_nodes),
        transformer,
        control,
        baselines,
        incontext,
        tuple(rows),
        tuple(notes),
        compute.recovery_ceiling(graph.directed_edges(config.edges), 5),
    )


class _Coordinates:
    """A cacheable ``(n, 2)`` array."""

    def __init__(self, xy: Any) -> None:
        self.xy = np.asarray(xy, dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {"xy": self.xy.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> _Coordinates:
        return cls(data["xy"])


def _with_umap(
    cache: UnitCache,
    config: GeometricMemoryConfig,
    transformer: ModelRun,
    control: ModelRun,
    baselines: dict[str, EmbeddingGeometry],
):
    def attach(geo: EmbeddingGeometry) -> EmbeddingGeometry:
        coords = cache.get(
            f"umap-{geo.name}",
            lambda: _Coordinates(collect.umap_coordinates(geo.embeddings, seed=config.seed)),
            _Coordinates.from_dict,
        )
        return replace(geo, umap=coords.xy)

    return (
        replace(transformer, geometry=attach(transformer.geometry)),
        replace(control, geometry=attach(control.geometry)),
        {k: attach(v) for k, v in baselines.items()},
    )


STUDY = Study(
    name=ANALYSIS,
    config=GeometricMemoryConfig,
    result=GeometricMemoryResult,
    run=run,
    paper="Deep sequence models tend to memorize geometrically (arXiv 2510.26745)",
)
"""The geometric-memory study's record in :mod:`workbench.analyses.registry`."""
