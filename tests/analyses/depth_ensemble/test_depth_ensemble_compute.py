"""The depth-ensemble study's pure parts: geometry, exits and fits against loops and scipy."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from workbench.analyses import depth_ensemble as de
from workbench.analyses.depth_ensemble import fitting
from workbench.errors import ConfigError, InputError


def _brute_angle(u, v):
    nu, nv = math.sqrt(sum(a * a for a in u)), math.sqrt(sum(b * b for b in v))
    if nu == 0 or nv == 0:
        return float("nan")
    c = sum(a * b for a, b in zip(u, v, strict=True)) / (nu * nv)
    return math.degrees(math.acos(max(-1.0, min(1.0, c))))


def _mean(values):
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite)


def test_layer_geometry_equals_a_token_by_token_loop():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(5, 7, 6)).cumsum(axis=0)
    h[2, 3] = h[1, 3]  # a zero update: its angles are undefined and left out of the mean
    g = de.layer_geometry(h)
    n_layers = 4
    assert g.n_layers == n_layers and g.n_tokens == 7
    for layer in range(n_layers):
        steps = [_brute_angle(h[layer, t], h[layer + 1, t]) for t in range(7)]
        assert g.step_angle[layer] == pytest.approx(_mean(steps), rel=1e-10)
        dh = h[layer + 1] - h[layer]
        norms = [math.sqrt(sum(x * x for x in row)) for row in dh]
        assert g.update_norm[layer] == pytest.approx(sum(norms) / 7, rel=1e-12)
        rel = [n / math.sqrt(sum(x * x for x in h[layer, t])) for t, n in enumerate(norms)]
        assert g.relative_update[layer] == pytest.approx(sum(rel) / 7, rel=1e-12)
    for layer in range(n_layers - 1):
        d0, d1 = h[layer + 1] - h[layer], h[layer + 2] - h[layer + 1]
        expected = _mean([_brute_angle(d0[t], d1[t]) for t in range(7)])
        assert g.increment_angle[layer] == pytest.approx(expected, rel=1e-10)
    for layer in range(n_layers + 1):
        expected = _mean([_brute_angle(h[layer, t], h[-1, t]) for t in range(7)])
        assert g.angle_to_final[layer] == pytest.approx(expected, rel=1e-9, abs=1e-6)
        assert g.state_norm[layer] == pytest.approx(np.linalg.norm(h[layer], axis=1).mean())
    assert g.angle_to_final[-1] == pytest.approx(0.0, abs=1e-6)


def test_increment_angles_tell_orthogonal_from_parallel_updates():
    d = 64
    start = np.zeros((1, 50, d))
    start[..., 0] = 10.0
    rng = np.random.default_rng(1)
    # independent random updates in 64 dimensions: nearly orthogonal, about 90 +- 7 degrees
    independent = np.concatenate([start, start + 0.1 * rng.normal(size=(40, 50, d)).cumsum(0)])
    # one update repeated: parallel increments
    step = 0.1 * rng.normal(size=(1, 50, d))
    tied = np.concatenate([start, start + np.arange(1, 41)[:, None, None] * step])
    assert de.layer_geometry(independent).mean_increment_angle() == pytest.approx(90, abs=3)
    assert de.layer_geometry(tied).mean_increment_angle() == pytest.approx(0, abs=1e-3)


def test_layer_geometry_refuses_a_bad_shape():
    with pytest.raises(InputError, match="n_layers"):
        de.layer_geometry(np.zeros((1, 4, 3)))


def test_exit_layers_equal_a_loop():
    rng = np.random.default_rng(2)
    top1 = rng.integers(0, 3, size=(6, 200))
    final = rng.integers(0, 3, size=200)
    top1[-1, :100] = final[:100]
    exits = de.exit_layers(top1, final)
    for t in range(200):
        expected = 6
        for layer in range(6):
            if all(top1[j, t] == final[t] for j in range(layer, 6)):
                expected = layer
                break
        assert exits[t] == expected
    assert de.early_exit_fraction(exits, 6) == pytest.approx(np.mean([e < 3 for e in exits]))
    assert de.early_exit_fraction(np.array([0, 1, 2, 3]), 4) == 0.5


def test_power_law_fit_recovers_known_parameters_exactly():
    depth = np.array([2.0, 4, 8, 16, 32, 64])
    y = 0.05 + 1.7 * depth**-1.3
    fit = de.fit_log_power_law(depth[:, None], y)
    log_c, a, l0 = fit.theta
    assert (math.exp(log_c), a, l0) == pytest.approx((1.7, 1.3, 0.05), rel=1e-7)
    assert np.abs(fit.residuals).max() < 1e-10


def test_scaling_law_fit_recovers_a_three_term_law():
    rng = np.random.default_rng(3)
    x = np.exp(rng.uniform([6, 1, 18], [9, 4, 23], size=(60, 3)))
    truth = np.array([np.log(300), 0.9, np.log(5), 1.1, np.log(500), 0.3, 1.7])
    y = fitting.predict(truth, x)
    fit = de.fit_log_power_law(x, y)
    np.testing.assert_allclose(fit.theta, truth, rtol=1e-5)


def test_standard_errors_equal_scipy_curve_fit():
    from scipy.optimize import curve_fit

    rng = np.random.default_rng(4)
    depth = np.array([3.0, 4, 6, 8, 12, 16, 24, 32])
    y = (0.2 + 3.0 * depth**-0.8) * np.exp(0.02 * rng.normal(size=depth.size))
    fit = de.fit_log_power_law(depth[:, None], y)

    def model(d, log_c, a, l0):
        return np.log(l0 + np.exp(log_c) * d**-a)

    popt, pcov = curve_fit(model, depth, np.log(y), p0=fit.theta, method="lm", xtol=1e-14)
    np.testing.assert_allclose(fit.theta, popt, rtol=1e-6)
    np.testing.assert_allclose(fit.se, np.sqrt(np.diag(pcov)), rtol=1e-4)


def test_no_standard_error_without_spare_degrees_of_freedom():
    depth = np.array([4.0, 8, 16])
    fit = de.fit_log_power_law(depth[:, None], 0.1 + depth**-1.0)
    assert np.isnan(fit.se).all()
    with pytest.raises(InputError, match="cannot determine"):
        de.fit_log_power_law(depth[:2, None], [1.0, 0.5])
    with pytest.raises(InputError, match="positive"):
        de.fit_log_power_law(depth[:, None], [1.0, 0.0, 0.5])


def test_fit_toy_bootstraps_held_out_examples():
    rng = np.random.default_rng(5)
    depths = [4, 8, 16, 32]
    mean = 0.01 + 0.2 / np.array(depths, float)
    per_example = mean[:, None] * rng.exponential(size=(4, 3000))
    fit = de.fit_toy("independent", depths, per_example, n_bootstrap=50, seed=1)
    np.testing.assert_allclose(fit.losses, per_example.mean(axis=1))
    assert fit.a == pytest.approx(1.0, abs=0.25)
    assert 0 < fit.a_bootstrap_se < 0.5 and fit.a_low < fit.a < fit.a_high
    assert fit.n_bootstrap == 50
    again = de.fit_toy("independent", depths, per_example, n_bootstrap=50, seed=1)
    assert again.to_dict() == fit.to_dict()
    assert de.ToyFit.from_dict(json.loads(json.dumps(fit.to_dict()))).to_dict() == fit.to_dict()
    slope = -np.polyfit(np.log(depths), np.log(fit.losses), 1)[0]
    assert fit.loglog_slope == pytest.approx(slope)


@pytest.fixture(scope="module")
def chinchilla():
    runs = de.read_runs(de.BUILTIN_CSV)
    return runs, de.fit_scaling_law(runs, n_bootstrap=40, seed=0)


def test_chinchilla_refit_lands_inside_the_papers_error_bars(chinchilla):
    runs, fit = chinchilla
    assert len(runs.loss) == 245 and fit.n_runs == 203  # 3 runs tie at the 40th-highest loss
    a_l, se = fit.value("a_l"), fit.error("a_l")
    assert abs(a_l - 1.2) < 0.3  # the paper: 1.2 +- 0.3
    assert abs(a_l - 1.07) < 0.24  # the release notebook: 1.07 +- 0.24
    assert 0.15 < se < 0.35
    assert abs(fit.value("a_m") - 0.96) < 0.08 and abs(fit.value("a_D") - 0.299) < 0.014
    assert fit.value("L0") == pytest.approx(1.74, abs=0.03)
    assert fit.error("a_D") == pytest.approx(0.014, abs=0.004)
    assert fit.n_bootstrap == 40 and 0.05 < fit.bootstrap_se[de.PARAMS.index("a_l")] < 0.5
    assert np.sqrt(np.mean(fit.residuals**2)) < 0.01


def test_scaling_fit_round_trips_and_draws(chinchilla):
    _, fit = chinchilla
    again = de.ScalingFit.from_dict(json.loads(json.dumps(fit.to_dict(), allow_nan=False)))
    assert again.to_dict() == fit.to_dict()
    fig = fit.figure()
    assert len(fig.data) == 3
    assert fig.data[1].name.startswith("c_l / l^a_l, a_l = 1.1")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("d_model,n_layers,loss\n512,8,3.0\n", "lacks column.*num_tokens"),
        ("d_model,n_layers,num_tokens,loss\n512,8,1e9,3.0\n512,8,1e9,-1\n", "loss.*lines 3"),
        ("d_model,n_layers,num_tokens,loss\n512,8,1e9,3.0\n512,2,1e9,3.1\n", "lines 3 are too"),
        ("d_model,n_layers,num_tokens,loss\n512,8,abc,3.0\n", "num_tokens.*lines 2"),
        ("", "lacks column"),
    ],
)
def test_bad_scaling_csvs_fail_in_one_line(tmp_path, text, match):
    path = tmp_path / "runs.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=match) as info:
        de.read_runs(str(path))
    assert "\n" not in str(info.value)


def test_missing_or_unknown_scaling_sources(tmp_path):
    with pytest.raises(InputError, match="is not a file"):
        de.read_runs(str(tmp_path / "nope.csv"))
    with pytest.raises(InputError, match="unknown scaling_csv"):
        de.read_runs("builtin:kaplan")


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("toy_depths", "4,0,8", "below 1"),
        ("toy_depths", "8,4,16", "not sorted"),
        ("toy_depths", "4,4,8", "not sorted"),
        ("toy_depths", "4,8", "at least 3"),
        ("toy_depths", "4,8.5,16", "integer depths"),
        ("teacher", "shared", "teacher='shared' is not accepted"),
        ("preset", "gpu", "preset='gpu'"),
        ("toy_steps", 0, "toy_steps must be"),
        ("toy_pool", 2.5, "toy_pool must be"),
        ("toy_temperature", -1.0, "toy_temperature must be"),
        ("n_texts", 0, "n_texts must be"),
        ("model", " ", "model must name"),
        ("scaling_csv", None, "scaling_csv must be"),
    ],
)
def test_bad_config_values_fail_in_one_line(field, value, match):
    with pytest.raises(ConfigError, match=match) as info:
        de.DepthEnsembleConfig(**{field: value})
    assert "\n" not in str(info.value)


def test_config_resolves_the_preset_and_parts():
    config = de.DepthEnsembleConfig(toy_steps=100, toy_temperature=0.5, teacher="tied")
    toy = config.toy
    assert (toy.steps, toy.temperature, toy.pool) == (100, 0.5, de.PRESETS["cpu"].pool)
    assert config.teachers == ("tied",) and config.depths == (4, 8, 16, 32)
    paper = de.DepthEnsembleConfig(preset="paper").toy
    assert (paper.steps, paper.batch_size, paper.lr, paper.teacher_depth) == (
        40000,
        1024,
        6e-4,
        128,
    )
    # the model's cache key ignores the toys' fields
    a, b = de.DepthEnsembleConfig(n_texts=5), de.DepthEnsembleConfig(n_texts=6)
    assert a.part_key(a.MODEL_FIELDS) != b.part_key(b.MODEL_FIELDS)
    same = de.DepthEnsembleConfig(n_texts=5, toy_steps=9, teacher="tied", scaling_csv="")
    assert a.part_key(a.MODEL_FIELDS) == same.part_key(a.MODEL_FIELDS)
    assert de.parse_depths([1, 2, 3]) == (1, 2, 3)
