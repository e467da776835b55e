"""Pure steps of the geometric-memory study: arrays in, numbers and results out.

Every function computes in float64 on node embeddings ``E`` of shape ``(n_nodes, d)`` given in the
graph's canonical node order, and an undirected adjacency matrix.

* :func:`laplacian_spectrum`: eigenpairs of the normalized Laplacian
  ``L = I - D^-1/2 A D^-1/2`` of the symmetrized adjacency (edges taken both ways), eigenvalues
  ascending; the first eigenvector (``D^1/2 1``, eigenvalue 0) is the trivial one. Small
  eigenvalues are the smooth, "top" directions of the graph (the top ones of ``D^-1/2 A D^-1/2``).
* :func:`spectral_energy`: ``||E^T u_i||^2`` for every eigenvector ``u_i`` of the centred
  embeddings (a shared offset of every row is no geometry), normalized to sum to 1 over the
  non-trivial eigenvectors; :func:`top_energy` is the share on the ``k`` smallest non-trivial
  ones. Random embeddings spread their energy evenly (share ``k / (n - 1)``); a geometric memory
  concentrates it on the top, as Laplacian eigenmaps and Node2Vec do.
* :func:`geometric_level`: mean cosine of the endpoints of edges minus the mean cosine of
  non-adjacent pairs (the release plots the first term alone; the difference removes a shared
  offset that lifts every cosine).
* :func:`distance_spearman`: Spearman correlation, over all node pairs, between the embeddings'
  cosine distance and the graph's shortest-path distance.
* :func:`edge_recovery`: the share of memorized directed edges ``u -> v`` whose ``v`` is among the
  model's top-k next-token predictions after ``u``.
* :func:`first_step_scores`: whether each predicted first step of a path query is one hop nearer
  its target (a step of *some* shortest path: on a grid several neighbours can be), and its
  chance level, the share of the start's neighbours that are.

The pairwise views the figures also draw (:func:`cosine_matrix`, :func:`pca2`,
:func:`shortest_paths`) are :mod:`workbench.geometry.pairwise`'s, imported here: this module builds
the results, so the figures (which the results draw) cannot import it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.analyses.geometric_memory.results import EmbeddingGeometry
from workbench.errors import InputError
from workbench.geometry.pairwise import cosine_matrix, pca2, shortest_paths

__all__ = [  # cosine_matrix, pca2 and shortest_paths live in workbench.geometry.pairwise
    "cosine_matrix",
    "distance_spearman",
    "edge_recovery",
    "first_step_scores",
    "geometric_level",
    "laplacian_eigenmap",
    "laplacian_spectrum",
    "measure_embeddings",
    "pca2",
    "recovery_ceiling",
    "shortest_paths",
    "spectral_energy",
    "top_energy",
    "top_k",
]


def _embeddings(e: Any, n: int | None = None) -> np.ndarray:
    e = np.asarray(e, dtype=np.float64)
    if e.ndim != 2 or (n is not None and e.shape[0] != n):
        raise InputError(f"node embeddings need shape (n_nodes={n}, d), got {e.shape}")
    if not np.isfinite(e).all():
        raise InputError("node embeddings hold non-finite values")
    return e


def laplacian_spectrum(adjacency: Any) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors (columns) of ``I - D^-1/2 A D^-1/2``.

    Args:
        adjacency: ``(n, n)`` adjacency; it is symmetrized (``max(A, A^T)``) and its diagonal
            dropped.

    Raises:
        InputError: A node without edges (the normalized Laplacian is undefined there).
    """
    a = np.asarray(adjacency, dtype=np.float64)
    a = np.maximum(a, a.T)
    np.fill_diagonal(a, 0.0)
    deg = a.sum(1)
    if (deg <= 0).any():
        raise InputError(
            f"node {int(np.argmin(deg))} has no edge; the Laplacian needs none isolated"
        )
    s = 1.0 / np.sqrt(deg)
    lap = np.eye(len(a)) - s[:, None] * a * s[None, :]
    values, vectors = np.linalg.eigh(lap)
    # a deterministic sign per eigenvector: its largest-magnitude entry positive
    flip = np.sign(vectors[np.argmax(np.abs(vectors), axis=0), np.arange(len(a))])
    return values, vectors * np.where(flip == 0, 1.0, flip)


def spectral_energy(embeddings: Any, eigenvectors: Any) -> np.ndarray:
    """Energy of the centred embeddings on each non-trivial eigenvector, summing to 1.

    Args:
        embeddings: ``(n, d)``.
        eigenvectors: ``(n, n)`` orthonormal columns from :func:`laplacian_spectrum`, the trivial
            one first.

    Returns:
        ``(n - 1,)``: ``||E_c^T u_i||^2 / sum_j ||E_c^T u_j||^2`` for ``i = 1..n-1``.
    """
    u = np.asarray(eigenvectors, dtype=np.float64)
    e = _embeddings(embeddings, u.shape[0])
    centred = e - e.mean(0)
    energy = ((u.T @ centred) ** 2).sum(1)[1:]
    total = energy.sum()
    if total <= 0:
        raise InputError("embeddings are identical for every node: no spectral energy")
    return energy / total


def top_k(n_nodes: int) -> int:
    """How many non-trivial eigenvectors count as the top: a quarter of them, at least one."""
    return max(1, math.ceil((n_nodes - 1) / 4))


def top_energy(energy: Any, k: int) -> float:
    """Share of the energy on the ``k`` smallest non-trivial eigenvectors."""
    energy = np.asarray(energy, dtype=np.float64)
    if not 1 <= k <= len(energy):
        raise InputError(f"k={k} outside 1..{len(energy)}")
    return float(energy[:k].sum() / energy.sum())


def geometric_level(embeddings: Any, adjacency: Any) -> float:
    """Mean cosine of edge endpoints minus the mean cosine of non-adjacent distinct pairs."""
    a = np.asarray(adjacency, dtype=np.float64)
    a = np.maximum(a, a.T) > 0
    cos = cosine_matrix(_embeddings(embeddings, len(a)))
    iu = np.triu_indices(len(a), 1)
    edge = a[iu]
    if edge.all() or not edge.any():
        raise InputError("geometric level needs both edges and non-edges")
    return float(cos[iu][edge].mean() - cos[iu][~edge].mean())


def distance_spearman(embeddings: Any, distances: Any) -> float:
    """Spearman correlation of cosine distance with graph distance over all node pairs."""
    from scipy.stats import spearmanr

    d = np.asarray(distances, dtype=np.float64)
    cos = cosine_matrix(_embeddings(embeddings, len(d)))
    iu = np.triu_indices(len(d), 1)
    keep = np.isfinite(d[iu])
    graph, emb = d[iu][keep], (1.0 - cos)[iu][keep]
    if np.ptp(graph) == 0 or np.ptp(emb) == 0:
        return float("nan")
    return float(spearmanr(emb, graph).statistic)


def edge_recovery(top: Any, edges: Sequence[tuple[int, int]]) -> float:
    """Share of directed edges ``(u, v)`` with ``v`` in ``top[u]`` (a row of top-k predictions)."""
    top = np.asarray(top)
    if not len(edges):
        raise InputError("edge recovery needs at least one edge")
    rows = [set(r.tolist()) for r in top]
    return float(np.mean([v in rows[u] for u, v in edges]))


def first_step_scores(
    adjacency: Any, queries: Sequence[tuple[int, int]], predicted: Sequence[int]
) -> tuple[list[bool], list[float]]:
    """Scores predicted first steps of path queries against every shortest path.

    A step is right when it goes to a neighbour of the start that is one hop nearer the target.
    On a tree that neighbour is unique (the query's own path); on a grid a query's listed path is
    one of several, and any of its start's nearer neighbours is an equally right answer.

    Args:
        adjacency: ``(n, n)`` undirected adjacency (the diagonal, a self-edge, is no step).
        queries: ``(start, target)`` per query, ``start != target``.
        predicted: The predicted next node per query (any value outside ``0..n-1``, such as a
            special token's id, is a wrong step).

    Returns:
        ``(correct, chance)``: one flag per query, and the chance that a uniformly random
        neighbour of the start is right (nearer neighbours over all neighbours).
    """
    a = np.asarray(adjacency) != 0
    a = a | a.T  # the graph is undirected, however its facts were listed
    np.fill_diagonal(a, False)
    if len(queries) != len(predicted):
        raise InputError(f"{len(queries)} queries but {len(predicted)} predicted steps")
    dist = shortest_paths(a.astype(float))
    n = len(a)
    correct, chance = [], []
    for (start, target), step in zip(queries, predicted, strict=True):
        neighbours = np.flatnonzero(a[start])
        if start == target or not len(neighbours) or not np.isfinite(dist[start, target]):
            raise InputError(f"no first step leads from node {start} towards node {target}")
        nearer = set(neighbours[dist[neighbours, target] == dist[start, target] - 1].tolist())
        correct.append(0 <= int(step) < n and int(step) in nearer)
        chance.append(len(nearer) / len(neighbours))
    return correct, chance


def recovery_ceiling(edges: Sequence[tuple[int, int]], k: int = 5) -> float:
    """The best top-``k`` edge recovery the directed facts allow.

    A node with more than ``k`` memorized successors (a path-star's centre of degree 8) can have
    only ``k`` of them among its top ``k`` predictions.
    """
    if not len(edges):
        raise InputError("edge recovery needs at least one edge")
    out = np.bincount(np.asarray([u for u, _ in edges]))
    return float(np.minimum(out, k).sum() / len(edges))


def laplacian_eigenmap(adjacency: Any, dim: int) -> np.ndarray:
    """Laplacian eigenmap (Belkin & Niyogi, 2003), ``(n, min(dim, n - 1))``.

    ``D^-1/2`` times the ``dim`` smallest non-trivial eigenvectors of the normalized Laplacian.
    """
    a = np.asarray(adjacency, dtype=np.float64)
    _, vectors = laplacian_spectrum(a)
    deg = np.maximum(a, a.T).sum(1)
    k = min(dim, len(a) - 1)
    return vectors[:, 1 : 1 + k] / np.sqrt(deg)[:, None]


def measure_embeddings(
    name: str,
    embeddings: Any,
    adjacency: Any,
    *,
    eigenvectors: Any | None = None,
    distances: Any | None = None,
    k: int | None = None,
    edge_recovery: float | None = None,
    umap: Any | None = None,
) -> EmbeddingGeometry:
    """Every geometry metric of one set of node embeddings against the graph.

    Args:
        name: The embeddings' name.
        embeddings: ``(n, d)`` in canonical node order.
        adjacency: ``(n, n)`` adjacency.
        eigenvectors: Precomputed :func:`laplacian_spectrum` eigenvectors (computed if absent).
        distances: Precomputed :func:`shortest_paths` (computed if absent).
        k: Top eigenvectors counted (default :func:`top_k`).
        edge_recovery: The model's top-5 recovery, recorded as given.
        umap: UMAP coordinates, recorded as given.
    """
    a = np.asarray(adjacency, dtype=np.float64)
    e = _embeddings(embeddings, len(a))
    vectors = laplacian_spectrum(a)[1] if eigenvectors is None else eigenvectors
    dist = shortest_paths(a) if distances is None else distances
    energy = spectral_energy(e, vectors)
    return EmbeddingGeometry(
        name=name,
        embeddings=e,
        geometric_level=geometric_level(e, a),
        spectral_energy=energy,
        spectral_top_energy=top_energy(energy, top_k(len(a)) if k is None else k),
        distance_spearman=distance_spearman(e, dist),
        edge_recovery=edge_recovery,
        umap=umap,
    )
