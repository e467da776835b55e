"""The anisotropy study: checkpoint sweep, caching, tangent test pieces, and the notebook."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench import geometry, load_model
from workbench.analyses import anisotropy as an
from workbench.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def config(tiny_lm_dir):
    return an.AnisotropyConfig(
        model=str(tiny_lm_dir),
        checkpoints="all",
        n_texts=24,
        max_length=24,
        max_points=400,
        tangent_rank=4,
        tangent_fit=1,
        device="cpu",
    )


@pytest.fixture(scope="module")
def study(config, tmp_path_factory):
    cache = tmp_path_factory.mktemp("aniso-cache")
    sweep, tangent = an.run_study(config, cache_dir=cache, progress=False)
    return sweep, tangent, cache


def test_sweep_covers_every_checkpoint_and_layer(study):
    sweep, _, _ = study
    assert [r.step for r in sweep.results] == [0, 10, 20, 50]
    rows = sweep.rows()
    assert len(rows) == 4 * 2 and {r["layer"] for r in rows} == {0, 1}
    for row in rows:
        assert -1 <= row["mean_cosine"] <= 1 and 0 <= row["isoscore"] <= 1
        assert 1 <= row["effective_rank"] <= 32 and row["twonn"] > 0


def test_layer_metrics_equal_geometry_on_the_captured_rows(config):
    from workbench import capture
    from workbench.inputs import read_texts

    subject = load_model(config.model, revision="step-20", device="cpu")
    acts = capture(
        subject,
        read_texts(config.text_source, config.n_texts),
        sites="resid_post.1",
        max_length=config.max_length,
        progress=False,
    )
    x = acts["resid_post.1"].double().numpy()
    got = an.layer_metrics(x, max_points=10_000)
    assert got["mean_cosine"] == pytest.approx(geometry.mean_cosine(x))
    assert got["isoscore"] == pytest.approx(geometry.isoscore(x))
    assert got["twonn"] == pytest.approx(geometry.twonn(x))


def test_cache_makes_a_rerun_load_no_model(config, study, monkeypatch):
    sweep, _, cache = study

    def no_loading(*args, **kwargs):
        raise AssertionError("a cached checkpoint was recomputed")

    monkeypatch.setattr(an, "load_model", no_loading)
    again = an.sweep_checkpoints(config, cache_dir=cache, progress=False)
    assert again.rows() == sweep.rows()


def test_metrics_block_has_the_issue_keys(study):
    sweep, tangent, _ = study
    m = an.metrics(sweep, tangent)
    assert [set(r) for r in m["per_layer"]] == [{"layer", *an.LAYER_METRICS}] * 2
    assert {"step", "layer", "mean_cosine", "isoscore", "effective_rank", "twonn"} <= set(
        m["per_checkpoint"][0]
    )
    for key in ("freq_distance_corr", "tangent_energy_share", "tangent_p_value"):
        assert isinstance(m[key], float)
    assert 0 < m["tangent_p_value"] <= 1
    json.dumps(m)


def test_tangent_result_is_tested_on_the_later_checkpoints(study):
    _, tangent, _ = study
    assert tangent.fit_revisions == ["step-10"] and tangent.steps == [20, 50]
    assert all(0 <= s <= 1 for s in tangent.shares)
    assert all(abs(n - 4 / 32) < 0.1 for n in tangent.null_means)  # random rank-4 share of 32 dims


def test_tangent_basis_recovers_the_displacement_subspace():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(16, 3)))[0]
    moves = [torch.from_numpy(rng.normal(size=(50, 3)) @ basis.T) for _ in range(2)]
    q = an.tangent_basis(moves, 3)
    np.testing.assert_allclose(np.abs(np.linalg.svd(basis.T @ q)[1]), 1.0, atol=1e-8)


def test_representation_gradients_match_autograd_on_hidden_states(config):
    subject = load_model(config.model, revision="step-50", device="cpu")
    texts = ["The quick brown fox.", "Objects are abstractions of data."]
    g = an.representation_gradients(subject, texts, "resid_post.0", config)
    for i, text in enumerate(texts):
        enc = subject.tokenizer(text, return_tensors="pt")
        subject.model.zero_grad()
        out = subject.model(**enc, labels=enc["input_ids"], output_hidden_states=True)
        hidden = out.hidden_states[1]
        (grad,) = torch.autograd.grad(out.loss, hidden)
        n = enc["input_ids"].shape[1]
        start = sum(len(subject.tokenizer(t)["input_ids"]) for t in texts[:i])
        # the batched loss averages over all real tokens of the batch, HF's over this text alone
        scale = (n - 1) / sum(len(subject.tokenizer(t)["input_ids"]) - 1 for t in texts)
        np.testing.assert_allclose(
            g[:, start : start + n].T, grad[0].double().numpy() * scale, atol=1e-6
        )


def test_checkpoint_spec_errors(tmp_path):
    with pytest.raises(ConfigError, match="needs a folder of step-N checkpoints"):
        an.resolve_checkpoints(str(tmp_path), "all")
    assert an.resolve_checkpoints("x", "step8000,step1000") == ["step1000", "step8000"]
    assert an.resolve_checkpoints("x", "none") == [None]
    with pytest.raises(ConfigError, match="n_texts"):
        an.AnisotropyConfig(n_texts=0)


def test_notebook_runs_under_papermill(tiny_lm_dir, tmp_path):
    papermill = pytest.importorskip("papermill")
    out = tmp_path / "run"
    papermill.execute_notebook(
        str(REPO / "notebooks" / "anisotropy.ipynb"),
        str(tmp_path / "executed.ipynb"),
        parameters={
            "model": str(tiny_lm_dir),
            "checkpoints": "all",
            "n_texts": 16,
            "max_length": 24,
            "max_points": 300,
            "tangent_rank": 4,
            "tangent_fit": 1,
            "device": "cpu",
            "out_dir": str(out),
        },
        cwd=str(REPO),
        progress_bar=False,
        kernel_name="python3",
    )
    record = json.loads((out / "results.json").read_text())
    assert record["analysis"] == "anisotropy" and record["params"]["n_texts"] == 16
    assert len(record["metrics"]["per_checkpoint"]) == 4 * 2
    assert record["provenance"]["revision"] == "step-50"
    names = {Path(f).name for f in record["figures"]}
    for stem in ("by_layer", "layer_step_heatmaps", "frequency_distance", "tangent_test"):
        for ext in ("pdf", "svg", "png", "html"):
            assert f"{stem}.{ext}" in names
    for f in record["figures"]:
        assert (out / f).stat().st_size > 0
    assert (out / record["figures"][0]).read_bytes()[:4] == b"%PDF"


def test_token_counts_are_corpus_counts_of_the_first_freq_texts(config):
    import collections
    from dataclasses import replace

    from workbench.inputs import read_texts

    subject = load_model(config.model, revision="step-0", device="cpu")
    small = replace(config, n_texts=5, freq_texts=40)
    counts = an.token_counts(subject, small)
    expected = collections.Counter(
        i for t in read_texts(small.text_source, 40) for i in subject.tokenizer(t)["input_ids"]
    )
    assert counts.shape == (subject.model.get_input_embeddings().num_embeddings,)
    assert {i: int(c) for i, c in enumerate(counts) if c} == dict(expected)
    # never fewer texts than are captured
    assert an.token_counts(subject, replace(config, n_texts=40, freq_texts=1)).sum() == sum(
        expected.values()
    )


def test_minilm_encoder_as_loaded():
    config = an.AnisotropyConfig(
        model="minilm", checkpoints="none", n_texts=12, max_length=24, freq_texts=12, device="cpu"
    )
    sweep, tangent = an.run_study(config, progress=False)
    assert tangent is None  # one checkpoint and no LM head: no tangent test
    (result,) = sweep.results
    assert result.revision is None and [r["layer"] for r in result.per_layer] == list(range(6))
    m = an.metrics(sweep, tangent)
    assert m["tangent_energy_share"] is None and isinstance(m["freq_distance_corr"], float)
    # the real pretrained encoder is anisotropic at every layer, unlike random init
    assert all(r["mean_cosine"] > 0.1 for r in result.per_layer)


def test_frequency_points_are_the_last_layers_and_survive_the_cache(config, study, monkeypatch):
    from workbench import capture
    from workbench.inputs import read_texts

    sweep, _, cache = study
    final = sweep.final
    subject = load_model(config.model, revision=final.revision, device="cpu")
    acts = capture(
        subject,
        read_texts(config.text_source, config.n_texts),
        sites="resid_post.1",
        max_length=config.max_length,
        progress=False,
    )
    direct = geometry.frequency_distance_correlation(
        acts["resid_post.1"].double().numpy(),
        acts.token_ids.numpy(),
        an.token_counts(subject, config),
    )
    assert final.frequency["r"] == pytest.approx(direct.r)
    assert final.freq_distance_corr == pytest.approx(direct.r)
    assert final.frequency["token_ids"] == direct.token_ids.tolist()
    np.testing.assert_allclose(final.frequency["distance"], direct.distance, rtol=1e-12)
    monkeypatch.setattr(an, "load_model", lambda *a, **k: pytest.fail("recomputed"))
    cached = an.sweep_checkpoints(config, cache_dir=cache, progress=False).final
    assert cached.frequency == final.frequency
    fig = cached.frequency_figure()
    assert list(fig.data[0].x) == pytest.approx(direct.log_frequency.tolist())
