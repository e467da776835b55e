"""Streaming metrics equal the in-memory ones, across uneven batches and merges."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from workbench.errors import InputError
from workbench.geometry import (
    MomentAccumulator,
    UnitSumAccumulator,
    effective_rank,
    isoscore,
    isoscore_star,
    mean_cosine,
    mev,
    rogue_dimensions,
    streaming_effective_rank,
    streaming_isoscore,
    streaming_isoscore_star,
    streaming_mean_cosine,
    streaming_mev,
    streaming_rogue_dimensions,
)

SPLITS = [0, 1, 7, 7, 150, 151, 600, 999, 1000]  # includes an empty and a one-row batch


def _data(dtype=np.float64) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 24)) * np.exp(rng.normal(size=24)) + 50.0  # large mean
    x[:, 2] += 300.0
    return x.astype(dtype)


def _batches(x):
    return [x[a:b] for a, b in itertools.pairwise(SPLITS)]


def _pairs():
    return [
        (mev, streaming_mev),
        (isoscore, streaming_isoscore),
        (lambda x: isoscore_star(x, zeta=0.3), lambda b: streaming_isoscore_star(b, zeta=0.3)),
        (effective_rank, streaming_effective_rank),
        (
            lambda x: effective_rank(x, center=False),
            lambda b: streaming_effective_rank(b, center=False),
        ),
        (mean_cosine, streaming_mean_cosine),
    ]


@pytest.mark.parametrize("index", range(6))
def test_streaming_equals_in_memory_float64(index):
    x = _data()
    full, streaming = _pairs()[index]
    assert streaming(_batches(x)) == pytest.approx(full(x), rel=1e-8, abs=1e-12)


@pytest.mark.parametrize("index", range(6))
def test_streaming_equals_in_memory_float32_torch(index):
    x = _data(np.float32)
    full, streaming = _pairs()[index]
    batches = (torch.from_numpy(b) for b in _batches(x))  # a generator, consumed once
    assert streaming(batches) == pytest.approx(full(x), rel=1e-5, abs=1e-7)


def test_moment_merges_in_any_order():
    x = _data()
    parts = [MomentAccumulator.from_batch(b) for b in _batches(x)]
    left = parts[0]
    for p in parts[1:]:
        left = left.merge(p)
    right = parts[-1]
    for p in reversed(parts[:-1]):
        right = p.merge(right)
    tree = (
        parts[0]
        .merge(parts[1])
        .merge(parts[2].merge(parts[3]))
        .merge(parts[4].merge(parts[5].merge(parts[6].merge(parts[7]))))
    )
    whole = MomentAccumulator.from_batch(x)
    for acc in (left, right, tree):
        assert acc.n == 1000
        np.testing.assert_allclose(acc.mean, x.mean(axis=0), rtol=1e-13)
        np.testing.assert_allclose(acc.covariance(), np.cov(x.T), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(acc.eigenvalues(), whole.eigenvalues(), rtol=1e-9, atol=1e-9)
    assert streaming_mev(tree) == pytest.approx(mev(x), rel=1e-9)
    updated = MomentAccumulator.empty(24)
    for b in _batches(x):
        updated = updated.update(b)
    assert streaming_isoscore(updated) == pytest.approx(isoscore(x), rel=1e-9)


def test_unit_sums_merge_and_rogue_dimensions():
    x = _data()
    x[10] = 0.0
    acc = UnitSumAccumulator.empty(24)
    for b in _batches(x):
        acc = acc.update(b)
    assert acc.n == 999 and acc.zero_rows == 1
    full = rogue_dimensions(x, k=4)
    part = streaming_rogue_dimensions(acc, k=4)
    np.testing.assert_allclose(part.contributions, full.contributions, rtol=1e-10, atol=1e-14)
    assert part.top.tolist() == full.top.tolist()
    assert part.top[0] == 2
    gen = streaming_rogue_dimensions(iter(_batches(x)), k=4)
    assert gen.share == pytest.approx(full.share, rel=1e-10)


def test_accumulators_are_immutable():
    acc = MomentAccumulator.from_batch(_data()[:10])
    with pytest.raises(ValueError):
        acc.m2[0, 0] = 1.0
    with pytest.raises(AttributeError):
        acc.n = 3  # type: ignore[misc]


def test_streaming_bad_inputs():
    x = _data()
    with pytest.raises(InputError, match="empty"):
        streaming_mev([])
    with pytest.raises(InputError, match="cannot merge"):
        streaming_mev([x[:10], x[10:20, :5]])
    with pytest.raises(InputError, match="batch has shape"):
        streaming_mev([x[0]])
    with pytest.raises(InputError, match="iterable"):
        streaming_mev(3.0)
    with pytest.raises(InputError, match="NaN"):
        streaming_mean_cosine([x[:5], np.full((2, 24), np.nan)])
