"""Frequency vs distance to the centroid: per occurrence, then per type."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import ConfigError, InputError
from workbench.geometry import (
    FrequencyDistance,
    embedding_frequency_correlation,
    frequency_distance_correlation,
)


def _corpus(seed: int = 0):
    rng = np.random.default_rng(seed)
    n_types = 40
    occ = rng.integers(1, 30, size=n_types)
    token_ids = np.repeat(np.arange(n_types) * 3, occ)  # sparse ids
    rng.shuffle(token_ids)
    x = rng.normal(size=(token_ids.size, 8))
    counts = {
        int(t): int(c)
        for t, c in zip(np.arange(n_types) * 3, rng.integers(1, 10**6, n_types), strict=True)
    }
    return x, token_ids, counts


def test_matches_a_direct_computation():
    x, ids, counts = _corpus()
    result = frequency_distance_correlation(x, ids, counts, min_occurrences=3)
    dist = np.linalg.norm(x - x.mean(axis=0), axis=1)
    types = [t for t in sorted(set(ids.tolist())) if (ids == t).sum() >= 3]
    mean_dist = np.array([dist[ids == t].mean() for t in types])
    log_f = np.log([counts[t] for t in types])
    assert result.token_ids.tolist() == types
    assert result.n_types == len(types)
    np.testing.assert_allclose(result.distance, mean_dist, rtol=1e-12)
    np.testing.assert_allclose(result.log_frequency, log_f, rtol=1e-12)
    assert result.occurrences.tolist() == [int((ids == t).sum()) for t in types]
    assert result.r == pytest.approx(np.corrcoef(log_f, mean_dist)[0, 1], abs=1e-12)


def test_counts_as_array_and_unseen_types_left_out():
    x, ids, counts = _corpus(1)
    table = np.zeros(200)
    for t, c in counts.items():
        table[t] = c
    table[0] = 0  # type 0 unseen in the corpus: no log frequency
    result = frequency_distance_correlation(x, ids, table)
    assert 0 not in result.token_ids.tolist()
    reference = frequency_distance_correlation(x, ids, {**counts, 0: 0})
    assert result.r == pytest.approx(reference.r, abs=1e-12)


def test_per_occurrence_distance_avoids_the_averaging_artifact():
    # Every occurrence lies at distance ~1 from the centroid, whatever the type's frequency.
    rng = np.random.default_rng(2)
    occ = np.repeat([2, 5, 20, 80], 10)
    ids = np.repeat(np.arange(occ.size), occ)
    x = rng.normal(size=(ids.size, 32))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x *= 1 + 0.01 * rng.normal(size=(ids.size, 1))
    counts = dict(enumerate(occ.tolist()))  # frequency = occurrences
    ours = frequency_distance_correlation(x, ids, counts)
    assert abs(ours.r) < 0.4
    # The artifact: distance of each type's mean vector shrinks with its occurrences.
    means = np.array([x[ids == t].mean(axis=0) for t in range(occ.size)])
    artifact = np.corrcoef(np.log(occ), np.linalg.norm(means - x.mean(axis=0), axis=1))[0, 1]
    assert artifact < -0.9


def test_embedding_table_correlation():
    rng = np.random.default_rng(3)
    vocab = 300
    counts = rng.integers(0, 1000, size=vocab)
    counts[:20] = 0
    e = rng.normal(size=(vocab, 16)) * (1 + np.log1p(counts))[:, None]
    result = embedding_frequency_correlation(e, counts)
    seen = counts > 0
    dist = np.linalg.norm(e - e.mean(axis=0), axis=1)
    assert result.n_types == seen.sum()
    assert result.occurrences is None
    assert result.r == pytest.approx(np.corrcoef(np.log(counts[seen]), dist[seen])[0, 1], abs=1e-12)
    assert result.r > 0.5


def test_result_dataclass_and_figure():
    x, ids, counts = _corpus(4)
    result = frequency_distance_correlation(x, ids, counts)
    assert isinstance(result, FrequencyDistance)
    assert result.to_dict() == {"r": result.r, "n_types": result.n_types}
    fig = result.figure()
    assert len(fig.data[0].x) == result.n_types
    with pytest.raises(AttributeError):
        result.r = 0.0  # type: ignore[misc]


def test_bad_inputs():
    x, ids, counts = _corpus(5)
    with pytest.raises(InputError, match="token_ids has"):
        frequency_distance_correlation(x, ids[:-1], counts)
    with pytest.raises(InputError, match="non-negative"):
        frequency_distance_correlation(x, ids - 5, counts)
    with pytest.raises(ConfigError, match="min_occurrences"):
        frequency_distance_correlation(x, ids, counts, min_occurrences=0)
    with pytest.raises(InputError, match="at least 3"):
        frequency_distance_correlation(x, ids, {int(ids[0]): 5})
