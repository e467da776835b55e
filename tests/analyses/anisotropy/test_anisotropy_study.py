"""The anisotropy study on a small trained tiny-lm: sweep, cache, tangent test, the notebook."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from support import run_notebook

from workbench import capture, geometry, load_model
from workbench.analyses import anisotropy as an
from workbench.analyses.anisotropy import collect
from workbench.errors import ConfigError
from workbench.inputs import read_texts

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "notebooks" / "anisotropy.ipynb"


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
    return an.run(config, cache_dir=cache, progress=False), cache


def test_sweep_covers_every_checkpoint_and_layer(study):
    result, _ = study
    assert [c.step for c in result.checkpoints] == [0, 10, 20, 50]
    rows = result.rows()
    assert len(rows) == 4 * 2 and {r["layer"] for r in rows} == {0, 1}
    for row in rows:
        assert -1 <= row["mean_cosine"] <= 1 and 0 <= row["isoscore"] <= 1
        assert 1 <= row["effective_rank"] <= 32 and row["twonn"] > 0
    assert result.notes == ()


def test_one_checkpoint_in_memory_at_a_time(config, tmp_path, monkeypatch):
    """Every model the study loads is gone (no reference left) before the next one loads."""
    import contextlib
    import gc
    import weakref

    real, alive, loads = collect.loaded, [], []

    @contextlib.contextmanager
    def watched(*args, **kwargs):
        gc.collect()
        loads.append(sum(ref() is not None for ref in alive))
        with real(*args, **kwargs) as subject:
            alive.append(weakref.ref(subject.model))
            yield subject

    monkeypatch.setattr(collect, "loaded", watched)
    an.run(replace(config, n_texts=8), cache_dir=tmp_path, progress=False)
    assert len(loads) >= 7 and loads == [0] * len(loads)  # 4 checkpoints, then the tangent test


def test_a_rerun_from_the_cache_loads_no_model(config, study, forbid_model_loading):
    result, cache = study
    again = an.run(config, cache_dir=cache, progress=False)
    assert again.to_dict() == result.to_dict()  # tangent test included
    # a changed parameter is another cache: it has to load models again
    with pytest.raises(AssertionError, match="a model was loaded"):
        an.run(replace(config, n_texts=23), cache_dir=cache, progress=False)


def test_an_interrupted_run_redoes_only_the_missing_units(config, study, tmp_path, monkeypatch):
    result, cache = study
    import shutil

    partial = tmp_path / "cache"
    shutil.copytree(cache, partial)
    (key,) = [p for p in partial.iterdir() if p.is_dir()]
    (key / "step-20.json").unlink()
    loads = []
    real = collect.load_model
    monkeypatch.setattr(
        collect, "load_model", lambda *a, **k: loads.append(k.get("revision")) or real(*a, **k)
    )
    again = an.run(config, cache_dir=partial, progress=False)
    assert loads == ["step-20"]
    assert again.rows() == result.rows()


def test_tangent_result_is_tested_on_the_later_checkpoints(study):
    result, _ = study
    tangent = result.tangent
    assert tangent.site == "resid_post.1" and tangent.fit_revisions == ("step-10",)
    assert tangent.steps == [20, 50] and tangent.d_model == 32
    assert all(0 <= s <= 1 for s in tangent.shares)
    assert all(abs(n - 4 / 32) < 0.1 for n in tangent.null_means)  # random rank-4 share of 32


def test_metrics_block_has_the_issue_keys(study):
    result, _ = study
    m = result.metrics()
    assert tuple(m) == an.METRIC_KEYS
    for key in ("freq_distance_corr", "tangent_energy_share", "tangent_p_value"):
        assert isinstance(m[key], float)
    assert 0 < m["tangent_p_value"] <= 1
    json.dumps(m, allow_nan=False)


def _summed_loss(subject, text):
    enc = subject.tokenizer(text, return_tensors="pt")
    out = subject.model(**enc, output_hidden_states=True)
    loss = F.cross_entropy(out.logits[0, :-1], enc["input_ids"][0, 1:], reduction="sum")
    return loss, out.hidden_states


@pytest.mark.parametrize(("site", "hidden"), [("resid_pre.0", 0), ("resid_pre.1", 1)])
def test_gradients_at_an_input_site_are_taken_on_the_captured_block_input(config, site, hidden):
    """Regression: gradients were taken on the block's output even for input sites."""
    subject = load_model(config.model, revision="step-50", device="cpu")
    texts = ["The quick brown fox.", "Objects are abstractions of data."]
    grads = collect.representation_gradients(subject, texts, site, config)
    captured = capture(subject, texts, sites=site, progress=False)[site]
    start = 0
    for text in texts:
        loss, states = _summed_loss(subject, text)
        (expected,) = torch.autograd.grad(loss, states[hidden])
        n = states[hidden].shape[1]
        # the rows captured at the site are HF's hidden_states[hidden]: the block's input ...
        np.testing.assert_allclose(
            captured[start : start + n].numpy(), states[hidden][0].detach().numpy(), atol=1e-5
        )
        # ... and the gradients are taken on exactly those tensors (not on the block's output)
        np.testing.assert_allclose(
            grads[:, start : start + n].T, expected[0].double().numpy(), rtol=1e-4, atol=1e-6
        )
        start += n
    assert grads.shape == (32, start)


def test_gradients_do_not_depend_on_batching(config):
    subject = load_model(config.model, revision="step-50", device="cpu")
    texts = read_texts(config.text_source, 6)
    one = collect.representation_gradients(
        subject, texts, "resid_post.1", replace(config, batch_size=1)
    )
    three = collect.representation_gradients(
        subject, texts, "resid_post.1", replace(config, batch_size=3)
    )
    np.testing.assert_allclose(one, three, rtol=1e-4, atol=1e-6)


def test_frequency_points_are_the_last_layers_and_survive_the_cache(config, study):
    result, cache = study
    final = result.final
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
        collect.token_counts(subject, config),
    )
    # float32 forward passes batched differently agree to about 1e-7, not bitwise
    assert final.freq_distance_corr == pytest.approx(direct.r, rel=1e-5)
    np.testing.assert_array_equal(final.frequency.token_ids, direct.token_ids)
    np.testing.assert_allclose(final.frequency.distance, direct.distance, rtol=1e-5)
    cached = an.run(config, cache_dir=cache, progress=False).final
    np.testing.assert_array_equal(cached.frequency.distance, final.frequency.distance)
    fig = result.figure("frequency_distance")
    assert list(fig.data[0].x) == pytest.approx(direct.log_frequency.tolist())


def test_token_counts_are_corpus_counts_of_the_first_freq_texts(config):
    import collections

    subject = load_model(config.model, revision="step-0", device="cpu")
    small = replace(config, n_texts=5, freq_texts=40)
    counts = collect.token_counts(subject, small)
    expected = collections.Counter(
        i for t in read_texts(small.text_source, 40) for i in subject.tokenizer(t)["input_ids"]
    )
    assert counts.shape == (subject.model.get_input_embeddings().num_embeddings,)
    assert {i: int(c) for i, c in enumerate(counts) if c} == dict(expected)
    # never fewer texts than are captured
    assert collect.token_counts(subject, replace(config, n_texts=40, freq_texts=1)).sum() == sum(
        expected.values()
    )


def test_checkpoint_spec_errors(tmp_path):
    with pytest.raises(ConfigError, match="needs a folder of step-N checkpoints"):
        an.resolve_checkpoints(str(tmp_path), "all")
    assert an.resolve_checkpoints("x", "step8000,step1000") == ["step1000", "step8000"]
    assert an.resolve_checkpoints("x", "none") == [None]


def test_minilm_encoder_as_loaded():
    config = an.AnisotropyConfig(
        model="minilm", checkpoints="none", n_texts=12, max_length=24, freq_texts=12, device="cpu"
    )
    result = an.run(config, progress=False)
    assert result.tangent is None and any("single checkpoint" in n for n in result.notes)
    (checkpoint,) = result.checkpoints
    assert checkpoint.revision is None and result.layers == list(range(6))
    m = result.metrics()
    assert m["tangent_energy_share"] is None and isinstance(m["freq_distance_corr"], float)
    # the real pretrained encoder is anisotropic at every layer, unlike random init
    assert all(layer.mean_cosine > 0.1 for layer in checkpoint.layers)


@pytest.mark.slow
def test_notebook_runs_under_papermill(tiny_lm_dir, tmp_path):
    out, record = run_notebook(
        NOTEBOOK,
        {
            "model": str(tiny_lm_dir),
            "checkpoints": "all",
            "n_texts": 16,
            "max_length": 24,
            "max_points": 300,
            "tangent_rank": 4,
            "tangent_fit": 1,
            "device": "cpu",
        },
        tmp_path,
        cwd=REPO,
    )
    assert record["analysis"] == "anisotropy" and record["params"]["n_texts"] == 16
    assert tuple(record["metrics"]) == an.METRIC_KEYS
    assert len(record["metrics"]["per_checkpoint"]) == 4 * 2
    assert record["provenance"]["revision"] == "step-50"
    names = {Path(f).name for f in record["figures"]}
    formats = ("pdf", "svg", "png", "html") if _static() else ("html",)
    for stem in an.FIGURES:
        for ext in formats:
            assert f"{stem}.{ext}" in names
    for f in record["figures"]:
        assert (out / f).stat().st_size > 0
    manifest = json.loads((out / "figures" / "figures.json").read_text())
    assert [f["name"] for f in manifest["figures"]] == list(an.FIGURES)


def _static() -> bool:
    from workbench.figures import static_export_problem

    return static_export_problem() is None
