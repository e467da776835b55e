"""TwoNN against scikit-dimension, and the exact neighbour search behind it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import skdim
from scipy.spatial.distance import cdist

from workbench.errors import ConfigError, InputError
from workbench.geometry import twonn
from workbench.geometry._neighbors import nearest_distances


def _manifold(n: int, ambient: int, intrinsic: int, seed: int = 0) -> np.ndarray:
    """A smooth curved ``intrinsic``-dimensional manifold in ``ambient`` dimensions."""
    rng = np.random.default_rng(seed)
    z = rng.uniform(-1, 1, size=(n, intrinsic))
    w1 = rng.normal(size=(intrinsic, 32)) / np.sqrt(intrinsic)
    w2 = rng.normal(size=(32, ambient)) / np.sqrt(32)
    return np.tanh(2 * z @ w1) @ w2


def _skdim(x: np.ndarray, discard_fraction: float = 0.1) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(skdim.id.TwoNN(discard_fraction=discard_fraction).fit(x).dimension_)


def _brute(x: np.ndarray, k: int) -> np.ndarray:
    dist = cdist(x, x)  # direct differences, like the exact refinement
    np.fill_diagonal(dist, np.inf)
    return np.sort(dist, axis=1)[:, :k]


@pytest.mark.parametrize(("ambient", "intrinsic"), [(64, 4), (40, 6), (10, 3)])
def test_twonn_equals_scikit_dimension(ambient, intrinsic):
    x = _manifold(2000, ambient, intrinsic)
    ours = twonn(x)
    assert ours == pytest.approx(_skdim(x), rel=1e-6)
    assert ours == pytest.approx(intrinsic, rel=0.2)


@pytest.mark.parametrize("fraction", [0.05, 0.3])
def test_twonn_discard_fraction_matches(fraction):
    x = _manifold(1500, 30, 5, seed=1)
    assert twonn(x, discard_fraction=fraction) == pytest.approx(_skdim(x, fraction), rel=1e-6)


def test_twonn_drops_duplicates_like_scikit_dimension():
    # Low ambient dimension: scikit-dimension's exact neighbour search then sees r1 == 0 too.
    x = _manifold(1000, 8, 3, seed=2)
    x = np.vstack([x, x[:40], x[:5]])
    assert twonn(x) == pytest.approx(_skdim(x), rel=1e-6)


def test_twonn_duplicate_policy_in_high_dimension():
    x = _manifold(800, 50, 4, seed=3)
    x = np.vstack([x, x[:30]])
    dist = _brute(x, 2)
    keep = dist[:, 0] > 0
    assert (~keep).sum() == 60  # both copies of each duplicated point are dropped
    mu = np.sort(dist[keep, 1] / dist[keep, 0])
    n_keep = int(mu.size * 0.9)
    lx = np.log(mu[:n_keep])
    ly = -np.log(1 - np.arange(1, n_keep + 1) / mu.size)
    assert twonn(x) == pytest.approx((lx @ ly) / (lx @ lx), rel=1e-9)


@pytest.mark.parametrize(
    "x",
    [
        np.random.default_rng(0).normal(size=(300, 5)),
        np.random.default_rng(1).normal(size=(1500, 40)),
        _manifold(1500, 120, 6, seed=4),
        np.random.default_rng(2).normal(size=(40, 300)),
    ],
    ids=["tree", "gaussian", "manifold", "wide"],
)
@pytest.mark.parametrize("k", [1, 2, 6])
def test_nearest_distances_are_exact(x, k):
    np.testing.assert_allclose(nearest_distances(x, k), _brute(x, k), rtol=1e-12, atol=1e-12)


def test_nearest_distances_large_enough_to_use_the_bound_space():
    # Past the sampling threshold the principal-subspace bound is chosen; it must stay exact.
    x = _manifold(3000, 96, 5, seed=5)
    idx = np.random.default_rng(0).choice(len(x), 200, replace=False)
    dist = cdist(x[idx], x)
    dist[np.arange(200), idx] = np.inf
    expected = np.sort(dist, axis=1)[:, :3]
    np.testing.assert_allclose(nearest_distances(x, 3)[idx], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("width", [8, 32, None])
def test_every_bound_space_certifies_only_exact_rows(width):
    # Each stage of the cascade alone, on a 12-dimensional manifold: 8 principal coordinates
    # bound the distances loosely (about a third of the rows' candidates miss a true neighbour,
    # and the stage must refuse those rows), 32 and the full space tightly. The full space
    # (None) is laid out by row and read transposed, the heads by column.
    import torch

    from workbench.geometry._neighbors import _filter_refine, _make_space

    x = _manifold(1200, 96, 12, seed=7)
    xt = torch.from_numpy(x - x.mean(axis=0))
    x32 = xt.to(torch.float32)
    sq = torch.einsum("nd,nd->n", xt, xt)
    _, vecs = torch.linalg.eigh((x32.T @ x32).double())
    y = x32 @ vecs.flip(1)[:, :64].to(torch.float32)
    space = _make_space(x32 if width is None else y, sq, width)
    rows = torch.arange(0, 1200, 3)
    dist, ok = _filter_refine(xt, space, rows, 3, 8)
    ok = ok.numpy()
    expected = _brute(xt.numpy(), 3)[rows.numpy()] ** 2
    np.testing.assert_allclose(dist.numpy()[ok], expected[ok], rtol=1e-12)
    if width == 8:
        assert 0 < ok.mean() < 0.5
    else:
        assert ok.mean() > 0.9


def test_nearest_distances_with_many_exact_ties():
    # Binary vectors: many neighbours tie at the same distance, so certification fails and the
    # exhaustive float64 fallback must take over. The search centres the data first, so its
    # differences round differently from cdist's on the raw vectors: equal to float64 precision.
    x = np.random.default_rng(6).integers(0, 2, size=(600, 14)).astype(float)
    np.testing.assert_allclose(nearest_distances(x, 4), _brute(x, 4), rtol=1e-12, atol=1e-12)


def test_twonn_bad_input():
    x = _manifold(100, 10, 2)
    with pytest.raises(ConfigError, match="discard_fraction"):
        twonn(x, discard_fraction=0.0)
    with pytest.raises(ConfigError, match="discard_fraction"):
        twonn(x, discard_fraction=1.0)
    with pytest.raises(InputError, match="at least 3 rows"):
        twonn(x[:2])
    with pytest.raises(InputError, match="ratios remain"):
        twonn(np.vstack([x[:1]] * 10 + [x[1:3]]))
