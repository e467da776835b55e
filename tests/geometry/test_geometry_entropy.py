"""knn_entropy against the closed-form entropy of a Gaussian, and its on-manifold behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import ConfigError, InputError
from workbench.geometry import knn_entropy, twonn


def _gaussian_entropy(cov: np.ndarray) -> float:
    d = cov.shape[0]
    return 0.5 * (d * np.log(2 * np.pi * np.e) + np.linalg.slogdet(cov)[1])


@pytest.mark.parametrize("k", [1, 3])
def test_full_dimension_matches_gaussian_closed_form(k):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3))
    cov = a @ a.T + 0.5 * np.eye(3)
    x = rng.multivariate_normal(np.zeros(3), cov, size=20000)
    assert knn_entropy(x, k=k, dim=3) == pytest.approx(_gaussian_entropy(cov), abs=0.03)


def test_high_dimension_uses_the_exact_search():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4000, 16)) * 0.5  # above the KD-tree threshold
    expected = _gaussian_entropy(0.25 * np.eye(16))
    # KL is biased upwards in 16 dimensions at this n; it must still be in the right place.
    assert knn_entropy(x, dim=16) == pytest.approx(expected, abs=0.6)


def test_on_manifold_entropy_is_the_intrinsic_entropy():
    rng = np.random.default_rng(2)
    z = rng.normal(size=(5000, 2)) * [1.0, 2.0]
    basis = np.linalg.qr(rng.normal(size=(20, 2)))[0]
    x = z @ basis.T + 3.0  # a 2-D Gaussian on a plane in 20 dimensions
    assert knn_entropy(x, dim=2) == pytest.approx(knn_entropy(z, dim=2), abs=1e-9)
    expected = _gaussian_entropy(np.diag([1.0, 4.0]))
    assert knn_entropy(x, dim=2) == pytest.approx(expected, abs=0.05)
    # The default dimension is the TwoNN estimate of the (distinct) rows.
    assert knn_entropy(x) == pytest.approx(knn_entropy(x, dim=twonn(x)), abs=1e-12)


def test_duplicates_are_collapsed():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 3))
    assert knn_entropy(np.vstack([x, x[:50]]), dim=3) == pytest.approx(knn_entropy(x, dim=3))


def test_bad_arguments():
    x = np.random.default_rng(4).normal(size=(50, 3))
    with pytest.raises(ConfigError, match="k=0"):
        knn_entropy(x, k=0)
    with pytest.raises(ConfigError, match="dim=-1"):
        knn_entropy(x, dim=-1)
    with pytest.raises(InputError, match="distinct rows"):
        knn_entropy(np.vstack([x[:2]] * 5), k=1)
