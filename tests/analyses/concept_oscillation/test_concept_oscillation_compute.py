"""Pure steps of the concept-oscillation study against references: sklearn, scipy, brute force."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
from scipy.special import softmax
from scipy.stats import entropy as scipy_entropy
from sklearn.linear_model import LogisticRegression

from workbench.analyses import concept_oscillation as co
from workbench.analyses.concept_oscillation import compute, summary
from workbench.analyses.concept_oscillation.results import (
    CaseRun,
    ConceptOscillationResult,
    LogitDiffMap,
    OscillationSummary,
    ProbeCurve,
    Readout,
)
from workbench.errors import InputError


def logistic_data(n=300, b0=0.4, b1=-2.0, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, n)
    y = rng.random(n) < 1 / (1 + np.exp(-(b0 + b1 * x)))
    return x, y


def test_entropy_matches_scipy():
    logits = np.random.default_rng(1).normal(scale=3, size=(7, 50))
    expected = [scipy_entropy(softmax(row)) for row in logits]
    np.testing.assert_allclose(co.entropy(logits), expected, rtol=1e-12)
    assert co.entropy(np.array([0.0, -np.inf]))[()] == pytest.approx(0.0)


def test_relative_uncertainty_formula_and_bounds():
    h_a, h_b = np.array([1.0, 0.5, 0.0, 0.0, 2.0]), np.array([1.0, 1.5, 0.7, 0.0, 0.0])
    dh = co.relative_uncertainty(h_a, h_b)
    np.testing.assert_allclose(dh, [0.0, 2 * (0.5 - 1.5) / 2.0, -2.0, 0.0, 2.0])
    np.testing.assert_allclose(co.relative_uncertainty(h_b, h_a), -dh)
    with pytest.raises(InputError, match="one value per case"):
        co.relative_uncertainty([1.0], [1.0, 2.0])
    with pytest.raises(InputError, match="non-negative"):
        co.relative_uncertainty([-1.0], [1.0])


@pytest.mark.parametrize("seed", [0, 1])
def test_fit_logistic_matches_sklearn(seed):
    x, y = logistic_data(seed=seed)
    b0, b1 = co.fit_logistic(x, y)
    ref = LogisticRegression(C=1 / compute.L2, tol=1e-12, max_iter=10_000).fit(x[:, None], y)
    assert b0[0] == pytest.approx(ref.intercept_[0], abs=1e-5)
    assert b1[0] == pytest.approx(ref.coef_[0, 0], abs=1e-5)


def test_weighted_fits_equal_fits_on_repeated_rows():
    x, y = logistic_data(n=60, seed=3)
    counts = np.random.default_rng(0).multinomial(60, np.full(60, 1 / 60), size=4)
    b0, b1 = co.fit_logistic(x, y, counts)
    for row, (i0, i1) in zip(counts, zip(b0, b1, strict=True), strict=True):
        rx, ry = np.repeat(x, row), np.repeat(y, row)
        r0, r1 = co.fit_logistic(rx, ry)
        assert (i0, i1) == pytest.approx((r0[0], r1[0]), abs=1e-8)


def test_separated_outcomes_keep_a_finite_balance_between_the_classes():
    x = np.linspace(-1, 1, 40)
    y = x < 0.25
    curve = co.follow_curve(x, y, np.ones(40, bool), n_bootstrap=200)
    assert curve.slope < -5 and np.isfinite(curve.slope)
    assert 0.2 < curve.balance_point < 0.3


def test_follow_curve_recovers_slope_and_balance_point():
    x, y = logistic_data(n=2000, b0=0.4, b1=-2.0, seed=5)
    curve = co.follow_curve(x, y, np.ones(len(x), bool), n_bootstrap=400, seed=0)
    assert curve.slope == pytest.approx(-2.0, abs=0.25)
    lo, hi = curve.balance_ci
    assert lo < 0.2 < hi and hi - lo < 0.3
    assert curve.balance_point == pytest.approx(-curve.intercept / curve.slope)
    assert curve.monotone and len(curve.bin_rates) == compute.N_BINS
    assert curve.predict(curve.balance_point) == pytest.approx(0.5)


def test_follow_curve_leaves_out_unused_cases_and_handles_one_outcome():
    x, y = logistic_data(n=100)
    used = np.arange(100) % 3 != 0
    curve = co.follow_curve(x, y, used, n_bootstrap=100)
    ref = co.follow_curve(x[used], y[used], np.ones(used.sum(), bool), n_bootstrap=100)
    assert curve.slope == pytest.approx(ref.slope) and curve.bin_counts.sum() == used.sum()
    flat = co.follow_curve(x, np.ones(100, bool), np.ones(100, bool))
    assert flat.slope is None and flat.balance_point is None and flat.balance_ci is None
    assert np.isnan(flat.predict([0.0])).all()


def test_binned_rates_match_a_loop():
    rng = np.random.default_rng(2)
    x = np.round(rng.normal(size=103), 1)  # ties
    y = rng.random(103) < 0.4
    centers, rates, counts = compute.binned_rates(x, y, 5)
    edges = np.quantile(x, [0.2, 0.4, 0.6, 0.8])
    expected = {}
    for xi, yi in zip(x, y, strict=True):
        b = sum(xi >= e for e in edges)
        expected.setdefault(b, []).append((xi, yi))
    for b, (c, r, n) in zip(
        sorted(expected), zip(centers, rates, counts, strict=True), strict=True
    ):
        pts = np.array(expected[b], dtype=float)
        assert (c, r, n) == pytest.approx((pts[:, 0].mean(), pts[:, 1].mean(), len(pts)))
    assert counts.sum() == 103 and np.all(np.diff(centers) > 0)


def brute_oscillations(seq, a, b):
    kept = [t for t in seq if t in (a, b)]
    return sum(1 for u, v in itertools.pairwise(kept) if u != v)


def test_count_oscillations_matches_brute_force():
    rng = np.random.default_rng(4)
    top1 = rng.integers(0, 4, size=(9, 200))
    y_a, y_b = np.zeros(200, int), np.ones(200, int)
    got = co.count_oscillations(top1, y_a, y_b)
    assert got.tolist() == [brute_oscillations(top1[:, i], 0, 1) for i in range(200)]


def test_an_irrelevant_token_does_not_reset_the_count():
    a, b, x = 5, 7, 9
    cases = [[a, x, b, x], [a, x, a, b], [a, b, a, x], [x, x, a, x], [b, x, x, a]]
    top1 = np.array(cases).T  # (layers, cases)
    got = co.count_oscillations(top1, np.full(5, a), np.full(5, b))
    assert got.tolist() == [1, 1, 2, 0, 1]
    with pytest.raises(InputError, match="n_layers"):
        co.count_oscillations(top1[0], np.full(5, a), np.full(5, b))


def test_ambiguity_groups_and_summary():
    dh = np.array([-1.0, -0.4, 0.0, 0.55, 1.0])
    amb = co.ambiguous_mask(dh, 0.05)
    assert amb.tolist() == [False, True, True, True, False]
    assert not co.ambiguous_mask(dh, None).any()
    summary = compute.oscillation_summary(np.array([0, 2, 1, 3, 1]), amb, np.array([0, 1]))
    assert summary.mean("ambiguous") == pytest.approx(2.0)
    assert summary.mean("clear") == pytest.approx(0.5)
    assert summary.ratio == pytest.approx(4.0)
    assert summary.sem("control") == pytest.approx(np.std([0, 1], ddof=1) / np.sqrt(2))
    empty = OscillationSummary(np.zeros(0, int), np.array([1]), np.zeros(0, int))
    assert empty.mean("ambiguous") is None and empty.ratio is None and empty.sem("clear") is None


def test_logit_diff_map_is_a_per_bin_mean():
    rng = np.random.default_rng(6)
    diff, dh = rng.normal(size=(3, 25)), rng.uniform(-1, 1, 25)
    heat = compute.logit_diff_map(diff, dh, [0, 1, 2], n_bins=4)
    order = np.argsort(dh, kind="stable")
    for j, group in enumerate(np.array_split(order, 4)):
        np.testing.assert_allclose(heat.mean_diff[:, j], diff[:, group].mean(1))
        assert heat.dh_centers[j] == pytest.approx(dh[group].mean())
    assert heat.counts.sum() == 25


def readout(n=12, n_layers=3, seed=0, ids="c"):
    rng = np.random.default_rng(seed)
    y_a, y_b = np.full(n, 10), np.full(n, 11)
    top1 = np.where(rng.random(n) < 0.5, 10, 11)
    return Readout(
        ids=tuple(f"{ids}{i}" for i in range(n)),
        layers=np.arange(n_layers),
        y_a=y_a,
        y_b=y_b,
        token_a=("A",) * n,
        token_b=("B",) * n,
        h_a=rng.uniform(0.1, 2, n),
        h_b=rng.uniform(0.1, 2, n),
        top1=top1,
        lens_top1=rng.integers(9, 13, (n_layers, n)),
        lens_diff=rng.normal(size=(n_layers, n)),
    )


def test_analyze_builds_a_result_that_round_trips_through_json():
    probe = ProbeCurve(np.arange(3), [0.5, 0.7, 0.9], [0.4, 0.6, 0.8], [0.6, 0.8, 1.0],
                       [0.5, 0.5, 0.5], 0.5, 12)  # fmt: skip
    run = CaseRun("m", "logit", readout(40), readout(8, ids="k"), probe, ("a note",))
    result = co.analyze(run, n_bootstrap=100, seed=0, cases="builtin")
    again = ConceptOscillationResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.to_dict() == result.to_dict()
    assert len(result.oscillations.ambiguous) + len(result.oscillations.clear) == 40
    if len(result.oscillations.ambiguous) and result.oscillations.clear.any():
        assert result.ratio_ci is not None and again.ratio_ci == result.ratio_ci
    assert (
        result.conflict_oscillations.tolist()
        == co.count_oscillations(
            run.conflicts.lens_top1, run.conflicts.y_a, run.conflicts.y_b
        ).tolist()
    )
    assert result.notes[0] == "a note" and probe.best_layer == 2
    assert not any("majority baseline" in note for note in result.notes)
    weak = replace(probe, accuracy_lo=np.array([0.4, 0.45, 0.5]))  # no layer's bound above 0.5
    notes = co.analyze(replace(run, probe=weak), n_bootstrap=100).notes
    assert any("does not beat the majority baseline (0.500)" in note for note in notes)
    assert result.figure_kinds() == list(co.FIGURES)


def test_results_check_their_shapes():
    r = readout(5)
    with pytest.raises(InputError, match="lens_top1"):
        Readout(**{**r.__dict__, "lens_top1": np.zeros((2, 5), int)})
    with pytest.raises(InputError, match="token_a"):
        Readout(**{**r.__dict__, "token_a": ("A",)})
    with pytest.raises(InputError, match="mean_diff"):
        LogitDiffMap(np.arange(2), np.zeros(3), np.zeros((3, 3)), np.ones(3, int))
    with pytest.raises(InputError, match="accuracy"):
        ProbeCurve(np.arange(3), [0.5], [0.5], [0.5], [0.5], 0.5, 3)
    with pytest.raises(InputError, match="counts"):
        OscillationSummary(np.array([-1]), np.zeros(0, int), np.zeros(0, int))


def test_ratio_interval_is_a_percentile_bootstrap_of_the_two_groups():
    rng = np.random.default_rng(8)
    ambiguous, clear = rng.poisson(0.4, 300), rng.poisson(0.1, 900)
    lo, hi = compute.ratio_interval(ambiguous, clear, n_bootstrap=2000, seed=1)
    ratio = ambiguous.mean() / clear.mean()
    assert lo < ratio < hi
    # against a loop over replicates with the same draws (each group resampled apart, in turn)
    draws = np.random.default_rng(1)
    ratios = []
    for _ in range(2000):
        a = ambiguous[draws.choice(300, 300)].mean()
        ratios.append(a / clear[draws.choice(900, 900)].mean())
    np.testing.assert_allclose([lo, hi], np.percentile(ratios, [2.5, 97.5]))
    # the interval narrows with more cases (sampling, not the toy, sets its width)
    lo4, hi4 = compute.ratio_interval(np.tile(ambiguous, 4), np.tile(clear, 4), seed=1)
    assert hi4 - lo4 < (hi - lo) * 0.7
    assert compute.ratio_interval([], clear) is None
    assert compute.ratio_interval([1, 2], [0, 0]) is None


def test_decision_layers_match_a_loop():
    rng = np.random.default_rng(9)
    top1 = rng.integers(0, 3, (6, 300))
    final = top1[-1]
    expected = []
    for i in range(300):
        layer = 6
        while layer > 0 and top1[layer - 1, i] == final[i]:
            layer -= 1
        expected.append(layer)
    assert summary.decision_layers(top1, final).tolist() == expected
    assert summary.decision_layers(np.zeros((4, 2), int), [0, 1]).tolist() == [0, 4]


def test_answer_rate_by_group_matches_a_loop():
    rng = np.random.default_rng(3)
    answer, expected = rng.integers(0, 3, 200), rng.integers(0, 3, 200)
    groups = rng.choice([0, 2, 5], 200)
    rates = summary.answer_rate_by_group(answer, expected, groups)
    assert list(rates) == [0, 2, 5]
    for g, rate in rates.items():
        pairs = [(a, e) for a, e, k in zip(answer, expected, groups, strict=True) if k == g]
        assert rate == pytest.approx(sum(a == e for a, e in pairs) / len(pairs), abs=1e-12)
    with pytest.raises(InputError, match="must be"):
        summary.answer_rate_by_group(answer, expected[:-1], groups)


def test_relation_features_are_the_lens_logit_difference_per_layer():
    diff = np.arange(6.0).reshape(2, 3)
    features = compute.relation_features(diff, [3, 5])
    assert list(features) == [3, 5] and features[5].shape == (3, 1)
    np.testing.assert_array_equal(features[5][:, 0], diff[1])


def test_the_bayes_distribution_is_what_the_training_stream_samples_from():
    """The toy's training criterion rests on this: same seed, same prompts, calibrated labels."""
    import random

    import torch

    from workbench.analyses.concept_oscillation import toy, train_toy
    from workbench.analyses.concept_oscillation.study import SPEC

    n = 40_000
    train_r, bayes_r = random.Random(7), random.Random(7)
    labels, probs = [], []
    for _ in range(n):
        tokens, label = toy.training_example(SPEC, train_r)
        same, p = toy.bayes_example(SPEC, bayes_r)
        assert same == tokens
        labels.append(label)
        probs.append(p)
    p = np.asarray(probs)
    assert np.allclose(p.sum(1), 1.0) and (p > 0).all()
    # calibration, by bins of the Bayes probability of the sampled label's colour: the labels
    # fall on each colour as often as the distribution says (a wrong posterior for two disagreeing
    # sources, or a wrong noise term, shows here)
    predicted = p.reshape(-1)
    observed = np.zeros_like(p)
    observed[np.arange(n), labels] = 1
    observed = observed.reshape(-1)
    for lo, hi in [(0, 0.05), (0.05, 0.5), (0.5, 0.9), (0.9, 1.0)]:
        inside = (predicted >= lo) & (predicted < hi)
        if inside.sum() > 500:
            sd = np.sqrt((predicted[inside] * (1 - predicted[inside])).sum()) / inside.sum()
            assert abs(observed[inside].mean() - predicted[inside].mean()) < 5 * sd + 1e-3
    # the criterion itself: the excess KL of the Bayes predictor is 0, of a uniform one log K - H
    ids = {t: i for i, t in enumerate(SPEC.vocab)}
    held = toy.bayes_heldout(SPEC, ids, 300, seed=0)

    class Fixed(torch.nn.Module):
        def __init__(self, logp):
            super().__init__()
            self.logp = logp

        def forward(self, input_ids, attention_mask):
            out = torch.full((*input_ids.shape, len(ids)), -1e4, dtype=torch.float64)
            rows = torch.arange(len(input_ids))[:, None]
            out[rows, held["last"][:, None], held["colours"]] = self.logp
            return type("Out", (), {"logits": out})()

    exact = train_toy.excess_kl(Fixed(held["bayes"].log()), held)
    assert exact["excess_kl"] == pytest.approx(0.0, abs=1e-9) and exact["accuracy"] == 1.0
    uniform = train_toy.excess_kl(Fixed(torch.zeros_like(held["bayes"])), held)
    bayes = held["bayes"].numpy()
    expected = np.log(len(SPEC.colours)) - scipy_entropy(bayes, axis=1).mean()
    assert uniform["excess_kl"] == pytest.approx(expected, rel=1e-9)
