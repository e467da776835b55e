"""Capture parity with HF's output_hidden_states, padding correctness, positions, hook hygiene."""

from __future__ import annotations

import pytest
import torch
from tinymodels import D_MODEL, N_LAYERS, SENTENCES

from workbench import capture, load_model
from workbench.errors import ConfigError, InputError, SiteError
from workbench.hooking import read_hooks as hooks

DECODERS = ("gpt2", "gpt_neox", "llama", "qwen2")


@pytest.fixture(scope="module", params=(*DECODERS, "bert"))
def subject(request, tiny_dir):
    subject = load_model(tiny_dir(request.param), device="cpu")
    assert subject.n_layers == N_LAYERS and subject.d_model == D_MODEL
    assert sum(p.numel() for p in subject.model.parameters()) < 200_000
    return subject


def hf_hidden_states(subject, text):
    enc = subject.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = subject.model(**enc, output_hidden_states=True)
    return [h[0] for h in out.hidden_states], out


def test_resid_post_matches_hf_hidden_states(subject):
    names = ["embed", "resid_post"] + (["final_norm"] if subject.family.name != "bert" else [])
    acts = capture(subject, SENTENCES, sites=names, batch_size=2, progress=False)
    for i, text in enumerate(SENTENCES):
        hs, _ = hf_hidden_states(subject, text)
        assert len(hs) == N_LAYERS + 1
        torch.testing.assert_close(acts.text(i, "embed"), hs[0], atol=1e-5, rtol=0)
        for layer in range(N_LAYERS - 1):
            torch.testing.assert_close(
                acts.text(i, f"resid_post.{layer}"), hs[layer + 1], atol=1e-5, rtol=0
            )
        last = acts.text(i, f"resid_post.{N_LAYERS - 1}")
        if (
            subject.family.name == "bert"
        ):  # post-LN: the last hidden state is the last layer's output
            torch.testing.assert_close(last, hs[-1], atol=1e-5, rtol=0)
        else:  # pre-LN decoders: HF applies the final norm to the last hidden state
            torch.testing.assert_close(acts.text(i, "final_norm"), hs[-1], atol=1e-5, rtol=0)
            assert not torch.allclose(last, hs[-1], atol=1e-3)


def test_layout_offsets_and_token_ids(subject):
    acts = capture(subject, SENTENCES, sites="resid_post.0", progress=False)
    enc = [subject.tokenizer(t)["input_ids"] for t in SENTENCES]
    assert acts.offsets.tolist() == [0, *torch.tensor([len(e) for e in enc]).cumsum(0).tolist()]
    assert acts.token_ids.tolist() == [i for e in enc for i in e]
    assert acts["resid_post.0"].shape == (sum(map(len, enc)), D_MODEL)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_batch_equals_one_at_a_time(subject, side):
    sites = "resid_pre,resid_post,attn_out,mlp_out"
    batched = capture(
        subject,
        SENTENCES,
        sites=sites,
        batch_size=len(SENTENCES),
        padding_side=side,
        progress=False,
    )
    single = capture(subject, SENTENCES, sites=sites, batch_size=1, progress=False)
    assert batched.sites == single.sites
    for name in single:
        torch.testing.assert_close(batched[name], single[name], atol=1e-5, rtol=1e-5)


def test_site_arithmetic_of_the_residual_stream(subject):
    """The residual stream adds up: checks that each site reads the tensor it claims to."""
    if subject.family.name == "bert":
        pytest.skip("post-LN: the sums pass through LayerNorms")
    kinds = [
        k
        for k in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
        if k in subject.family.sites
    ]
    acts = capture(subject, SENTENCES, sites=kinds, progress=False)
    for layer in range(N_LAYERS):
        pre, post = acts[f"resid_pre.{layer}"], acts[f"resid_post.{layer}"]
        attn, mlp = acts[f"attn_out.{layer}"], acts[f"mlp_out.{layer}"]
        torch.testing.assert_close(pre + attn + mlp, post, atol=1e-5, rtol=1e-5)
        if f"resid_mid.{layer}" in acts:
            torch.testing.assert_close(pre + attn, acts[f"resid_mid.{layer}"], atol=1e-5, rtol=1e-5)
        if layer:
            torch.testing.assert_close(pre, acts[f"resid_post.{layer - 1}"])


def test_unembed_equals_logits(subject):
    if subject.family.name == "bert":
        pytest.skip("BertModel has no unembedding")
    acts = capture(subject, SENTENCES[:2], sites="unembed", progress=False)
    _, out = hf_hidden_states(subject, SENTENCES[1])
    torch.testing.assert_close(acts.text(1, "unembed"), out.logits[0], atol=1e-5, rtol=1e-5)


def test_positions_last_and_mean(subject):
    full = capture(subject, SENTENCES, sites="resid_post.-1", progress=False)
    name = f"resid_post.{N_LAYERS - 1}"
    for positions, reduce in (("last", lambda x: x[-1]), ("mean", lambda x: x.mean(0))):
        pooled = capture(
            subject, SENTENCES, sites=name, positions=positions, batch_size=3, progress=False
        )
        assert pooled.offsets.tolist() == list(range(len(SENTENCES) + 1))
        expected = torch.stack([reduce(full.text(i, name)) for i in range(len(SENTENCES))])
        torch.testing.assert_close(pooled[name], expected, atol=1e-5, rtol=1e-5)
    last = capture(subject, SENTENCES, sites=name, positions="last", progress=False)
    assert last.token_ids.tolist() == [int(full.token_ids[int(o) - 1]) for o in full.offsets[1:]]


def test_token_id_inputs_equal_text_inputs(subject):
    ids = [subject.tokenizer(t)["input_ids"] for t in SENTENCES]
    from_text = capture(subject, SENTENCES, sites="resid_post.1", progress=False)
    from_ids = capture(subject, ids, sites="resid_post.1", progress=False)
    torch.testing.assert_close(from_ids["resid_post.1"], from_text["resid_post.1"])
    square = torch.tensor([i[:4] for i in ids])
    from_tensor = capture(subject, square, sites="resid_post.1", progress=False)
    assert from_tensor.offsets.tolist() == [0, 4, 8, 12, 16, 20]


def test_dtype_and_layer_selection(subject):
    acts = capture(
        subject, SENTENCES, sites="resid_post", layers="0,-1", dtype="bfloat16", progress=False
    )
    assert acts.sites == ["resid_post.0", f"resid_post.{N_LAYERS - 1}"]
    assert acts["resid_post.0"].dtype == torch.bfloat16


def all_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_removed_after_normal_exit_and_exception(subject):
    before = all_hooks(subject.model)
    capture(subject, SENTENCES, sites="resid_pre,resid_post", progress=False)
    assert all_hooks(subject.model) == before
    seen = []
    sites = subject.expand("resid_pre,resid_post")
    with pytest.raises(RuntimeError, match="boom"), hooks(sites, lambda s, t: seen.append(s.name)):
        assert all_hooks(subject.model) == before + len(sites)
        subject.model(**subject.tokenizer("hi there", return_tensors="pt"))
        raise RuntimeError("boom")
    assert len(seen) == len(sites)
    assert all_hooks(subject.model) == before


def test_hooks_removed_when_the_forward_fails(subject, monkeypatch):
    before = all_hooks(subject.model)

    def broken(*args, **kwargs):
        raise RuntimeError("forward failed")

    monkeypatch.setattr(subject.model, "forward", broken)
    with pytest.raises(RuntimeError, match="forward failed"):
        capture(subject, SENTENCES, sites="resid_post", progress=False)
    assert all_hooks(subject.model) == before


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"sites": "resid_pist"}, SiteError, "unknown site 'resid_pist'"),
        ({"sites": "resid_post", "layers": "7"}, SiteError, "layer 7 out of range"),
        ({"sites": "resid_post.99"}, SiteError, "out of range"),
        ({"sites": "final_norm.0"}, SiteError, "has no layer index"),
        ({"sites": ""}, SiteError, "no site given"),
        ({"sites": "resid_post", "layers": "a,b"}, SiteError, "cannot read layers"),
        ({"sites": "resid_post", "positions": "first"}, ConfigError, "unknown positions"),
        ({"sites": "resid_post", "batch_size": 0}, ConfigError, "batch_size"),
    ],
)
def test_bad_arguments(tiny_dir, kwargs, error, match):
    subject = load_model(tiny_dir("gpt2"), device="cpu")
    with pytest.raises(error, match=match):
        capture(subject, SENTENCES, progress=False, **kwargs)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ([], "no input"),
        (["fine", "   "], "text 1 is empty"),
        ([[1, 2], [999999]], "outside"),
        (["text", [1, 2]], "mix"),
        ("builtin:nothing", "unknown text source"),
        ("missing.txt", "cannot read"),
    ],
)
def test_bad_inputs(tiny_dir, inputs, match):
    subject = load_model(tiny_dir("gpt2"), device="cpu")
    with pytest.raises(InputError, match=match):
        capture(subject, inputs, sites="resid_post", progress=False)
