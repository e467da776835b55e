"""The readouts study on the small trained tiny-lm: lenses, probe, steering, cache, notebook."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from support import run_notebook

from workbench import load_model
from workbench.analyses import readouts as ro
from workbench.analyses.readouts import collect, compute
from workbench.errors import ConfigError, LensError

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "notebooks" / "readouts.ipynb"


@pytest.fixture(scope="module")
def config(tiny_lm_dir):
    return ro.ReadoutsConfig(
        model=str(tiny_lm_dir),
        n_texts=24,
        tuned_texts=48,
        tuned_steps=80,
        max_length=24,
        lens="logit,last_block,tuned",
        lens_rows=None,
        probe_cv=3,
        probe_seeds=2,
        steer_random=2,
        steer_texts=6,
        steer_new_tokens=4,
        device="cpu",
    )


@pytest.fixture(scope="module")
def study(config, tmp_path_factory):
    cache = tmp_path_factory.mktemp("readouts-cache")
    return ro.run(config, cache_dir=cache), cache


def test_lenses_agree_at_the_last_layer_and_the_tuned_lens_is_closer(study):
    result, _ = study
    logit, last, tuned = (result.curve(n) for n in ("logit", "last_block", "tuned"))
    assert logit.layers == (0, 1)
    for curve in (logit, last, tuned):
        assert curve.kl[-1] == pytest.approx(0.0, abs=1e-6)  # the last layer is the model itself
        assert curve.loss[-1] == pytest.approx(result.model_loss, rel=1e-6)
    assert tuned.kl[0] < logit.kl[0]  # trained on the texts before the held-out ones
    assert all(k >= 0 for c in result.curves for k in c.kl)


def test_metrics_keys_and_values(study):
    result, _ = study
    m = result.metrics()
    assert tuple(m) == ro.METRIC_KEYS
    assert len(m["probe_accuracy_by_layer"]) == 2 and m["steering_layer"] == 1
    for acc, ctrl, sel in zip(
        m["probe_accuracy_by_layer"],
        m["probe_control_by_layer"],
        m["probe_selectivity_by_layer"],
        strict=True,
    ):
        assert 0 <= acc <= 1 and 0 <= ctrl <= 1 and sel == pytest.approx(acc - ctrl, abs=1e-9)
    assert result.steering.effect[0] == 0.0 and len(result.steering.random) == 2
    steer = result.steering
    assert steer.generated == 4 and len(steer.gen_random) == 2 and len(steer.gen_examples) == 3
    assert 0 <= steer.gen_base <= 1 and -1 <= steer.gen_effect <= 1
    assert m["steering_generation_random_max"] == max(steer.gen_random)
    gaps = [t - g for t, g in zip(m["kl_tuned_by_layer"], m["kl_logit_by_layer"], strict=True)]
    assert m["kl_tuned_minus_logit_max"] == max(gaps[:-1])  # every layer but the last
    randoms = [r[-1] for r in result.steering.random]
    assert m["steering_effect_random_max"] == max(randoms) >= m["steering_effect_random"]
    json.dumps(m, allow_nan=False)


def test_steering_effect_equals_a_hand_written_hook(config, study):
    """The study's number at the largest scale, recomputed with a plain forward hook."""
    result, _ = study
    subject = load_model(config.model, device="cpu")
    _, held = collect.texts(config)
    sample = held[: config.steer_texts]
    site = subject.site(f"resid_post.{result.steering.layer}")
    acts = collect.capture(subject, held, sites=site.name, max_length=24, batch_size=1)
    vocab = collect.pieces(subject)
    keep, labels, _ = compute.probe_labels(
        acts.offsets.numpy(), acts.token_ids.numpy(), vocab, "word_start"
    )
    not_first = np.ones(len(keep), dtype=bool)
    not_first[acts.offsets.numpy()[:-1]] = False  # each text's first position is left out
    x = acts[site.name][torch.from_numpy(keep & not_first)].double()
    on = torch.from_numpy(labels[not_first[keep]].astype(bool))
    vector = (x[on].mean(0) - x[~on].mean(0)).float()
    assert float(vector.norm()) == pytest.approx(result.steering.norm, rel=1e-5)
    word = torch.tensor([compute.starts_word(p) for p in vocab])
    enc = [
        subject.tokenizer(t, return_tensors="pt", truncation=True, max_length=24) for t in sample
    ]

    def steer(out, scale):
        if isinstance(out, torch.Tensor):  # transformers 5 blocks return a tensor
            return out + scale * vector
        return (out[0] + scale * vector, *out[1:])

    def mean_mass(scale):
        handle = site.module.register_forward_hook(lambda _m, _a, out: steer(out, scale))
        try:
            with torch.no_grad():
                rows = [subject.model(**e).logits[0] for e in enc]
        finally:
            handle.remove()
        return float(compute.word_mass(torch.cat(rows), word).mean())

    shift = mean_mass(config.steer_scale) - mean_mass(0.0)
    assert result.steering.effect_at_max == pytest.approx(shift, rel=1e-4, abs=1e-7)


def test_seeds_resample_the_texts_and_first_keeps_the_source_order(config):
    train0, held0 = collect.texts(config)
    _, held1 = collect.texts(replace(config, seed=1))
    assert len(train0) == 48 and len(held0) == 24 and not set(train0) & set(held0)
    assert held0 != held1 and collect.texts(config) == (train0, held0)
    first = replace(config, text_sampling="first")
    assert collect.texts(first) == collect.texts(replace(first, seed=1))
    pool = collect.read_texts(config.text_source, 72)
    assert collect.texts(first) == (pool[:48], pool[48:])


def test_lens_rows_sample_positions_with_a_next_token(config, study):
    subject = load_model(config.model, device="cpu")
    _, held = collect.texts(config)
    acts = collect.activations(subject, held, config)
    rows = collect.lens_rows(acts, replace(config, lens_rows=50))
    ends = set((acts.offsets.numpy()[1:] - 1).tolist())
    assert len(rows) == 50 and np.all(np.diff(rows) > 0) and not ends & set(rows.tolist())
    again = collect.lens_rows(acts, replace(config, lens_rows=50, seed=1))
    assert not np.array_equal(rows, again)
    assert collect.lens_rows(acts, config) is None


def test_a_rerun_from_the_cache_loads_no_model(config, study, forbid_model_loading):
    result, cache = study
    again = ro.run(config, cache_dir=cache)
    assert json.dumps(again.to_dict()) == json.dumps(result.to_dict())


def test_results_round_trip_and_every_figure_draws(study):
    result, _ = study
    again = ro.ReadoutsResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.curves == result.curves and again.steering == result.steering
    np.testing.assert_array_equal(again.heatmap.top_ids, result.heatmap.top_ids)
    for kind in result.figure_kinds():
        fig = result.figure(kind)
        assert fig.data, kind


def test_bad_input_fails_in_one_line_before_work(tiny_lm_dir):
    with pytest.raises(ConfigError, match="tuned_texts \\+ n_texts"):
        ro.run(ro.ReadoutsConfig(model=str(tiny_lm_dir), n_texts=1500, tuned_texts=1000))
    with pytest.raises(LensError, match="unembed"):
        ro.run(ro.ReadoutsConfig(model="minilm", n_texts=4, tuned_texts=4, device="cpu"))


@pytest.mark.slow
def test_notebook_runs_under_papermill(config, tmp_path, html_figures):
    params = {k: v for k, v in replace(config, probe_seeds=1).to_params().items()}
    _, record = run_notebook(NOTEBOOK, params, tmp_path, cwd=REPO)
    assert all(f.endswith(".html") for f in record["figures"])  # html_figures
    assert record["analysis"] == "readouts" and tuple(record["metrics"]) == ro.METRIC_KEYS
    assert record["params"]["n_texts"] == 24
    stems = {Path(f).stem for f in record["figures"]}
    assert stems == set(ro.FIGURES)
