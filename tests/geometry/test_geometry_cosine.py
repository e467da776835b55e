"""mean_cosine and rogue_dimensions against the brute-force n x n formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.errors import InputError
from workbench.geometry import mean_cosine, rogue_dimensions


def _brute_cosines(x: np.ndarray) -> np.ndarray:
    """All pairwise products of unit rows, u_a * u_b per dimension, over ordered pairs a != b."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    prod = u[:, None, :] * u[None, :, :]  # (n, n, d)
    n = len(u)
    mask = ~np.eye(n, dtype=bool)
    return prod[mask]  # (n (n - 1), d)


@pytest.fixture
def anisotropic() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 16))
    x[:, 3] += 4.0  # a rogue dimension with a large common offset
    x[:, 7] -= 2.0
    return x


def test_mean_cosine_equals_brute_force(anisotropic):
    expected = _brute_cosines(anisotropic).sum(axis=1).mean()
    assert mean_cosine(anisotropic) == pytest.approx(expected, abs=1e-12)


def test_mean_cosine_accepts_torch_float32(anisotropic):
    t = torch.from_numpy(anisotropic).to(torch.float32)
    assert mean_cosine(t) == pytest.approx(mean_cosine(anisotropic), abs=1e-6)


def test_mean_cosine_known_cases():
    same = np.tile([[1.0, 2.0, -3.0]], (5, 1)) * np.arange(1, 6)[:, None]
    assert mean_cosine(same) == pytest.approx(1.0)
    opposite = np.array([[1.0, 0.0], [-1.0, 0.0]])
    assert mean_cosine(opposite) == pytest.approx(-1.0)


def test_zero_rows_are_left_out(anisotropic):
    with_zeros = np.vstack([anisotropic[:50], np.zeros((3, 16)), anisotropic[50:]])
    assert mean_cosine(with_zeros) == pytest.approx(mean_cosine(anisotropic), abs=1e-14)


def test_fewer_than_two_nonzero_rows_raises():
    with pytest.raises(InputError, match="non-zero rows"):
        mean_cosine(np.array([[0.0, 0.0], [1.0, 2.0], [0.0, 0.0]]))


def test_rogue_contributions_equal_brute_force(anisotropic):
    result = rogue_dimensions(anisotropic, k=2)
    expected = _brute_cosines(anisotropic).mean(axis=0)
    np.testing.assert_allclose(result.contributions, expected, atol=1e-13)
    assert result.contributions.sum() == pytest.approx(result.mean_cosine, abs=1e-14)
    assert result.mean_cosine == pytest.approx(mean_cosine(anisotropic), abs=1e-14)
    assert result.top.tolist() == [3, 7]
    share = expected[[3, 7]].sum() / expected.sum()
    assert result.share == pytest.approx(share, rel=1e-10)
    assert result.share > 0.9  # the offsets dominate


def test_rogue_result_is_frozen_and_serialisable(anisotropic):
    result = rogue_dimensions(anisotropic)
    with pytest.raises(AttributeError):
        result.share = 0.0  # type: ignore[misc]
    with pytest.raises(ValueError):
        result.contributions[0] = 1.0
    assert set(result.to_dict()) >= {"mean_cosine", "top", "share"}
    assert len(result.figure().data) == 1


def test_rogue_k_larger_than_d_raises(anisotropic):
    with pytest.raises(InputError, match="k=17"):
        rogue_dimensions(anisotropic, k=17)
