"""MEV, effective rank, IsoScore, IsoScore* and partition isotropy against references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from IsoScore import IsoScore as reference

from workbench import geometry
from workbench.errors import ConfigError, InputError
from workbench.geometry import (
    covariance_eigenvalues,
    effective_rank,
    isoscore,
    isoscore_star,
    mev,
    partition_isotropy,
)


def _anisotropic(seed: int, n: int = 400, d: int = 24) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scales = np.exp(rng.normal(scale=1.0 + seed % 3, size=d))
    mixing = np.linalg.qr(rng.normal(size=(d, d)))[0]
    return rng.normal(size=(n, d)) * scales @ mixing + rng.normal(size=d) * 3


def test_covariance_eigenvalues_match_numpy():
    x = _anisotropic(0)
    expected = np.sort(np.linalg.eigvalsh(np.cov(x.T)))[::-1]
    np.testing.assert_allclose(covariance_eigenvalues(x), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_mev_matches_numpy_eigvals(seed):
    x = _anisotropic(seed)
    lam = np.linalg.eigvals(np.cov(x.T)).real
    assert mev(x) == pytest.approx(lam.max() / lam.sum(), rel=1e-10)


def test_mev_of_rank_one_data_is_one():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 1)) * rng.normal(size=(1, 10)) + 5.0
    assert mev(x) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_isoscore_matches_reference_package(seed):
    x = _anisotropic(seed, n=300 + 50 * seed, d=8 + 7 * seed)
    expected = float(reference.IsoScore(x))
    assert isoscore(x) == pytest.approx(expected, abs=1e-6)


def test_isoscore_known_cases():
    rng = np.random.default_rng(2)
    assert isoscore(rng.normal(size=(20000, 10))) > 0.98
    line = rng.normal(size=(100, 1)) * np.ones((1, 10))
    assert isoscore(line) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inside the reference package
@pytest.mark.parametrize("zeta", [0.0, 0.25, 0.7])
def test_isoscore_star_with_target_matches_reference_package(zeta):
    x = _anisotropic(3, n=60, d=30)  # few points per dimension: where shrinkage matters
    rng = np.random.default_rng(4)
    a = rng.normal(size=(30, 30))
    c0 = a @ a.T / 30
    expected = float(reference.IsoScore_star(x, c0, zeta))
    assert isoscore_star(x, zeta=zeta, target=c0) == pytest.approx(expected, abs=1e-6)


def test_isoscore_star_default_target_is_scaled_identity():
    x = _anisotropic(5)
    cov = np.cov(x.T)
    c0 = np.trace(cov) / cov.shape[0] * np.eye(cov.shape[0])
    assert isoscore_star(x, zeta=0.3) == pytest.approx(
        isoscore_star(x, zeta=0.3, target=c0), abs=1e-12
    )
    assert isoscore_star(x, zeta=0.0) == pytest.approx(isoscore(x), abs=1e-12)
    assert isoscore_star(x, zeta=1.0) == pytest.approx(1.0, abs=1e-12)
    assert isoscore(x) < isoscore_star(x, zeta=0.3) < 1.0


def test_isoscore_star_rejects_bad_zeta_and_target():
    x = _anisotropic(0)
    with pytest.raises(ConfigError, match="zeta"):
        isoscore_star(x, zeta=1.5)
    with pytest.raises(InputError, match="target"):
        isoscore_star(x, zeta=0.5, target=np.eye(3))


def test_effective_rank_of_k_equal_singular_values_is_k():
    rng = np.random.default_rng(6)
    for k in (1, 3, 7):
        u = np.linalg.qr(rng.normal(size=(200, k)))[0]
        v = np.linalg.qr(rng.normal(size=(30, k)))[0]
        x = 5.0 * u @ v.T  # k equal singular values
        assert effective_rank(x, center=False) == pytest.approx(k, abs=1e-8)
        centred = x - x.mean(axis=0)
        assert effective_rank(centred, center=False) == pytest.approx(
            effective_rank(x, center=True), abs=1e-8
        )


def test_effective_rank_matches_svd_definition():
    x = _anisotropic(7)
    for center in (True, False):
        m = x - x.mean(axis=0) if center else x
        s = np.linalg.svd(m, compute_uv=False)
        p = s / s.sum()
        expected = np.exp(-(p * np.log(p)).sum())
        assert effective_rank(x, center=center) == pytest.approx(expected, rel=1e-9)


def _brute_partition(x: np.ndarray) -> float:
    _, vecs = np.linalg.eigh(x.T @ x)
    z = [np.exp(x @ (s * vecs[:, j])).sum() for j in range(x.shape[1]) for s in (1.0, -1.0)]
    return min(z) / max(z)


def test_partition_isotropy_matches_brute_force():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(300, 12)) * 0.3 + rng.normal(size=12) * 0.2
    assert partition_isotropy(x) == pytest.approx(_brute_partition(x), rel=1e-10)


def test_partition_isotropy_is_stable_for_large_values():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(200, 8)) * 0.3
    big = x * 1000.0  # exp would overflow without log-sum-exp
    value = partition_isotropy(big)
    assert np.isfinite(value) and 0.0 <= value <= 1.0
    iso = rng.normal(size=(50000, 4)) * 0.1
    assert partition_isotropy(iso) > 0.95


def test_spectrum_metrics_accept_torch_tensors():
    x = _anisotropic(1)
    t = torch.from_numpy(x)
    assert mev(t) == mev(x)
    assert isoscore(t) == isoscore(x)
    assert effective_rank(t) == effective_rank(x)


def test_zero_variance_raises():
    x = np.ones((10, 4))
    for fn in (mev, isoscore, effective_rank):
        with pytest.raises(InputError, match="zero variance"):
            fn(x)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_torch_tensors_of_any_float_dtype_equal_their_numpy_values(dtype):
    rng = np.random.default_rng(7)
    t = torch.from_numpy(rng.normal(size=(300, 12)) * np.linspace(0.5, 3, 12)).to(dtype)
    values = t.to(torch.float64).numpy()  # the exact values the tensor holds
    for fn in (geometry.mev, geometry.effective_rank, geometry.isoscore, geometry.mean_cosine):
        assert fn(t) == pytest.approx(fn(values), rel=1e-12, abs=1e-12)
    assert geometry.MomentAccumulator.from_batches(t.split(64)).n == 300
    assert t.dtype == dtype  # the input is left as it was
