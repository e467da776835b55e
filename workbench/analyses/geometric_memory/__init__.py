"""The geometric-memory study: a transformer that memorizes a graph's edges learns its geometry.

Reproduces *Deep sequence models tend to memorize geometrically; it is unclear why* (Noroozizadeh,
Nagarajan, Rosenfeld, Kumar; arXiv 2510.26745, ICML 2026; release ``Shahriarnz14/Geometric_Memory``)
at laptop scale:

1. **Edge memorization.** A tiny GPT-2 learns the facts ``[EDGE] u -> v`` of a graph whose node
   labels are random tokens. It only ever sees single edges, yet its node embeddings come to mirror
   the whole graph: adjacent nodes point the same way (the *geometric level*), the embedding energy
   sits on the smooth (top) eigenvectors of the graph's Laplacian, and embedding distance tracks
   graph distance, as for Node2Vec and Laplacian eigenmaps.
2. **The associative control.** The same model with frozen random embeddings memorizes every edge
   too, but as a lookup of local pairs: no geometry.
3. **Path queries.** Fine-tuned on ``[PATH] target start -> path`` for some targets, the
   transformer answers held-out targets (whose edges it memorized, whose paths it never saw): the
   hard first step of an ``l``-hop path-star query becomes one step of navigation in the geometry.
   An in-context control, the same model reading a freshly relabelled graph in its prompt, stays
   near chance (Bachmann & Nagarajan, 2024).
4. **Ingredients.** Edge memorization again with one setting changed at a time from the release's
   tiny runs (untied embeddings, weight decay, both edge directions, one more layer).
5. **Any model's embeddings.** :func:`embedding_geometry` measures the same geometry on the input
   embedding table of any model :func:`workbench.load_model` gives, against a graph over its tokens
   (e.g. :func:`cooccurrence_graph` of a text source).

Our operationalizations, where the paper's exact constructions differ or are not pinned down: the
geometric level is the edge mean cosine *minus* the non-edge mean cosine (the release plots the
first term); spectral energy uses the normalized Laplacian ``I - D^-1/2 A D^-1/2`` of the
symmetrized graph, centred embeddings, and "top" means the smallest quarter of the non-trivial
eigenvalues; held-out accuracy is first-step accuracy, each query held out once across folds; the
associative control freezes the (tied) embedding table of the same transformer (the release's
control is an MLP-only model); the tied Node2Vec trains with AdamW (the release uses plain gradient
descent); random-walk Node2Vec uses ``p = q = 1`` walks and gensim's skip-gram.

Training runs to a criterion, on one CPU thread: edge memorization until the transformer's loss
is within 0.01 nats of its floor (the mean log out-degree), path fine-tuning until every
fine-tuning path's first step is one hop nearer its target, each running its configured steps
and then on through warm restarts of that schedule up to four times them; the control trains as
long as the transformer did. A training that reaches the cap first warns and is kept: the result's
``shortfalls()`` name it, ``results.json`` records it and the claims that depend on it are not
evaluable (:mod:`workbench.criteria`). The steps used are metrics (``edge_steps``,
``path_steps``). On one thread the toys do not change with the machine's core count; across CPUs
(AVX-512, AVX2, scalar kernels) floats still differ, so the paper effects are claims checked over
seeds (``study.CLAIMS``).

Layout (every study has the same rooms):

* :mod:`.config`: :class:`GeometricMemoryConfig`, built from the notebook's parameters;
* :mod:`.graphs`: graph families, path queries and folds; :mod:`.graph_files`: the release's
  file format and edge lists;
* :mod:`.sequences`: the token sequences; :mod:`.models`: the GPT-2 and tied Node2Vec;
* :mod:`.compute`: pure metrics, arrays in and numbers out;
* :mod:`.results`: frozen results with ``to_dict``/``from_dict`` and ``figure(kind=...)``;
* :mod:`.figures`: the plotly builders;
* :mod:`.collect`: the only place that trains (through :func:`workbench.train.train`);
* :mod:`.any_model`: the geometry of a loaded model's embedding table;
* :mod:`.study`: :func:`run` with a per-unit cache, :func:`metrics`, :func:`save`.

Example::

    from workbench.analyses import geometric_memory as gm
    config = gm.GeometricMemoryConfig(graph="path_star", degree=5, path_length=3)
    result = gm.run(config, cache_dir="runs/cache")
    result.figure("spectral_energy").show()
    result.metrics()["geometric_level"]
"""

from workbench.analyses.geometric_memory.any_model import cooccurrence_graph, embedding_geometry
from workbench.analyses.geometric_memory.compute import (
    cosine_matrix,
    distance_spearman,
    edge_recovery,
    first_step_scores,
    geometric_level,
    laplacian_eigenmap,
    laplacian_spectrum,
    measure_embeddings,
    recovery_ceiling,
    shortest_paths,
    spectral_energy,
    top_energy,
    top_k,
)
from workbench.analyses.geometric_memory.config import GeometricMemoryConfig
from workbench.analyses.geometric_memory.graph_files import (
    RELEASE_GRAPHS,
    read_edge_file,
    read_path_file,
)
from workbench.analyses.geometric_memory.graphs import FAMILIES, GraphTask, build_graph
from workbench.analyses.geometric_memory.results import (
    FIGURES,
    EmbeddingGeometry,
    GeometricMemoryResult,
    Ingredient,
    ModelRun,
    PathAccuracy,
    TrainingCurve,
)
from workbench.analyses.geometric_memory.study import ANALYSIS, STUDY, ingredient_settings, run
from workbench.analyses.geometric_memory.summary import CLAIMS, METRIC_KEYS

__all__ = [
    "ANALYSIS",
    "CLAIMS",
    "FAMILIES",
    "FIGURES",
    "METRIC_KEYS",
    "RELEASE_GRAPHS",
    "STUDY",
    "EmbeddingGeometry",
    "GeometricMemoryConfig",
    "GeometricMemoryResult",
    "GraphTask",
    "Ingredient",
    "ModelRun",
    "PathAccuracy",
    "TrainingCurve",
    "build_graph",
    "cooccurrence_graph",
    "cosine_matrix",
    "distance_spearman",
    "edge_recovery",
    "embedding_geometry",
    "first_step_scores",
    "geometric_level",
    "ingredient_settings",
    "laplacian_eigenmap",
    "laplacian_spectrum",
    "measure_embeddings",
    "read_edge_file",
    "read_path_file",
    "recovery_ceiling",
    "run",
    "shortest_paths",
    "spectral_energy",
    "top_energy",
    "top_k",
]
