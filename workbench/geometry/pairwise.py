"""Pairwise views of a point set or a graph: cosine matrices, 2-D PCA scores, hop distances.

Small dense helpers (``n`` up to a few thousand nodes) shared by the studies' metrics and their
figures, so a figure draws values computed here rather than computing its own:

* :func:`cosine_matrix`: ``(n, n)`` cosine similarity of the rows.
* :func:`pca2`: the top two principal-component scores of the centred rows, each column's sign
  fixed so that its largest-magnitude entry is positive (the same picture on every run).
* :func:`shortest_paths`: hop distance between every pair of nodes of an undirected graph
  (edges taken both ways), ``inf`` between components.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.errors import InputError


def _rows(e: Any) -> np.ndarray:
    e = np.asarray(e, dtype=np.float64)
    if e.ndim != 2:
        raise InputError(f"node embeddings need shape (n_nodes, d), got {e.shape}")
    if not np.isfinite(e).all():
        raise InputError("node embeddings hold non-finite values")
    return e


def cosine_matrix(embeddings: Any) -> np.ndarray:
    """Pairwise cosine similarity of the rows, ``(n, n)``."""
    e = _rows(embeddings)
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    if (norms == 0).any():
        raise InputError("a node embedding is the zero vector; cosine is undefined")
    x = e / norms
    return np.clip(x @ x.T, -1.0, 1.0)


def pca2(embeddings: Any) -> np.ndarray:
    """The top two principal-component scores of the rows, ``(n, 2)`` (deterministic signs)."""
    e = _rows(embeddings)
    centred = e - e.mean(0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    scores = u[:, :2] * s[:2]
    if scores.shape[1] < 2:
        scores = np.pad(scores, ((0, 0), (0, 2 - scores.shape[1])))
    flip = np.sign(scores[np.argmax(np.abs(scores), axis=0), [0, 1]])
    return scores * np.where(flip == 0, 1.0, flip)


def shortest_paths(adjacency: Any) -> np.ndarray:
    """Hop distance between every pair of nodes, ``(n, n)`` (``inf`` between components)."""
    from scipy.sparse.csgraph import shortest_path

    a = np.asarray(adjacency, dtype=np.float64)
    return shortest_path(np.maximum(a, a.T) > 0, method="D", unweighted=True)
