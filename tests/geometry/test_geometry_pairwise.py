"""workbench.geometry.pairwise against brute force: cosines, 2-D PCA scores, hop distances."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import InputError
from workbench.geometry.pairwise import cosine_matrix, pca2, shortest_paths


def test_cosine_matrix_is_every_pair_s_cosine():
    x = np.random.default_rng(0).normal(size=(7, 4))
    want = [[a @ b / np.linalg.norm(a) / np.linalg.norm(b) for b in x] for a in x]
    np.testing.assert_allclose(cosine_matrix(x), want, atol=1e-12)
    with pytest.raises(InputError, match="zero vector"):
        cosine_matrix(np.zeros((3, 2)))


def test_pca2_is_the_top_two_component_scores_with_fixed_signs():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 5)) * [5.0, 3.0, 1.0, 0.5, 0.1]
    scores = pca2(x)
    centred = x - x.mean(0)
    _, vecs = np.linalg.eigh(centred.T @ centred)
    want = centred @ vecs[:, ::-1][:, :2]
    np.testing.assert_allclose(np.abs(scores), np.abs(want), atol=1e-9)
    assert (scores[np.argmax(np.abs(scores), axis=0), [0, 1]] > 0).all()
    assert pca2(x[:, :1]).shape == (50, 2)  # one column: the second score is zero


def test_shortest_paths_counts_hops_both_ways_and_inf_between_components():
    a = np.zeros((5, 5))
    a[0, 1] = a[1, 2] = a[3, 4] = 1  # one direction only: edges count both ways
    d = shortest_paths(a)
    assert d[0, 2] == d[2, 0] == 2 and d[3, 4] == 1 and np.isinf(d[0, 3])
