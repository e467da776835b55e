"""Probes: the scikit-learn contract, LogisticRegression and brute-force references, streaming
fits from an ActivationStore, sweep folds against cross_val_score, controls, selectivity, errors.

``check_estimator`` runs in full through ``parametrize_with_checks``; no check is skipped by us
(scikit-learn itself skips its two array-API checks unless ``SCIPY_ARRAY_API`` is set).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy.special import softmax
from scipy.stats import t as student_t
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import PredefinedSplit, cross_val_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from workbench import capture, load_model
from workbench.errors import FigureKindError, ProbeError, SiteError, WorkbenchError
from workbench.inputs import read_texts
from workbench.probes import (
    LinearProbe,
    MassMeanProbe,
    ProbeSweepResult,
    control_task_labels,
    cv_folds,
    probe_sweep,
    shuffled_labels,
)
from workbench.probes.results import COLUMNS

TEXTS = read_texts("builtin:pydoc", limit=12)


def blobs(n=240, d=6, k=3, seed=0, shift=1.0):
    """Anisotropic Gaussian classes with an offset: hard enough that probes disagree a little."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    scales = np.array([1, 2, 5, 0.5, 1, 10, 3, 0.2][:d])
    x = rng.normal(size=(n, d)) * scales + 3.0
    x[:, 0] += shift * y
    x[:, 1] -= 0.5 * shift * (y == 1)
    return x, y


@pytest.fixture(scope="module")
def subject(tiny_dir):
    return load_model(tiny_dir("gpt2"), device="cpu")


@pytest.fixture(scope="module")
def store(subject, tmp_path_factory):
    out = tmp_path_factory.mktemp("probe-store") / "s"
    return capture(
        subject,
        TEXTS,
        sites="resid_post",
        max_length=32,
        out=out,
        shard_bytes=20_000,
        progress=False,
    )


@pytest.fixture(scope="module")
def acts(subject):
    return capture(subject, TEXTS, sites="resid_post", max_length=32, progress=False)


# --- the scikit-learn estimator contract ---------------------------------------------------


@parametrize_with_checks([LinearProbe(device="cpu"), MassMeanProbe()])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# --- LinearProbe against scikit-learn ------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "C", "fit_intercept"), [(2, 1.0, True), (3, 1.0, True), (4, 0.05, True), (3, 1.0, False)]
)
def test_linear_probe_matches_logistic_regression(k, C, fit_intercept):
    x, y = blobs(k=k)
    ours = LinearProbe(C=C, fit_intercept=fit_intercept, tol=1e-6, device="cpu").fit(x, y)
    ref = LogisticRegression(C=C, fit_intercept=fit_intercept, tol=1e-10, max_iter=10_000)
    ref.fit(x, y)
    assert ours.coef_.shape == ref.coef_.shape == ((1, 6) if k == 2 else (k, 6))
    np.testing.assert_allclose(ours.predict_proba(x), ref.predict_proba(x), atol=1e-4, rtol=0)
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-3 * scale, rtol=0)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-3 * max(scale, 1), rtol=0)
    assert (ours.predict(x) == ref.predict(x)).mean() >= 0.99


def test_preconditioning_changes_the_path_not_the_solution():
    x, y = blobs(k=3, n=400)
    pre = LinearProbe(tol=1e-6, device="cpu").fit(x, y)
    plain = LinearProbe(tol=1e-6, precondition=False, max_iter=5000, device="cpu").fit(x, y)
    np.testing.assert_allclose(pre.predict_proba(x), plain.predict_proba(x), atol=1e-4)
    assert pre.n_iter_[0] * 3 < plain.n_iter_[0]


def test_warm_start_and_string_labels():
    x, y = blobs(k=3)
    names = np.array(["noun", "verb", "adj"])[y]
    probe = LinearProbe(warm_start=True, tol=1e-6, device="cpu").fit(x, names)
    first = probe.n_iter_[0]
    probe.fit(x, names)
    assert probe.n_iter_[0] < first
    assert set(probe.predict(x)) <= set(names) and list(probe.classes_) == ["adj", "noun", "verb"]


# --- MassMeanProbe against a brute force ---------------------------------------------------


@pytest.mark.parametrize("k", [2, 4])
def test_mass_mean_matches_brute_force(k):
    x, y = blobs(k=k, seed=3)
    probe = MassMeanProbe().fit(x, y)
    means = np.stack([x[y == c].mean(0) for c in range(k)])
    variance = sum(((x[i] - means[y[i]]) ** 2).sum() for i in range(len(x))) / x.size
    dist2 = np.array([[((row - m) ** 2).sum() for m in means] for row in x])
    np.testing.assert_allclose(probe.means_, means, rtol=1e-12)
    assert probe.variance_ == pytest.approx(variance, rel=1e-10)
    np.testing.assert_allclose(
        probe.predict_proba(x), softmax(-dist2 / (2 * variance), axis=1), atol=1e-10
    )
    # the probe decides by a linear function, the reference by distances: equal where not tied
    nearest = np.sort(dist2, axis=1)
    clear = nearest[:, 1] - nearest[:, 0] > 1e-9 * nearest[:, 1]
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(probe.predict(x)[clear], dist2.argmin(1)[clear])
    if k == 2:  # Marks & Tegmark: direction mu_1 - mu_0, threshold at the midpoint
        np.testing.assert_allclose(probe.coef_[0], (means[1] - means[0]) / variance, rtol=1e-10)
        midpoint = (means[0] + means[1]) / 2
        assert abs(probe.decision_function(midpoint[None])[0]) < 1e-9


# --- fitting from an ActivationStore -------------------------------------------------------


def test_fit_store_streams_to_the_in_memory_fit(store):
    site = "resid_post.1"
    assert len(store.manifest["shards"]) > 2
    labels = store.token_ids.numpy() % 3
    x = store.read(site)
    memory = LinearProbe(tol=1e-6, random_state=0, device="cpu").fit(x, labels)
    streamed = LinearProbe(tol=1e-6, random_state=0, device="cpu")
    streamed.fit_store(store, site, labels, batch_size=7, in_memory=False)
    np.testing.assert_allclose(streamed.predict_proba(x), memory.predict_proba(x), atol=1e-4)
    scale = np.abs(memory.coef_).max()
    np.testing.assert_allclose(streamed.coef_, memory.coef_, atol=1e-3 * scale)
    assert streamed.n_features_in_ == x.shape[1]
    auto = LinearProbe(tol=1e-6, random_state=0, device="cpu").fit_store(store, site, labels)
    np.testing.assert_allclose(auto.coef_, memory.coef_, atol=1e-6 * scale)

    mass = MassMeanProbe().fit_store(store, site, labels, batch_size=5)
    ref = MassMeanProbe().fit(x, labels)
    np.testing.assert_allclose(mass.means_, ref.means_, rtol=1e-10, atol=1e-12)
    assert mass.variance_ == pytest.approx(ref.variance_, rel=1e-10)


def test_fit_store_takes_per_text_labels(store):
    per_text = np.arange(len(TEXTS)) % 2
    per_row = np.repeat(per_text, np.diff(store.offsets.numpy()))
    a = MassMeanProbe().fit_store(store, "resid_post.0", per_text)
    b = MassMeanProbe().fit(store.read("resid_post.0"), per_row)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10)


# --- folds and controls --------------------------------------------------------------------


def test_cv_folds_are_deterministic_stratified_and_keep_texts_whole():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 100)
    a, b = cv_folds(y, cv=5, seed=1), cv_folds(y, cv=5, seed=1)
    assert np.array_equal(a, b) and not np.array_equal(a, cv_folds(y, cv=5, seed=2))
    for c in range(3):
        counts = np.bincount(a[y == c], minlength=5)
        assert counts.max() - counts.min() <= 1
    offsets = np.array([0, 3, 4, 9, 15, 16, 20, 24])
    tokens_y = rng.integers(0, 2, 24)
    folds = cv_folds(tokens_y, offsets, cv=3, seed=0)
    for i in range(len(offsets) - 1):
        assert len(set(folds[offsets[i] : offsets[i + 1]])) == 1
    assert len(set(cv_folds(tokens_y, offsets, cv=3, seed=0, groups="row"))) == 3


def test_control_task_label_is_a_function_of_token_type():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50, 2000)
    labels = rng.choice(4, size=2000, p=[0.55, 0.25, 0.15, 0.05])
    control = control_task_labels(tokens, labels, seed=0)
    for token in np.unique(tokens):
        assert len(set(control[tokens == token])) == 1
    again = control_task_labels(tokens, labels, seed=0)
    assert np.array_equal(control, again)
    assert not np.array_equal(control, control_task_labels(tokens, labels, seed=1))
    assert set(control) <= set(labels)
    shuffled = shuffled_labels(labels, seed=0)
    assert sorted(shuffled) == sorted(labels) and not np.array_equal(shuffled, labels)


# --- the sweep against cross_val_score -----------------------------------------------------


def test_sweep_accuracy_matches_cross_val_score_on_the_same_folds():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, 300)
    x = rng.normal(size=(300, 6)) + 0.6 * np.eye(3, 6)[y]
    data = {"resid_post.0": x, "resid_post.1": 2 * x[:, ::-1] + 1}
    result = probe_sweep(
        data, y, seeds=2, cv=4, control=None, probe=LinearProbe(tol=1e-6), progress=False
    )
    mass = probe_sweep(data, y, seeds=2, cv=4, control=None, probe="mass_mean", progress=False)
    generic = probe_sweep(
        data, y, seeds=1, cv=4, control=None, probe=LogisticRegression(), progress=False
    )
    for seed in range(2):
        split = PredefinedSplit(cv_folds(y, cv=4, seed=seed))
        for site, xs in data.items():  # noqa: B007 (used in query strings)
            ref = LogisticRegression(tol=1e-10, max_iter=10_000)
            expected = cross_val_score(ref, xs, y, cv=split)
            here = result.scores.query("site == @site and seed == @seed").sort_values("fold")
            n_test = here["n_test"].to_numpy()
            assert np.all(np.abs(here["accuracy"].to_numpy() - expected) * n_test <= 1 + 1e-9)
            expected_mm = cross_val_score(MassMeanProbe(), xs, y, cv=split)
            got_mm = mass.scores.query("site == @site and seed == @seed").sort_values("fold")
            np.testing.assert_allclose(got_mm["accuracy"], expected_mm, atol=1e-12)
            if seed == 0:
                got = generic.scores.query("site == @site").sort_values("fold")
                expected_lr = cross_val_score(LogisticRegression(), xs, y, cv=split)
                np.testing.assert_allclose(got["accuracy"], expected_lr, atol=1e-12)
    again = probe_sweep(
        data, y, seeds=2, cv=4, control=None, probe=LinearProbe(tol=1e-6), progress=False
    )
    assert again.scores.equals(result.scores)


def test_sweep_on_activations_with_control_task(acts, store):
    labels = acts.token_ids.numpy() % 2
    result = probe_sweep(
        acts, labels, cv=3, seeds=2, control="control_task", layers="0,-1", progress=False
    )
    assert result.sites == ["resid_post.0", "resid_post.2"]
    assert len(result.scores) == 2 * 2 * 3 * 2 and list(result.scores.columns) == list(COLUMNS)
    summary = result.summary()
    assert np.allclose(summary["selectivity"], summary["accuracy"] - summary["control"])
    from_store = probe_sweep(
        store, labels, cv=3, seeds=2, control="control_task", layers="0,-1", progress=False
    )
    np.testing.assert_allclose(
        from_store.scores["accuracy"], result.scores["accuracy"], atol=1.5 / len(labels)
    )


def test_per_text_labels_pool_or_expand(acts):
    text_labels = np.arange(len(TEXTS)) % 2
    pooled = probe_sweep(
        acts, text_labels, sites="resid_post.1", pool="mean", cv=3, seeds=1, progress=False
    )
    offsets = acts.offsets.numpy()
    means = np.stack(
        [
            acts["resid_post.1"][offsets[i] : offsets[i + 1]].double().mean(0).numpy()
            for i in range(12)
        ]
    )
    direct = probe_sweep({"resid_post.1": means}, text_labels, cv=3, seeds=1, progress=False)
    np.testing.assert_allclose(pooled.scores["accuracy"], direct.scores["accuracy"], atol=1e-12)
    assert pooled.n_rows == 12 and pooled.labels == "text"
    expanded = probe_sweep(acts, text_labels, sites="resid_post.1", cv=3, seeds=1, progress=False)
    assert expanded.n_rows == len(acts.token_ids)
    assert expanded.scores["n_test"].sum() == 2 * expanded.n_rows  # probe + control, each row once


# --- results: selectivity, intervals, dict form, figure ------------------------------------


def make_result(seeds, probe_acc, control_acc, cv=2):
    rows = []
    for s in range(seeds):
        for f in range(cv):
            for task, acc in (("probe", probe_acc[s][f]), ("control", control_acc[s][f])):
                rows.append(("resid_post.4", 4, s, f, task, acc, 80, 20, 7))
    import pandas as pd

    scores = pd.DataFrame(rows, columns=list(COLUMNS))
    return ProbeSweepResult(scores, "linear", cv, seeds, "shuffled", 0.4, 100, 3, "row", {})


def test_selectivity_and_intervals_arithmetic():
    probe_acc = [[0.8, 0.9], [0.7, 0.8], [0.9, 0.9]]
    control_acc = [[0.5, 0.6], [0.4, 0.4], [0.6, 0.5]]
    row = make_result(3, probe_acc, control_acc).summary().iloc[0]
    per_seed = np.array([0.85, 0.75, 0.9])
    sel = per_seed - np.array([0.55, 0.4, 0.55])
    half = student_t.ppf(0.975, 2) * sel.std(ddof=1) / math.sqrt(3)
    assert row["accuracy"] == pytest.approx(per_seed.mean())
    assert row["selectivity"] == pytest.approx(sel.mean())
    assert row["selectivity_lo"] == pytest.approx(sel.mean() - half)
    assert row["selectivity_hi"] == pytest.approx(sel.mean() + half)
    one = make_result(1, [[0.8, 0.6]], [[0.5, 0.5]]).summary().iloc[0]  # one seed: over folds
    half = student_t.ppf(0.975, 1) * np.std([0.3, 0.1], ddof=1) / math.sqrt(2)
    assert one["selectivity"] == pytest.approx(0.2) and one["selectivity_hi"] == pytest.approx(
        0.2 + half
    )


def test_result_dict_round_trip_and_figure():
    result = make_result(3, [[0.8, 0.9], [0.7, 0.8], [0.9, 0.9]], [[0.5] * 2] * 3)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["summary"]["selectivity"] == pytest.approx([np.mean([0.85, 0.75, 0.9]) - 0.5])
    back = ProbeSweepResult.from_dict(data)
    assert back.scores.equals(result.scores)
    fig = result.figure()
    assert [t.name for t in fig.data] == ["probe accuracy", "control (shuffled)", "selectivity"]
    assert list(fig.data[0].x) == [4] and fig.layout.template.layout.font.family.startswith("Helv")
    assert result.figure_kinds() == ["layers"]
    with pytest.raises(FigureKindError, match="unknown figure kind 'pie'; use one of layers"):
        result.figure("pie")
    with pytest.raises(ValueError, match="rows"):
        ProbeSweepResult(result.scores.iloc[1:], "linear", 2, 3, "shuffled", 0.4, 100, 3, "row", {})


# --- bad input -----------------------------------------------------------------------------


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and isinstance(exc.value, WorkbenchError)
    return message


def test_bad_input_errors(acts, store):
    x, y = blobs()
    with pytest.raises(ProbeError) as exc:
        probe_sweep({"resid_post.0": x}, y[:-5], progress=False)
    assert "235 labels" in one_line(exc) and "240" in one_line(exc)
    n_rows, n_texts = len(acts.token_ids), len(TEXTS)
    with pytest.raises(ProbeError) as exc:
        LinearProbe().fit_store(store, "resid_post.0", np.zeros(7))
    assert f"{n_rows}" in one_line(exc) and f"{n_texts}" in one_line(exc)
    for estimator in (LinearProbe(), MassMeanProbe()):
        with pytest.raises(ProbeError, match="one class") as exc:
            estimator.fit(x, np.zeros(len(x)))
        one_line(exc)
    with pytest.raises(ProbeError, match="one class"):
        probe_sweep({"resid_post.0": x}, np.ones(len(x)), progress=False)
    with pytest.raises(ProbeError, match="continuous"):
        probe_sweep({"resid_post.0": x}, x[:, 0], progress=False)
    with pytest.raises(SiteError, match="mlp_out") as exc:
        probe_sweep(acts, acts.token_ids.numpy() % 2, sites="mlp_out.1", progress=False)
    one_line(exc)
    with pytest.raises(SiteError, match="layer 7") as exc:
        probe_sweep(acts, acts.token_ids.numpy() % 2, layers=[7], progress=False)
    one_line(exc)
    with pytest.raises(ProbeError, match="control"):
        probe_sweep({"resid_post.0": x}, y, control="control_task", progress=False)
    with pytest.raises(ProbeError, match="control"):
        probe_sweep({"resid_post.0": x}, y, control="bogus", progress=False)
    with pytest.raises(ProbeError, match="cv=50"):
        probe_sweep(acts, acts.token_ids.numpy() % 2, cv=50, progress=False)
    with pytest.raises(ProbeError, match="C=-1"):
        LinearProbe(C=-1).fit(x, y)
    with pytest.raises(SiteError, match=r"resid_post\.9"):
        MassMeanProbe().fit_store(store, "resid_post.9", np.zeros(n_rows))


def test_device_cuda_when_available():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x, y = blobs(k=3)
    gpu = LinearProbe(tol=1e-6, device="cuda").fit(x, y)
    cpu = LinearProbe(tol=1e-6, device="cpu").fit(x, y)
    np.testing.assert_allclose(gpu.predict_proba(x), cpu.predict_proba(x), atol=1e-4)
