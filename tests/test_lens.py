"""Lenses: exactness against the model's own logits, statistics against brute force, the tuned
lens's training, saving and quality, errors and figures."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from tinymodels import D_MODEL, N_LAYERS, SENTENCES

from workbench import load_model
from workbench.errors import FigureKindError, InputError, SiteError, WorkbenchError
from workbench.inputs import read_texts
from workbench.lens import (
    LensError,
    LensResult,
    TunedLens,
    compare_figure,
    last_block_lens,
    logit_lens,
    tuned_lens,
)

DECODERS = ("gpt2", "gpt_neox", "llama", "qwen2")
TEXTS = SENTENCES[:3]
N_TRAIN = 160
"""pydoc texts the small tiny-lm's tuned lens trains on; evaluation uses the texts after them."""
N_EVAL = 40
MAX_LENGTH = 48


def _own_logprobs(subject, ids: np.ndarray) -> torch.Tensor:
    """The model's log-probabilities for one text, run on its own (no batching, no padding)."""
    with torch.no_grad():
        logits = subject.model(torch.tensor(ids)[None]).logits[0]
    return torch.log_softmax(logits.double(), dim=-1)


def _assert_top_k(ids: np.ndarray, probs: np.ndarray, logp: torch.Tensor) -> None:
    """Top-k probabilities match; ids match wherever the order is not a near-tie (random-init
    models are close to uniform, and float32 batching may swap two logits 1e-7 apart)."""
    k = ids.shape[-1]
    top = logp.topk(k + 1, dim=-1)
    np.testing.assert_allclose(probs, top.values[:, :k].exp().numpy(), rtol=1e-5, atol=1e-9)
    clear = (-top.values.diff(dim=-1) > 1e-5).all(-1).numpy()
    assert clear.mean() > 0.5
    np.testing.assert_array_equal(ids[clear], top.indices[:, :k].numpy()[clear])


def _assert_matches_model(subject, result: LensResult, layer_row: int) -> None:
    """Row ``layer_row`` of ``result`` reproduces the model's own output at every position."""
    for i in range(result.n_texts):
        rows = result.text_rows(i)
        ids = result.token_ids[rows]
        logp = _own_logprobs(subject, ids)
        _assert_top_k(result.top_ids[layer_row, rows], result.top_probs[layer_row, rows], logp)
        want = -logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
        np.testing.assert_allclose(result.cross_entropy[layer_row, rows][:-1], want, rtol=1e-5)
        assert np.isnan(result.cross_entropy[layer_row, rows][-1])
    np.testing.assert_allclose(result.kl[layer_row], 0.0, atol=1e-6)


@pytest.fixture(scope="module")
def small(tiny_lm_dir):
    return load_model(tiny_lm_dir, device="cpu")


@pytest.fixture(scope="module")
def decoders(tiny_dir):
    return {arch: load_model(tiny_dir(arch), device="cpu") for arch in DECODERS}


@pytest.fixture(scope="module")
def small_tuned(small):
    """A tuned lens on the small tiny-lm, trained on the first N_TRAIN pydoc texts."""
    return TunedLens.train(
        small,
        "builtin:pydoc",
        n_texts=N_TRAIN,
        max_length=MAX_LENGTH,
        progress=False,
        steps=80,
        batch_tokens=256,
    )


# --- exactness ------------------------------------------------------------------------------


def test_tiny_models_are_tiny(decoders):
    for subject in decoders.values():
        assert (subject.n_layers, subject.d_model) == (N_LAYERS, D_MODEL)


@pytest.mark.parametrize("arch", DECODERS)
def test_logit_lens_last_layer_is_the_models_output(decoders, arch):
    subject = decoders[arch]
    result = logit_lens(subject, TEXTS, top_k=4)
    assert result.layers.tolist() == list(range(N_LAYERS))
    _assert_matches_model(subject, result, -1)


def test_logit_lens_last_layer_is_the_models_output_on_trained_tiny_lm(small):
    texts = read_texts("builtin:pydoc", 4)
    result = logit_lens(small, texts, top_k=5, max_length=MAX_LENGTH)
    # trained, the model is far from uniform (the fixture is small: top-1 averages about 0.02)
    assert result.top_probs[-1, :, 0].mean() > 10 / small.model.config.vocab_size
    _assert_matches_model(small, result, -1)


@pytest.mark.parametrize("arch", DECODERS)
def test_last_block_lens_of_the_last_blocks_input_is_the_models_output(decoders, arch):
    subject = decoders[arch]
    result = last_block_lens(subject, TEXTS, layers=[N_LAYERS - 2, N_LAYERS - 1], top_k=4)
    _assert_matches_model(subject, result, 0)  # h_{last-1} through the last block
    _assert_matches_model(subject, result, 1)  # the last layer: the model's output


@pytest.mark.parametrize("arch", DECODERS)
def test_last_block_lens_equals_the_model_without_its_middle_blocks(decoders, arch):
    """Reference: HF's own forward pass of a copy of the model whose blocks between 0 and the
    last are deleted, so h_0 goes straight into the last block (its mask, rotary, positions)."""
    subject = decoders[arch]
    result = last_block_lens(subject, TEXTS, layers=[0], top_k=3)
    pruned = copy.deepcopy(subject.model)
    blocks = pruned.base_model.get_submodule(subject.family.layers)
    parent_path, _, name = subject.family.layers.rpartition(".")
    parent = pruned.base_model.get_submodule(parent_path) if parent_path else pruned.base_model
    setattr(parent, name, torch.nn.ModuleList([blocks[0], blocks[-1]]))
    pruned.config.num_hidden_layers = pruned.config.n_layer = 2
    for i in range(result.n_texts):
        rows = result.text_rows(i)
        ids = torch.tensor(result.token_ids[rows])[None]
        with torch.no_grad():
            logp = torch.log_softmax(pruned(ids, use_cache=False).logits[0].double(), -1)
        _assert_top_k(result.top_ids[0, rows], result.top_probs[0, rows], logp)
        want = -logp[torch.arange(ids.shape[1] - 1), ids[0, 1:]].numpy()
        np.testing.assert_allclose(result.cross_entropy[0, rows][:-1], want, rtol=1e-5)
    assert result.kl[0].mean() > 1e-6  # and it is not just the model's output


def test_statistics_match_brute_force(small):
    """KL, cross-entropy, entropy, top-k and target rank at every layer against a hand
    computation from HF's output_hidden_states."""
    text = read_texts("builtin:pydoc", 3)[2]
    target = " the"
    result = logit_lens(small, [text], top_k=3, target=target, max_length=24)
    tid = small.tokenizer.encode(target)[0]
    assert result.target == tid and result.target_token == target
    model = small.model
    ids = small.tokenizer(text, return_tensors="pt")["input_ids"][:, :24]
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        final = torch.log_softmax(out.logits[0].double(), -1)
        for li, layer in enumerate(result.layers.tolist()):
            h = out.hidden_states[layer + 1][0]
            if layer == small.n_layers - 1:
                h = out.hidden_states[-1][0]  # HF applies ln_f to its last entry already
            else:
                h = model.transformer.ln_f(h)
            lp = torch.log_softmax(model.lm_head(h).double(), -1)
            kl = torch.nn.functional.kl_div(lp, final, log_target=True, reduction="none").sum(-1)
            ce = torch.nn.functional.cross_entropy(lp[:-1], ids[0, 1:], reduction="none")
            ent = torch.distributions.Categorical(logits=lp).entropy()
            # tokens strictly above the target, bounded for logits within float noise of it
            above = lp - lp[:, tid : tid + 1]
            low, high = (above > 1e-6).sum(-1).numpy(), (above > -1e-6).sum(-1).numpy() - 1
            np.testing.assert_allclose(result.kl[li], kl.numpy(), rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(result.cross_entropy[li, :-1], ce.numpy(), rtol=1e-5)
            np.testing.assert_allclose(result.entropy[li], ent.numpy(), rtol=1e-5)
            assert ((low <= result.target_rank[li]) & (result.target_rank[li] <= high)).all()
            assert (high == low).mean() > 0.9  # the bound is exact almost everywhere
            np.testing.assert_allclose(result.target_prob[li], lp[:, tid].exp().numpy(), rtol=1e-5)
            _assert_top_k(result.top_ids[li], result.top_probs[li], lp)
    np.testing.assert_allclose(result.kl_by_layer(), result.kl.mean(1))
    np.testing.assert_allclose(result.loss_by_layer(), np.nanmean(result.cross_entropy, 1))
    assert result.final_loss() == pytest.approx(float(np.nanmean(result.cross_entropy[-1])))


def test_positions_select_rows_of_every_text(decoders):
    subject = decoders["gpt2"]
    full = logit_lens(subject, TEXTS, top_k=2)
    last = logit_lens(subject, TEXTS, positions="last", top_k=2)
    some = logit_lens(subject, TEXTS, positions=[0, -1], top_k=2)
    ends = full.offsets[1:] - 1
    np.testing.assert_array_equal(last.offsets, np.arange(len(TEXTS) + 1))
    # the same numbers up to float32 matmul blocking (the head runs on 3 rows instead of all)
    np.testing.assert_allclose(last.kl, full.kl[:, ends], rtol=1e-5, atol=1e-9)
    assert (last.next_ids == -1).all() and np.isnan(last.cross_entropy).all()
    starts = full.offsets[:-1]
    picked = np.sort(np.concatenate([starts, ends]))
    np.testing.assert_allclose(some.entropy, full.entropy[:, picked], rtol=1e-6)
    np.testing.assert_array_equal(some.positions[:2], [0, full.offsets[1] - 1])
    np.testing.assert_array_equal(some.next_ids[0], full.token_ids[1])


# --- tuned lens -----------------------------------------------------------------------------


def test_identity_tuned_lens_is_the_logit_lens(decoders):
    subject = decoders["llama"]
    lens = TunedLens.identity(subject)
    a = logit_lens(subject, TEXTS, top_k=3)
    b = tuned_lens(subject, TEXTS, lens, top_k=3)
    assert b.lens == "tuned"
    np.testing.assert_allclose(b.kl, a.kl, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(b.top_ids, a.top_ids)


def test_tuned_lens_beats_the_logit_lens_on_held_out_text(small, small_tuned):
    """On pydoc texts after the training ones, every layer but the last is closer to the final
    distribution through its translator; the last layer's stays the identity (KL 0)."""
    held = read_texts("builtin:pydoc")[N_TRAIN : N_TRAIN + N_EVAL]
    logit = logit_lens(small, held, max_length=MAX_LENGTH).kl_by_layer()
    tuned = small_tuned.apply(small, held, max_length=MAX_LENGTH).kl_by_layer()
    assert (tuned[:-1] < logit[:-1]).all(), (tuned, logit)
    assert tuned[-1] == pytest.approx(0.0, abs=1e-6) and logit[-1] == pytest.approx(0, abs=1e-6)
    torch.testing.assert_close(small_tuned.weight[-1], torch.zeros(small.d_model, small.d_model))
    curves = small_tuned.manifest["training"]
    assert curves["train_kl_last"][0] < curves["train_kl_first"][0]


def test_tuned_lens_training_is_deterministic(decoders):
    subject = decoders["gpt_neox"]
    kw = dict(steps=15, batch_tokens=16, progress=False, seed=3)
    a = TunedLens.train(subject, SENTENCES, **kw)
    b = TunedLens.train(subject, SENTENCES, **kw)
    c = TunedLens.train(subject, SENTENCES, **{**kw, "seed": 4})
    assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    assert not torch.equal(a.weight, c.weight)
    assert a.weight[:-1].abs().sum() > 0


def test_tuned_lens_translators_train_on_activations_not_the_model(decoders):
    subject = decoders["qwen2"]
    before = {k: v.clone() for k, v in subject.model.state_dict().items()}
    TunedLens.train(subject, SENTENCES, steps=3, batch_tokens=8, progress=False)
    assert all(p.grad is None for p in subject.model.parameters())
    after = subject.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_save_and_load_round_trip(small, small_tuned, tmp_path):
    folder = small_tuned.save(tmp_path / "lens")
    assert sorted(p.name for p in folder.iterdir()) == [
        "translators.safetensors",
        "tuned_lens.json",
    ]
    manifest = json.loads((folder / "tuned_lens.json").read_text())
    assert manifest["model"] == small.name and manifest["revision"] == small.revision
    assert manifest["training"]["texts"] == "builtin:pydoc"
    assert manifest["training"]["n_texts"] == N_TRAIN
    assert manifest["hyperparameters"]["optimizer"] == "sgd"
    loaded = TunedLens.load(folder, small)
    assert torch.equal(loaded.weight, small_tuned.weight)
    assert torch.equal(loaded.bias, small_tuned.bias)
    a = small_tuned.apply(small, TEXTS, top_k=2)
    b = tuned_lens(small, TEXTS, loaded, top_k=2)
    np.testing.assert_array_equal(a.kl, b.kl)


def test_loading_for_another_model_is_a_one_line_error(small, small_tuned, decoders, tmp_path):
    folder = small_tuned.save(tmp_path / "lens")
    with pytest.raises(LensError, match=r"trained for .*2 layers, d_model 32.*3 layers") as err:
        TunedLens.load(folder, decoders["gpt2"])
    assert "\n" not in str(err.value)
    with pytest.raises(LensError, match="trained for"):
        tuned_lens(decoders["gpt2"], TEXTS, small_tuned)
    with pytest.raises(LensError, match="no tuned lens"):
        TunedLens.load(tmp_path / "nowhere")
    (folder / "translators.safetensors").write_bytes(b"not the saved weights")
    with pytest.raises(LensError, match="does not match"):
        TunedLens.load(folder)


# --- errors ---------------------------------------------------------------------------------


def test_encoder_gets_a_one_line_error_before_any_work(tiny_dir, monkeypatch):
    bert = load_model(tiny_dir("bert"), device="cpu")

    def no_forward(*_a, **_k):
        raise AssertionError("a forward pass ran")

    monkeypatch.setattr(bert.model, "forward", no_forward)
    for call in (
        lambda: logit_lens(bert, TEXTS),
        lambda: last_block_lens(bert, TEXTS),
        lambda: TunedLens.train(bert, TEXTS, progress=False),
        lambda: TunedLens.identity(bert),
    ):
        with pytest.raises(LensError, match="no unembedding") as err:
            call()
        assert "\n" not in str(err.value) and isinstance(err.value, WorkbenchError)


def test_bad_input_errors(decoders):
    subject = decoders["gpt2"]
    with pytest.raises(SiteError, match="out of range"):
        logit_lens(subject, TEXTS, layers=[7])
    with pytest.raises(SiteError):
        last_block_lens(subject, TEXTS, layers="x")
    with pytest.raises(LensError, match="outside the vocabulary"):
        logit_lens(subject, TEXTS, target=10_000)
    with pytest.raises(LensError, match="not one token"):
        logit_lens(subject, TEXTS, target="quick brown fox jumps")
    with pytest.raises(LensError, match="positions"):
        logit_lens(subject, TEXTS, positions="first")
    with pytest.raises(LensError, match="position 400 is outside text 0"):
        logit_lens(subject, TEXTS, positions=400)
    with pytest.raises(LensError, match="top_k"):
        logit_lens(subject, TEXTS, top_k=0)
    with pytest.raises(InputError):
        logit_lens(subject, [])
    with pytest.raises(LensError, match="unknown hyperparameter"):
        TunedLens.train(subject, TEXTS, learning_rate=0.1)
    with pytest.raises(LensError, match="optimizer"):
        TunedLens.train(subject, TEXTS, optimizer="lbfgs")


def test_no_hook_outlives_a_failed_lens(decoders):
    subject = decoders["llama"]

    def count() -> int:
        return sum(
            len(m._forward_hooks) + len(m._forward_pre_hooks) for m in subject.model.modules()
        )

    before = count()
    calls = []
    real = subject.model.forward

    def second_pass_fails(*a, **k):
        calls.append(1)
        if len(calls) == 2:  # the first pass reads the final logits; the second is hooked
            raise RuntimeError("boom")
        return real(*a, **k)

    subject.model.forward = second_pass_fails
    try:
        with pytest.raises(RuntimeError, match="boom"):
            last_block_lens(subject, TEXTS, layers=[0], batch_size=len(TEXTS))
    finally:
        del subject.model.forward
    assert count() == before


# --- results and figures --------------------------------------------------------------------


def test_result_to_dict_round_trip_and_shape_checks(decoders):
    subject = decoders["gpt2"]
    result = logit_lens(subject, TEXTS, top_k=2, target=3)
    summary = result.to_dict()
    json.dumps(summary)
    assert summary["kl_by_layer"] == pytest.approx(result.kl_by_layer().tolist())
    assert "top_ids" not in summary
    full = json.loads(json.dumps(result.to_dict(full=True)))
    back = LensResult.from_dict(full)
    np.testing.assert_array_equal(back.kl, result.kl)
    np.testing.assert_array_equal(back.cross_entropy, result.cross_entropy)
    np.testing.assert_array_equal(back.top_tokens, result.top_tokens)
    assert back.target == 3
    with pytest.raises(LensError, match="shape"):
        LensResult.from_dict({**full, "kl": full["kl"][:-1]})
    with pytest.raises(LensError, match="aggregates"):
        LensResult.from_dict(summary)
    assert not result.kl.flags.writeable


def test_figures(decoders, small, small_tuned):
    subject = decoders["gpt2"]
    result = logit_lens(subject, TEXTS, top_k=2, target=3)
    fig = result.figure("heatmap", text=1, color="kl")
    heat = fig.data[0]
    assert np.asarray(heat.z).shape == (N_LAYERS, result.offsets[2] - result.offsets[1])
    assert fig.layout.template.layout.font.family.startswith("Helvetica")
    assert result.figure("heatmap", color="target_prob").data[0].zmax == 1.0
    results = [
        logit_lens(small, TEXTS),
        last_block_lens(small, TEXTS),
        small_tuned.apply(small, TEXTS),
    ]
    fig = compare_figure(results, metric="loss")
    assert [t.name for t in fig.data] == ["logit lens", "last-block lens", "tuned lens"]
    np.testing.assert_allclose(fig.data[2].y, results[2].loss_by_layer())
    assert len(results[0].figure("by_layer", metric="kl").data) == 1
    assert result.figure_kinds() == ["heatmap", "by_layer"]
    with pytest.raises(FigureKindError, match="unknown figure kind 'pie'") as bad:
        result.figure("pie")
    assert isinstance(bad.value, InputError) and isinstance(bad.value, KeyError)
    with pytest.raises(LensError, match="color"):
        result.figure("heatmap", color="blue")
    with pytest.raises(LensError, match="metric"):
        compare_figure(results, metric="accuracy")


# ----- lenses on captured activations; least-squares translators -------------------------------


def test_activations_lens_equals_the_logit_lens_and_samples_rows(decoders):
    from workbench.capturing import capture
    from workbench.lens import activations_lens

    subject = decoders["llama"]
    ref = logit_lens(subject, TEXTS, top_k=3)
    acts = capture(subject, TEXTS, sites="resid_post", batch_size=8)
    got = activations_lens(subject, acts, top_k=3)
    np.testing.assert_array_equal(got.token_ids, ref.token_ids)
    np.testing.assert_array_equal(got.next_ids, ref.next_ids)
    np.testing.assert_allclose(got.kl, ref.kl, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got.top_probs, ref.top_probs, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(got.kl[-1], 0.0, atol=1e-6)
    rows = np.array([0, 3, int(acts.offsets[1]) + 1, int(acts.offsets[-1]) - 1])
    some = activations_lens(subject, acts, top_k=3, rows=rows, layers="0,-1")
    np.testing.assert_array_equal(some.token_ids, got.token_ids[rows])
    np.testing.assert_array_equal(some.next_ids, got.next_ids[rows])
    np.testing.assert_allclose(some.kl, got.kl[[0, -1]][:, rows], rtol=1e-6, atol=1e-9)
    with pytest.raises(LensError, match="ascending"):
        activations_lens(subject, acts, rows=rows[::-1])
    with pytest.raises(LensError, match="lack resid_post"):
        activations_lens(subject, capture(subject, TEXTS, sites="resid_post", layers="0"))


def test_least_squares_translators_solve_the_ridge_problem_by_brute_force():
    from workbench.lens.training import least_squares_translators

    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(300, 6, generator=gen) for _ in range(3)]
    rows[2] = rows[1] @ torch.randn(6, 6, generator=gen) + 0.3  # the last layer
    weight, bias = least_squares_translators(rows, ridge=0.0)
    for layer in range(2):
        x = rows[layer].double().numpy()
        design = np.hstack([x, np.ones((len(x), 1))])
        solution, *_ = np.linalg.lstsq(design, rows[2].double().numpy(), rcond=None)
        mapped = rows[layer] + rows[layer] @ weight[layer].T + bias[layer]
        np.testing.assert_allclose(mapped.numpy(), design @ solution, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(  # layer 1 maps to the last exactly
        (rows[1] + rows[1] @ weight[1].T + bias[1]).numpy(), rows[2].numpy(), atol=1e-4
    )
    assert torch.equal(weight[2], torch.zeros(6, 6)) and torch.equal(bias[2], torch.zeros(6))
    shrunk, _ = least_squares_translators(rows, ridge=10.0)
    assert float((shrunk[0] + torch.eye(6)).norm()) < float((weight[0] + torch.eye(6)).norm())


def test_a_least_squares_tuned_lens_beats_the_logit_lens_without_kl_steps(small):
    from workbench.capturing import capture
    from workbench.lens import TunedLensTraining

    texts = read_texts("builtin:pydoc", N_TRAIN + N_EVAL)
    train = capture(small, texts[:N_TRAIN], sites="resid_post", max_length=MAX_LENGTH)
    held = capture(small, texts[N_TRAIN:], sites="resid_post", max_length=MAX_LENGTH)
    lens = TunedLens.fit(small, train, init="least_squares", steps=0)
    assert lens.manifest["training"]["init"] == "least_squares"
    tuned, logit = lens.read(small, held), logit_lens(small, texts[N_TRAIN:], max_length=48)
    assert (tuned.kl_by_layer()[:-1] < logit.kl_by_layer()[:-1]).all()
    refined = TunedLens.fit(small, train, init="least_squares", steps=5, seed=1)
    assert not torch.equal(refined.weight, lens.weight)
    assert torch.equal(
        TunedLens.fit(small, train, steps=3).weight, TunedLens.fit(small, train, steps=3).weight
    )
    with pytest.raises(LensError, match="steps must be at least 1"):
        TunedLensTraining(steps=0)
    with pytest.raises(LensError, match="init"):
        TunedLensTraining(init="pca")
    with pytest.raises(LensError, match="ridge"):
        TunedLensTraining(init="least_squares", steps=0, ridge=-1.0)
    with pytest.raises(LensError, match="lack layers"):
        TunedLens.fit(small, capture(small, texts[:2], sites="resid_post", layers="0"))
