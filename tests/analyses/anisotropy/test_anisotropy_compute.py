"""The anisotropy study's pure parts: compute vs brute force, config, results, figures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench import geometry
from workbench.analyses import anisotropy as an
from workbench.errors import ConfigError, InputError


def _states(seed: int = 0, n: int = 300, d: int = 12, layers: int = 2):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(0, 40, size=n)
    table = rng.normal(size=(50, d))
    states = {
        layer: table[token_ids] + 0.3 * rng.normal(size=(n, d)) + layer for layer in range(layers)
    }
    counts = np.bincount(token_ids, minlength=50) + rng.integers(1, 5, size=50)
    return states, token_ids, counts, table


def test_layer_metrics_equal_the_geometry_functions():
    x = _states()[0][1]
    got = an.layer_metrics(x, 1, max_points=10_000)
    assert got.layer == 1
    assert got.mean_cosine == pytest.approx(geometry.mean_cosine(x), rel=1e-12)
    assert got.mev == pytest.approx(geometry.mev(x), rel=1e-12)
    assert got.isoscore == pytest.approx(geometry.isoscore(x), rel=1e-12)
    assert got.effective_rank == pytest.approx(geometry.effective_rank(x), rel=1e-12)
    assert got.twonn == pytest.approx(geometry.twonn(x), rel=1e-12)
    sub = an.layer_metrics(x, 1, max_points=100, seed=3)
    rows = np.random.default_rng(3).choice(len(x), 100, replace=False)
    assert sub.twonn == pytest.approx(geometry.twonn(x[rows]), rel=1e-12)


def test_measure_checkpoint_matches_direct_frequency_correlations():
    states, token_ids, counts, table = _states()
    result = an.measure_checkpoint("step-20", states, token_ids, counts, table, max_points=1000)
    assert result.step == 20 and result.n_tokens == len(token_ids)
    assert [m.layer for m in result.layers] == [0, 1]
    for layer, r in zip((0, 1), result.freq_distance_by_layer, strict=True):
        direct = geometry.frequency_distance_correlation(states[layer], token_ids, counts)
        assert r == pytest.approx(direct.r, rel=1e-12)
    np.testing.assert_array_equal(result.frequency.token_ids, direct.token_ids)
    embed = geometry.embedding_frequency_correlation(table, counts)
    assert result.embedding_freq_corr == pytest.approx(embed.r, rel=1e-12)
    assert result.freq_distance_corr == result.freq_distance_by_layer[-1]


def test_tangent_basis_recovers_the_displacement_subspace():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(16, 3)))[0]
    base = rng.normal(size=(50, 16))
    moved = [base + rng.normal(size=(50, 3)) @ basis.T for _ in range(2)]
    q = an.tangent_basis(base, moved, 3, layer=1, site="resid_post.1", fit=["step-10", "step-20"])
    singular = np.linalg.svd(basis.T @ q.basis)[1]
    np.testing.assert_allclose(singular, 1.0, atol=1e-8)
    assert q.fit_revisions == ("step-10", "step-20") and q.basis.shape == (16, 3)
    with pytest.raises(InputError, match="exceeds the width"):
        an.tangent_basis(base, moved, 17, layer=1, site="s", fit=["a", "b"])


def test_tangent_point_is_the_energy_test():
    rng = np.random.default_rng(1)
    q = an.TangentBasis(0, "resid_post.0", ("step-10",), np.linalg.qr(rng.normal(size=(20, 4)))[0])
    grads = rng.normal(size=(20, 30))
    point = an.tangent_point(q, grads, "step-50", n_null=15, seed=2)
    test = geometry.tangent_energy_test(q.basis, grads, n_null=15, random_state=2)
    assert point.step == 50 and point.share == pytest.approx(test.share, rel=1e-12)
    assert point.null_mean == pytest.approx(float(np.mean(test.null_shares)), rel=1e-12)
    assert point.p_value == test.p_value


@pytest.mark.parametrize(
    ("revision", "step"),
    [("step-200", 200), ("step1000", 1000), ("main", None), (None, None), ("stepx", None)],
)
def test_step_of(revision, step):
    assert an.step_of(revision) == step


def _result() -> an.AnisotropyResult:
    states, token_ids, counts, table = _states()
    checkpoints = [
        an.measure_checkpoint(rev, states, token_ids, counts, table, max_points=500)
        for rev in ("step-0", "step-10", "step-20", "step-50")
    ]
    points = (
        an.TangentPoint("step-20", 20, 0.3, 0.1, 0.05),
        an.TangentPoint("step-50", 50, 0.25, 0.1, 0.05),
    )
    tangent = an.TangentResult(1, "resid_post.1", 4, 12, ("step-10",), points)
    return an.AnisotropyResult("toy", "resid_post", tuple(checkpoints), tangent, ("a note",))


def test_results_round_trip_through_json():
    result = _result()
    again = an.AnisotropyResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.to_dict() == result.to_dict()
    assert again.final.frequency.r == result.final.frequency.r
    np.testing.assert_array_equal(again.final.frequency.distance, result.final.frequency.distance)
    assert again.tangent.steps == [20, 50] and again.notes == ("a note",)
    assert again.rows() == result.rows()


def test_metrics_keys_are_the_module_constant():
    m = _result().metrics()
    assert tuple(m) == an.METRIC_KEYS
    assert [set(r) for r in m["per_layer"]] == [{"layer", *an.LAYER_METRICS}] * 2
    assert len(m["per_checkpoint"]) == 4 * 2
    assert m["tangent_energy_share"] == 0.25 and m["tangent_p_value"] == 0.05
    json.dumps(m, allow_nan=False)


def test_every_figure_kind_draws():
    result = _result()
    assert result.figure_kinds() == list(an.FIGURES)
    for kind in result.figure_kinds():
        fig = result.figure(kind)
        assert fig.data and fig.layout.title.text
    single = an.AnisotropyResult("toy", "resid_post", result.checkpoints[:1])
    assert single.figure_kinds() == ["by_layer", "frequency_distance"]
    with pytest.raises(InputError, match="not available"):
        single.figure("tangent_test")
    with pytest.raises(InputError, match="unknown figure kind"):
        result.figure("nope")


def test_results_check_their_shapes():
    result = _result()
    c = result.checkpoints[0]
    with pytest.raises(InputError, match="frequency correlations"):
        an.CheckpointResult("x", None, c.layers, (0.1,), None, 3)
    with pytest.raises(InputError, match="no checkpoint"):
        an.AnisotropyResult("toy", "resid_post", ())
    assert result.final.frequency.distance.flags.writeable is False


def test_config_from_params_validation_and_key():
    params = {"model": "m", "n_texts": 7, "out_dir": "x", "unrelated": object()}
    config = an.AnisotropyConfig.from_params(params)
    assert config.model == "m" and config.n_texts == 7 and config.site == "resid_post"
    assert config.to_params()["n_texts"] == 7
    with pytest.raises(ConfigError, match="site='resid' is not accepted"):
        an.AnisotropyConfig(site="resid")
    with pytest.raises(ConfigError, match="n_texts must be an integer of at least 1"):
        an.AnisotropyConfig(n_texts=0)
    with pytest.raises(ConfigError, match="checkpoints"):
        an.AnisotropyConfig(checkpoints=" ")
    base = an.AnisotropyConfig()
    assert base.key() == an.AnisotropyConfig(device="cpu", batch_size=3).key()
    assert base.key() != an.AnisotropyConfig(n_texts=3).key()
    assert base.key("checkpoints") == an.AnisotropyConfig(checkpoints="none").key("checkpoints")


def test_peak_gain_is_the_rise_of_the_peak_over_the_first_value():
    # tiny-lm's last layer: up from initialization, a peak at step 10, then down
    assert an.peak_gain([0.1, 0.99, 0.98, 0.28]) == (pytest.approx(0.89), 1)
    assert an.peak_gain([0.5, 0.2, 0.4]) == (pytest.approx(-0.1), 2)  # never above the start
    assert an.peak_gain([0.3]) is None  # a single checkpoint: no curve
