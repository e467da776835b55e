"""The one bootstrap: resampling schemes, failures, intervals against normal theory."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import InputError
from workbench.stats import bootstrap, resamples


def test_mean_interval_matches_normal_theory() -> None:
    x = np.random.default_rng(3).normal(2.0, 1.5, size=400)
    boot = bootstrap(lambda idx: x[idx].mean(), len(x), n_samples=4000, seed=0)
    low, high = boot.interval()[:, 0]
    se = x.std(ddof=1) / np.sqrt(len(x))
    # the percentile interval of a mean is mean +- 1.96 se up to resampling noise (~5% of se)
    assert low == pytest.approx(x.mean() - 1.96 * se, abs=0.2 * se)
    assert high == pytest.approx(x.mean() + 1.96 * se, abs=0.2 * se)
    assert boot.se()[0] == pytest.approx(se, rel=0.1)
    assert boot.failed == 0 and boot.samples.shape == (4000, 1)


def test_same_seed_same_samples_and_global_state_untouched() -> None:
    x = np.arange(50.0)
    np.random.seed(7)
    before = np.random.get_state()[1].copy()
    a = bootstrap(lambda idx: x[idx].mean(), 50, n_samples=30, seed=5)
    b = bootstrap(lambda idx: x[idx].mean(), 50, n_samples=30, seed=5)
    c = bootstrap(lambda idx: x[idx].mean(), 50, n_samples=30, seed=6)
    np.testing.assert_array_equal(a.samples, b.samples)
    assert not np.array_equal(a.samples, c.samples)
    np.testing.assert_array_equal(np.random.get_state()[1], before)


def test_groups_are_drawn_whole() -> None:
    groups = np.repeat([10, 20, 30, 40], [1, 2, 3, 4])
    for idx in resamples(len(groups), 50, seed=1, groups=groups):
        drawn = groups[idx]
        for g, size in zip([10, 20, 30, 40], [1, 2, 3, 4], strict=True):
            # a group appears a whole number of times: all its rows or none, each time
            assert (drawn == g).sum() % size == 0
        assert np.isin(idx, np.arange(len(groups))).all()


def test_strata_keep_their_sizes() -> None:
    strata = np.array([0] * 7 + [1] * 3)
    for idx in resamples(10, 50, seed=2, strata=strata):
        assert (strata[idx] == 0).sum() == 7 and (strata[idx] == 1).sum() == 3
        assert set(idx[:7]) <= set(range(7)) and set(idx[7:]) <= {7, 8, 9}


def test_undefined_and_non_finite_resamples_are_counted_not_kept() -> None:
    y = np.array([0, 0, 0, 0, 1])

    def stat(idx: np.ndarray) -> float:
        if y[idx].sum() == 0:
            raise ValueError("one class")
        return 1.0 / (y[idx].sum() - 1) if y[idx].sum() != 1 else float("inf")

    boot = bootstrap(stat, 5, n_samples=200, seed=0)
    assert boot.failed + len(boot.samples) == 200
    assert boot.failed > 0 and np.isfinite(boot.samples).all()
    empty = bootstrap(lambda idx: 1 / 0, 3, n_samples=5, seed=0, size=2)
    assert empty.failed == 5 and empty.samples.shape == (0, 2)
    assert np.isnan(empty.interval()).all() and np.isnan(empty.se()).all()


def test_unexpected_errors_propagate() -> None:
    def broken(idx: np.ndarray) -> float:
        raise KeyError("a bug, not an undefined statistic")

    with pytest.raises(KeyError):
        bootstrap(broken, 3, n_samples=2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 0},
        {"groups": [0, 1]},
        {"strata": [0, 1, 1, 0]},
        {"groups": [0, 0, 1], "strata": [0, 1, 1]},
    ],
)
def test_bad_input_is_one_line(kwargs: dict) -> None:
    args = {"n": 3, **kwargs}
    with pytest.raises(InputError) as err:
        bootstrap(lambda idx: 0.0, args.pop("n"), n_samples=2, **args)
    assert "\n" not in str(err.value)


def test_statistic_shape_must_stay_fixed() -> None:
    calls = iter([[1.0, 2.0], [1.0]])
    with pytest.raises(InputError, match="one 1-D shape"):
        bootstrap(lambda idx: next(calls), 3, n_samples=2)
    with pytest.raises(InputError, match="level"):
        bootstrap(lambda idx: 0.0, 3, n_samples=2).interval(1.5)
