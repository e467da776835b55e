"""geometry.node2vec: walks follow edges, pairs stay in the window, embeddings are seeded."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import InputError
from workbench.geometry.node2vec import node2vec, random_walks, walk_pairs


def _ring(n: int) -> np.ndarray:
    a = np.zeros((n, n))
    for i in range(n):
        a[i, (i + 1) % n] = 1
    return a


def test_walks_step_along_edges_and_pairs_stay_in_the_window():
    a = _ring(12)
    walks = random_walks(a, walks_per_node=2, length=6, seed=0)
    assert walks.shape == (24, 6) and sorted(walks[:12, 0]) == list(range(12))
    assert (np.abs((walks[:, 1:] - walks[:, :-1] + 1) % 12 - 1) == 1).all()
    c, x = walk_pairs(walks, 2, np.random.default_rng(0))
    hop = np.minimum((c - x) % 12, (x - c) % 12)
    assert len(c) and hop.max() <= 2


def test_node2vec_is_seeded_and_near_nodes_are_more_similar():
    a = _ring(40)
    e = node2vec(a, 16, walks_per_node=5, length=20, window=4, seed=3)
    assert e.shape == (40, 16) and np.array_equal(
        e, node2vec(a, 16, walks_per_node=5, length=20, window=4, seed=3)
    )
    u = e / np.linalg.norm(e, axis=1, keepdims=True)
    cos = u @ u.T
    near = np.mean([cos[i, (i + 1) % 40] for i in range(40)])
    far = np.mean([cos[i, (i + 20) % 40] for i in range(40)])
    assert near > far + 0.3


def test_a_node_without_edges_is_refused():
    a = _ring(5)
    a = np.pad(a, ((0, 1), (0, 1)))
    with pytest.raises(InputError, match="node 5"):
        node2vec(a, 4)
