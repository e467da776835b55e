"""The concept-oscillation study end to end: a small toy, real-model plumbing, cache, notebook."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from support import run_notebook

from workbench import load_model
from workbench.analyses import concept_oscillation as co
from workbench.analyses.concept_oscillation import collect, train_toy
from workbench.analyses.concept_oscillation.toy import tier_of
from workbench.errors import CriterionWarning, LensError
from workbench.lens import TunedLens, logit_lens

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "notebooks" / "concept_oscillation.ipynb"


@pytest.fixture(scope="module")
def toy_config():
    return co.ConceptOscillationConfig(
        n_cases=60,
        n_bootstrap=200,
        toy_steps=150,
        toy_target_kl=0,
        batch_size=64,
        lens="logit",
        device="cpu",
    )


@pytest.fixture(scope="module")
def toy_study(toy_config, tmp_path_factory):
    cache = tmp_path_factory.mktemp("co-cache")
    return co.run(toy_config, cache_dir=cache, progress=False), cache


def test_the_toy_study_runs_and_reports_every_metric(toy_study, toy_config):
    result, _ = toy_study
    m = result.metrics()
    assert tuple(m) == co.METRIC_KEYS
    assert m["n_conflicts"] == 60 and m["n_controls"] == 30
    assert m["n_follow_a"] + m["n_follow_b"] + m["n_other"] == 60
    assert m["n_ambiguous"] + m["n_clear"] == 60
    conflicts = result.run.conflicts
    assert conflicts.lens_top1.shape == (6, 60) and result.run.controls.n == 30
    assert (conflicts.h_a > 0).all() and (conflicts.h_b > 0).all()
    assert result.training["steps"] == 150 and result.training["final_loss"] < 2.5
    assert m["training_steps"] == 150 and m["oscillation_lens"] == "logit" and m["n_layers"] == 6
    assert 0 <= m["decided_at_first_layer"] <= 1 and 0 <= m["decision_layer_mean"] <= 5
    # controls answered Y_b: per tier of channel B, and their case-weighted mean is the overall
    controls = result.run.controls
    by_tier, tiers = m["controls_answer_b_by_tier"], [tier_of(i)[1] for i in controls.ids]
    assert len(by_tier) == 3 and all(0 <= by_tier[t] <= 1 for t in tiers)
    weighted = sum(by_tier[t] for t in tiers) / len(tiers)
    assert m["controls_answer_b"] == pytest.approx(weighted, abs=2e-4)
    assert m["controls_answer_b"] == pytest.approx((controls.top1 == controls.y_b).mean(), abs=1e-4)
    # the probe reads the lens's logit(Y_a) - logit(Y_b): at the last layer that is the answer
    if result.probe is not None:
        assert result.probe.accuracy[-1] > 0.95
    json.dumps(m, allow_nan=False)  # plain, finite JSON


def test_a_rerun_from_the_cache_trains_and_loads_nothing(
    toy_study, toy_config, monkeypatch, forbid_model_loading
):
    result, cache = toy_study

    def fail(*args, **kwargs):
        raise AssertionError("a cached unit was recomputed")

    monkeypatch.setattr(train_toy, "train_toy", fail)
    again = co.run(toy_config, cache_dir=cache, progress=False)
    assert again.to_dict() == result.to_dict()
    # another bootstrap size reuses the readouts; another lens needs the model again
    other = co.run(replace(toy_config, n_bootstrap=300), cache_dir=cache, progress=False)
    assert other.run.to_dict() == again.run.to_dict()
    assert other.follow.n_bootstrap == 300
    with pytest.raises(AssertionError, match="a model was loaded"):
        co.run(replace(toy_config, lens="tuned"), cache_dir=cache, progress=False)


def test_results_round_trip_and_every_figure_draws(toy_study):
    result, _ = toy_study
    again = co.ConceptOscillationResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.to_dict() == result.to_dict()
    for kind in result.figure_kinds():
        fig = result.figure(kind)
        assert fig.layout.title.text and fig.data
    with pytest.raises(co.CasesError.__mro__[1], match="unknown figure kind"):
        result.figure("nope")


TOP1_GAP = 1e-4
"""Logit gap (nats) below which two float32 paths (batch size 5 against the lens's batching,
another matmul shape, AVX-512 against AVX2 kernels) may rank the top two tokens either way."""


def assert_top1_where_clear(top1: np.ndarray, ref, layers: slice = slice(None)) -> None:
    """``top1`` (layers, cases) equals ``ref``'s top-1 ids wherever its top-2 gap is clear."""
    logp = np.log(ref.top_probs[layers])  # float64 log-probabilities: gaps are logit gaps
    clear = logp[..., 0] - logp[..., 1] > TOP1_GAP
    assert clear.mean() > 0.5, "too many near-ties for the comparison to mean anything"
    np.testing.assert_array_equal(top1[clear], ref.top_ids[layers][..., 0][clear])


def test_the_lens_readout_equals_workbench_lens(toy_study, tmp_path):
    result, cache = toy_study
    (folder,) = list(Path(cache).glob("toys/toy-decoder-*"))
    subject = load_model(folder, device="cpu")
    cases = co.cases_for(co.ConceptOscillationConfig(n_cases=12, device="cpu"))
    texts = [co.prompt(c, "both") for c in cases.conflicts]
    fields, features = collect.readout(subject, cases.conflicts, None, batch_size=5)
    ref = logit_lens(subject, texts, positions="last", top_k=2)
    assert_top1_where_clear(fields["lens_top1"], ref)
    np.testing.assert_allclose(fields["h_a"], result.run.conflicts.h_a[:12], rtol=1e-5)
    lens = TunedLens.train(subject, texts, steps=5, progress=False)
    tuned, _ = collect.readout(subject, cases.conflicts, lens, batch_size=5)
    assert_top1_where_clear(
        tuned["lens_top1"], lens.apply(subject, texts, positions="last", top_k=2)
    )
    # the last layer's lens is the model's own output (decoded from resid_post by another matmul)
    assert_top1_where_clear(fields["top1"][None], ref, layers=slice(-1, None))
    assert_top1_where_clear(fields["lens_top1"][-1:], ref, layers=slice(-1, None))
    with torch.inference_mode():
        hidden = subject.model(**subject.tokenizer(texts[:1], return_tensors="pt"),
                               output_hidden_states=True).hidden_states  # fmt: skip
    np.testing.assert_allclose(features[2][0], hidden[3][0, -1].double().numpy(), rtol=1e-5)


PAIRS = [("red", "blue"), ("green", "pink"), ("cold", "warm"), ("tall", "short"),
         ("east", "west"), ("dark", "light"), ("fast", "slow"), ("hot", "icy"), ("new", "old"),
         ("up", "down"), ("big", "small"), ("yes", "no"), ("sun", "sky")]  # fmt: skip


def short_cases(tmp_path):
    """Cases short enough for the tiny test models' 64 positions (byte-level tokens)."""
    nouns = ["box", "cup", "hat", "car", "pen", "map", "bag", "dog", "cat", "jar", "key", "toy",
             "fan"]  # fmt: skip
    cases = [co.ConflictCase(f"The {n} is {a}.", "", f"The {n} is", a, b, id=f"{a}-{b}")
             for n, (a, b) in zip(nouns, PAIRS, strict=True)]  # fmt: skip
    return co.write_cases(cases, tmp_path / "short.jsonl")


def test_a_random_init_causal_lm_runs_on_a_users_cases(tiny_dir, tmp_path):
    config = co.ConceptOscillationConfig(
        model=str(tiny_dir("gpt2")), cases=str(short_cases(tmp_path)), n_bootstrap=100,
        device="cpu",
    )  # fmt: skip
    result = co.run(config, progress=False)
    m = result.metrics()
    # the tiny tokenizer has no merges: "sun" and "sky" both start with "s"
    assert m["n_conflicts"] == 12 and m["n_controls"] == 13  # derived from all 13
    assert m["controls_answer_b_by_tier"] is None  # tiers are the toy's
    assert any("same token" in note and "sun-sky" in note for note in result.notes)
    assert result.run.conflicts.lens_top1.shape == (3, 12)
    assert result.run.controls.ids[0].startswith("control-")
    assert tuple(m) == co.METRIC_KEYS


def test_the_tuned_lens_option_on_a_real_model(tiny_dir, tmp_path):
    config = co.ConceptOscillationConfig(
        model=str(tiny_dir("llama")), cases=str(short_cases(tmp_path)), lens="tuned",
        n_bootstrap=100, device="cpu",
    )  # fmt: skip
    result = co.run(config, progress=False)
    assert result.lens == "tuned" and result.run.conflicts.n == 12


def test_prompts_longer_than_the_context_fail_before_loading(tiny_dir, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(collect, "load_model", fail)
    config = co.ConceptOscillationConfig(model=str(tiny_dir("gpt2")), cases="builtin")
    with pytest.raises(co.CasesError, match="tokens; the model takes at most 64"):
        co.run(config, progress=False)


def test_a_model_without_an_unembedding_fails_before_loading(tiny_dir, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(collect, "load_model", fail)
    config = co.ConceptOscillationConfig(model=str(tiny_dir("bert")), device="cpu")
    with pytest.raises(LensError, match="no unembedding") as info:
        co.run(config, progress=False)
    assert "\n" not in str(info.value)


def test_bad_cases_fail_before_any_model_loads(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(collect, "load_model", fail)
    monkeypatch.setattr(train_toy, "train_toy", fail)
    path = tmp_path / "bad.jsonl"
    path.write_text('{"source_a": "x", "question": "q", "answer_a": "a", "answer_b": "b"}\n')
    for model in ("toy", "some/model"):
        config = co.ConceptOscillationConfig(model=model, cases=str(path), device="cpu")
        with pytest.raises(co.CasesError, match=r"bad\.jsonl line 1: missing field 'source_b'"):
            co.run(config, progress=False)


@pytest.mark.slow
def test_notebook_runs_under_papermill(tmp_path, html_figures):
    _, record = run_notebook(
        NOTEBOOK,
        {
            "n_cases": 40,
            "toy_steps": 60,
            "toy_target_kl": 0,
            "n_bootstrap": 100,
            "device": "cpu",
        },
        tmp_path,
        cwd=REPO,
    )
    assert all(f.endswith(".html") for f in record["figures"])  # html_figures
    assert record["analysis"] == "concept_oscillation" and record["params"]["n_cases"] == 40
    assert tuple(record["metrics"]) == co.METRIC_KEYS
    assert record["metrics"]["n_conflicts"] == 40
    names = {Path(f).name for f in record["figures"]}
    assert {"follow_curve.html", "oscillations.html", "logit_diff_heatmap.html"} <= names


def test_the_toy_trains_the_same_whatever_the_process_thread_count(tmp_path):
    """The default's numbers must not depend on the machine's cores (the toy trains on one)."""
    trained = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            folder, _ = train_toy.train_toy(
                co.toy.ToySpec(), tmp_path / f"t{threads}", steps=30, seed=3, progress=False
            )
            assert torch.get_num_threads() == threads  # the process's setting is restored
            trained.append(load_model(str(folder), device="cpu").model.state_dict())
    finally:
        torch.set_num_threads(before)
    for name, weight in trained[0].items():
        assert torch.equal(weight, trained[1][name]), name


def test_the_toy_trains_past_its_schedule_only_until_its_criterion(tmp_path):
    """The schedule runs whole; a toy that meets the criterion there is the schedule's toy."""
    spec = co.toy.ToySpec()

    def weights(folder):
        return load_model(str(folder), device="cpu").model.state_dict()

    alone, plain = train_toy.train_toy(spec, tmp_path / "a", steps=30, seed=1, progress=False)
    met, summary = train_toy.train_toy(
        spec, tmp_path / "m", steps=30, seed=1, target_kl=50.0, max_steps=300, progress=False
    )
    assert summary["steps"] == 30 and summary["converged"] is True
    assert summary["excess_kl"] == plain["excess_kl"]
    a, b = weights(alone), weights(met)
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a criterion above what the schedule reached: on at the floor, checked every 100 steps
    target = plain["excess_kl"] - 1e-3
    _, longer = train_toy.train_toy(
        spec, tmp_path / "l", steps=30, seed=1, target_kl=target, max_steps=130, progress=False
    )
    assert longer["steps"] in (100, 130) and longer["schedule_steps"] == 30
    assert longer["converged"] == (longer["excess_kl"] <= target)
    assert longer["converged"] or longer["steps"] == 130
    with pytest.raises(ValueError, match="max_steps=20 needs target_kl and at least steps=30"):
        train_toy.train_toy(spec, tmp_path / "x", steps=30, target_kl=0.2, max_steps=20)


def test_a_toy_short_of_its_criterion_at_the_cap_warns_and_is_kept(tmp_path):
    config = co.ConceptOscillationConfig(
        n_cases=60, n_bootstrap=100, toy_steps=20, toy_target_kl=1e-6, toy_max_steps=40,
        device="cpu",
    )  # fmt: skip
    match = r"toy decoder training missed its criterion .* in 40 steps: excess KL"
    with pytest.warns(CriterionWarning, match=match):
        result = co.run(config, cache_dir=tmp_path / "cache", progress=False)
    (short,) = result.shortfalls()
    assert "\n" not in short.message() and "raise toy_max_steps" in short.message()
    assert all(r.holds is None and r.not_evaluable for r in result.claims())
    record = json.loads(result.save(config, tmp_path / "run").read_text())
    assert record["provenance"]["shortfalls"][0]["steps"] == 40
    with pytest.warns(CriterionWarning, match=match):  # read back from the cache: same report
        again = co.run(config, cache_dir=tmp_path / "cache", progress=False)
    assert again.shortfalls() == result.shortfalls()
