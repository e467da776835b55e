"""The tangent-subspace energy test: known shares and the p-value formula."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import ConfigError, InputError
from workbench.geometry import TangentEnergyTest, tangent_energy_test


def _basis(d: int, r: int, seed: int = 0) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).normal(size=(d, r)))[0]


def test_gradients_inside_the_subspace():
    q = _basis(64, 6)
    g = q @ np.random.default_rng(1).normal(size=(6, 5))
    result = tangent_energy_test(q, g, n_null=30)
    assert result.share == pytest.approx(1.0, abs=1e-12)
    assert result.p_value == pytest.approx(1 / 31)
    assert np.all(result.null_shares < 1e-20)
    assert result.rank == 6 and result.dim == 64


def test_random_gradients_get_chance_share():
    d, r = 400, 20
    q = _basis(d, r)
    g = np.random.default_rng(2).normal(size=(d, 200))
    result = tangent_energy_test(q, g, n_null=10)
    assert result.share == pytest.approx(r / d, rel=0.15)
    assert result.null_shares.mean() == pytest.approx(r / d, rel=0.15)
    assert result.chance == r / d


def test_single_gradient_vector_and_non_orthonormal_basis():
    q = _basis(50, 4, seed=3)
    mixed = q @ np.random.default_rng(4).normal(size=(4, 4))  # same span, not orthonormal
    g = np.random.default_rng(5).normal(size=50)
    a = tangent_energy_test(q, g, n_null=15, random_state=7)
    b = tangent_energy_test(mixed, g, n_null=15, random_state=7)
    assert a.share == pytest.approx(b.share, abs=1e-12)
    assert a.share == pytest.approx(np.sum((q.T @ g) ** 2) / np.sum(g**2), rel=1e-12)


def test_p_value_formula_and_determinism():
    q = _basis(30, 3)
    g = np.random.default_rng(6).normal(size=(30, 2))
    result = tangent_energy_test(q, g, n_null=50, random_state=11)
    expected = (1 + np.sum(result.null_shares >= result.share)) / 51
    assert result.p_value == pytest.approx(expected)
    again = tangent_energy_test(q, g, n_null=50, random_state=11)
    np.testing.assert_array_equal(result.null_shares, again.null_shares)


def test_result_api():
    result = tangent_energy_test(_basis(20, 2), np.ones(20), n_null=5)
    assert isinstance(result, TangentEnergyTest)
    assert result.to_dict()["n_null"] == 5
    assert len(result.figure().data) == 1


def test_bad_inputs():
    q = _basis(20, 3)
    with pytest.raises(InputError, match="G has 19 rows"):
        tangent_energy_test(q, np.ones(19))
    with pytest.raises(InputError, match="all zeros"):
        tangent_energy_test(q, np.zeros(20))
    with pytest.raises(InputError, match="rank below"):
        tangent_energy_test(np.ones((20, 3)), np.ones(20))
    with pytest.raises(InputError, match="2r <= d"):
        tangent_energy_test(_basis(20, 11), np.ones(20))
    with pytest.raises(ConfigError, match="n_null"):
        tangent_energy_test(q, np.ones(20), n_null=0)
