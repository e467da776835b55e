"""Interventions against references: hand-written hooks, a model with a block deleted, HF itself."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from tinymodels import D_MODEL, N_LAYERS, VOCAB

from workbench import capture, load_model
from workbench.errors import FigureKindError, InterventionError, SiteError
from workbench.interventions import (
    ablate,
    activation_patching,
    add,
    apply,
    intervene,
    logit_diff,
    patch,
    project_out,
    skip,
    steering_vector,
)

ARCHS = ("gpt2", "gpt_neox", "llama")
LAST = N_LAYERS - 1


@pytest.fixture(scope="module", params=ARCHS)
def subject(request, tiny_dir):
    subject = load_model(tiny_dir(request.param), device="cpu")
    assert subject.n_layers == N_LAYERS and subject.d_model == D_MODEL
    assert sum(p.numel() for p in subject.model.parameters()) < 200_000
    return subject


def tokens(seed: int, batch: int = 2, n: int = 7) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, n), generator=torch.Generator().manual_seed(seed))


def logits(subject, ids, **kwargs):
    with torch.no_grad():
        return subject.model(input_ids=ids, use_cache=False, **kwargs).logits


def direction(seed: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(D_MODEL, generator=torch.Generator().manual_seed(seed))


def n_hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def without_block(subject, layer: int):
    """Reference: a deep copy of the model with block ``layer`` deleted from its ModuleList."""
    model = copy.deepcopy(subject.model)
    del model.base_model.get_submodule(subject.family.layers)[layer]
    model.config.num_hidden_layers = N_LAYERS - 1
    if hasattr(model.config, "n_layer"):
        model.config.n_layer = N_LAYERS - 1
    return model


def test_zero_vector_and_self_patch_change_nothing(subject):
    ids = tokens(0)
    base = logits(subject, ids)
    names = subject.site_names()
    zeros = {n: add(torch.zeros(VOCAB if n == "unembed" else D_MODEL)) for n in names}
    with intervene(subject, zeros):
        assert torch.equal(logits(subject, ids), base)
    acts = capture(subject, ids, sites=names, progress=False)
    with intervene(subject, {n: patch(acts) for n in names}):
        assert torch.equal(logits(subject, ids), base)


@pytest.mark.parametrize("layer", range(N_LAYERS))
def test_skip_equals_the_model_with_the_block_deleted(subject, layer):
    ids = tokens(1)
    reference = without_block(subject, layer)
    with torch.no_grad():
        expected = reference(input_ids=ids, use_cache=False).logits
    with intervene(subject, {f"resid_post.{layer}": skip()}):
        got = logits(subject, ids)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, logits(subject, ids), atol=1e-4)


def test_patching_every_position_of_the_last_block_gives_the_source_logits(subject):
    clean, corrupt = tokens(2), tokens(3)
    source = capture(subject, clean, sites=f"resid_post.{LAST}", progress=False)
    with intervene(subject, {f"resid_post.{LAST}": patch(source)}):
        got = logits(subject, corrupt)
    torch.testing.assert_close(got, logits(subject, clean), atol=1e-5, rtol=1e-5)
    # a tensor source (texts, n_tokens, d) does the same
    table = torch.stack([source.text(i, f"resid_post.{LAST}") for i in range(2)])
    with intervene(subject, {f"resid_post.{LAST}": patch(table)}):
        torch.testing.assert_close(logits(subject, corrupt), got, atol=0, rtol=0)


@pytest.mark.parametrize("positions", ["all", "last", [1, 4], [-2]])
def test_add_equals_a_hand_written_hook(subject, positions):
    ids, layer, v, scale = tokens(4), 1, direction(0), 3.0
    if isinstance(positions, str):
        cols = list(range(7)) if positions == "all" else [6]
    else:
        cols = [p % 7 for p in positions]

    def hook(_module, _args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        hidden = hidden.clone()
        hidden[:, cols] += scale * v
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    handle = subject.site(f"resid_post.{layer}").module.register_forward_hook(hook)
    try:
        expected = logits(subject, ids)
    finally:
        handle.remove()
    with intervene(subject, {f"resid_post.{layer}": add(v, scale=scale, positions=positions)}):
        got = logits(subject, ids)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("side", ["left", "right"])
def test_positions_count_real_tokens_whatever_the_padding(subject, side):
    """A padded batch, edited at 'last' and [2], equals each text edited on its own."""
    texts = [tokens(5, 1, 7)[0], tokens(6, 1, 4)[0]]
    width = 7
    ids = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for row, seq in enumerate(texts):
        cols = slice(width - len(seq), width) if side == "left" else slice(0, len(seq))
        ids[row, cols], mask[row, cols] = seq, 1
    # left padding needs explicit position ids; right padding gets the model's default ones, so
    # only the attention mask tells where each text ends
    extra = {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0)} if side == "left" else {}
    edits = {
        "resid_post.0": [add(direction(1), positions="last"), add(direction(2), positions=[2])]
    }
    with intervene(subject, edits):
        batched = logits(subject, ids, attention_mask=mask, **extra)
        singles = [logits(subject, seq[None])[0] for seq in texts]
    for row in range(len(texts)):
        real = batched[row][mask[row].bool()]
        torch.testing.assert_close(real, singles[row], atol=1e-5, rtol=1e-5)


def test_project_out_leaves_the_site_orthogonal_to_the_basis(subject):
    ids, site = tokens(7), "resid_post.1"
    basis = torch.randn(2, D_MODEL, generator=torch.Generator().manual_seed(3)) * 5
    q, _ = torch.linalg.qr(basis.double().T)  # (d, 2) orthonormal columns, same span
    before = capture(subject, ids, sites=site, progress=False)[site].double()
    with intervene(subject, {site: project_out(basis)}):
        after = capture(subject, ids, sites=site, progress=False)[site].double()
    scale = before.norm(dim=-1, keepdim=True)
    assert ((after @ q).abs() / scale).max() < 1e-6
    torch.testing.assert_close(after, before - (before @ q) @ q.T, atol=1e-5, rtol=1e-5)
    assert ((before @ q).abs() / scale).max() > 1e-2  # the test could fail


def test_an_input_site_edits_the_blocks_input(subject):
    ids, v = tokens(8), direction(4, 2.0)
    with intervene(subject, {"resid_pre.2": add(v, positions=[0, 3])}):
        at_input = logits(subject, ids)
    with intervene(subject, {"resid_post.1": add(v, positions=[0, 3])}):
        at_output = logits(subject, ids)
    torch.testing.assert_close(at_input, at_output, atol=0, rtol=0)
    assert not torch.allclose(at_input, logits(subject, ids), atol=1e-4)


def test_edits_on_one_site_compose_in_order(subject):
    ids, site, v = tokens(9), "resid_post.1", direction(5)
    with intervene(subject, {site: [add(v), project_out(v)]}):
        added_then_removed = logits(subject, ids)
    with intervene(subject, {site: project_out(v)}):
        removed = logits(subject, ids)
    with intervene(subject, {site: [project_out(v), add(v)]}):
        removed_then_added = logits(subject, ids)
    torch.testing.assert_close(added_then_removed, removed, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(removed_then_added, removed, atol=1e-4)


def generate(subject, ids, mask=None, use_cache=True, n=6):
    with torch.no_grad():
        out = subject.model.generate(
            input_ids=ids,
            attention_mask=mask if mask is not None else torch.ones_like(ids),
            max_new_tokens=n,
            do_sample=False,
            pad_token_id=0,
            use_cache=use_cache,
            output_logits=True,
            return_dict_in_generate=True,
        )
    return out.sequences, torch.stack(out.logits, 1)


def test_generate_sees_the_edit(subject):
    ids = tokens(10, 1, 5)
    plain, _ = generate(subject, ids)
    with intervene(subject, {"resid_post.1": add(direction(6, 60.0))}):
        steered, _ = generate(subject, ids)
    with intervene(subject, {"resid_post.1": add(torch.zeros(D_MODEL))}):
        unchanged, _ = generate(subject, ids)
    assert torch.equal(unchanged, plain)
    assert not torch.equal(steered, plain)
    assert n_hooks(subject.model) == 0


@pytest.mark.parametrize("edit", ["add-all", "add-indices", "skip"])
def test_cached_generation_equals_uncached(subject, edit):
    """With the KV cache each position is edited once, in its own pass; without it every pass
    recomputes (and re-edits) the whole sequence. For 'all' and fixed indices the two agree,
    with left padding too (positions count real tokens: index 6 and 8 fall in generated text)."""
    ids = torch.zeros(2, 6, dtype=torch.long)
    mask = torch.zeros(2, 6, dtype=torch.long)
    ids[0], mask[0] = tokens(11, 1, 6)[0], 1
    ids[1, 2:], mask[1, 2:] = tokens(12, 1, 4)[0], 1
    chosen = {
        "add-all": add(direction(7, 3.0)),
        "add-indices": add(direction(7, 3.0), positions=[1, 6, 8]),
        "skip": skip(),
    }[edit]
    with intervene(subject, {"resid_post.1": chosen}):
        cached, cached_logits = generate(subject, ids, mask)
        uncached, uncached_logits = generate(subject, ids, mask, use_cache=False)
    # Two float32 paths: a greedy step whose top two logits are within twice the logits'
    # tolerance may pick either token, and the texts differ from there on. Compare up to the
    # first such near-tie (on these models there is none: the smallest gap is about 1e-3).
    top = cached_logits.topk(2, dim=-1).values
    near_tie = (top[..., 0] - top[..., 1] <= 2e-4).any(dim=0)
    steps = int(near_tie.int().argmax()) + 1 if near_tie.any() else near_tie.numel()
    assert steps >= 3, "near-ties from the first steps on: the comparison means nothing"
    torch.testing.assert_close(
        cached_logits[:, :steps], uncached_logits[:, :steps], atol=1e-4, rtol=1e-4
    )
    prompt = ids.shape[1]
    assert torch.equal(cached[:, : prompt + steps - 1], uncached[:, : prompt + steps - 1])
    if not near_tie.any():
        assert torch.equal(cached, uncached)


def test_gradients_flow_through_edits(subject):
    ids, layer = tokens(13), 1
    v = direction(8).requires_grad_(True)
    embed = subject.model.get_input_embeddings().weight

    def loss():
        return subject.model(input_ids=ids, use_cache=False).logits.log_softmax(-1)[..., 5].sum()

    subject.model.zero_grad()
    with intervene(subject, {f"resid_post.{layer}": add(v, scale=2.0, positions=[2, 5])}):
        loss().backward()
    got_v, got_embed = v.grad.clone(), embed.grad.clone()

    w = v.detach().clone().requires_grad_(True)

    def hook(_module, _args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        shift = torch.zeros(hidden.shape[1], 1)
        shift[[2, 5]] = 2.0
        hidden = hidden + shift * w
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    subject.model.zero_grad()
    handle = subject.site(f"resid_post.{layer}").module.register_forward_hook(hook)
    try:
        loss().backward()
    finally:
        handle.remove()
    torch.testing.assert_close(got_v, w.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_embed, embed.grad, atol=1e-5, rtol=1e-5)
    assert got_v.abs().sum() > 0

    # zero-ablating a whole block output cuts every gradient upstream of it
    subject.model.zero_grad()
    with intervene(subject, {f"resid_post.{layer}": ablate("zero")}):
        loss().backward()
    assert embed.grad is None or not embed.grad.any()
    subject.model.zero_grad()


def test_no_hook_survives_an_exception(subject):
    model = subject.model
    assert n_hooks(model) == 0
    edits = {"resid_post.1": skip(), "resid_pre.0": add(direction(9)), "mlp_out": ablate()}
    with pytest.raises(RuntimeError, match="boom"), intervene(subject, edits):
        assert n_hooks(model) > 0
        raise RuntimeError("boom")
    assert n_hooks(model) == 0

    def fails(hidden, ctx):
        raise ValueError("inside the forward")

    with pytest.raises(ValueError, match="inside"), intervene(subject, {"resid_post.2": fails}):
        logits(subject, tokens(0))
    assert n_hooks(model) == 0
    with pytest.raises(SiteError), intervene(subject, {"resid_post.0": skip(), "nope": skip()}):
        pass
    assert n_hooks(model) == 0


def test_apply_and_plain_callables_see_positions(subject):
    seen = []

    def record(hidden, ctx):
        seen.append((ctx.site.name, ctx.tokens.positions.tolist(), ctx.tokens.past))
        return hidden * 1.0

    ids = tokens(14, 1, 3)
    with intervene(subject, {"resid_post.0": apply(record), "final_norm": record}):
        generate(subject, ids, n=2)
    assert seen == [
        ("resid_post.0", [[0, 1, 2]], 0),
        ("final_norm", [[0, 1, 2]], 0),
        ("resid_post.0", [[3]], 3),
        ("final_norm", [[3]], 3),
    ]


def test_mean_ablation_writes_the_mean(subject):
    ids, site = tokens(15), "mlp_out.1"
    reference = capture(subject, tokens(16, 4), sites=site, progress=False)
    mean = reference[site].double().mean(0).float()
    with intervene(subject, {site: ablate("mean", mean=reference, positions="last")}):
        got = capture(subject, ids, sites=site, positions="last", progress=False)[site]
    torch.testing.assert_close(got, mean.expand(2, -1), atol=0, rtol=0)


def test_steering_vector_is_the_difference_of_means(subject):
    a = capture(subject, tokens(17), sites="resid_post.1", progress=False)
    b = capture(subject, tokens(18, 3), sites="resid_post.1", progress=False)
    expected = (a["resid_post.1"].double().mean(0) - b["resid_post.1"].double().mean(0)).float()
    torch.testing.assert_close(steering_vector(a, b), expected, atol=0, rtol=0)
    got = steering_vector(a["resid_post.1"], b["resid_post.1"].numpy(), site="ignored")
    torch.testing.assert_close(got, expected, atol=0, rtol=0)


def test_bad_inputs_raise_one_line_errors(subject, tiny_dir):
    ids = tokens(19)
    other = load_model(tiny_dir("qwen2"), device="cpu")
    foreign = capture(other, ids, sites="resid_post.0", progress=False)
    short = capture(subject, tokens(19, 2, 5), sites="resid_post.0", progress=False)
    cases = [
        ({"resid_post.9": add(direction(0))}, SiteError, "out of range"),
        ({"nope.1": add(direction(0))}, SiteError, "unknown site"),
        ({"resid_post.0": add(torch.zeros(16))}, InterventionError, "width 16.*width 32"),
        ({"resid_post.0": project_out(torch.ones(8))}, InterventionError, "width 8.*width 32"),
        ({"resid_post.0": ablate("mean", mean=torch.ones(5))}, InterventionError, "width 5"),
        ({"resid_post.0": patch(foreign)}, InterventionError, "captured from model"),
        ({"resid_post.1": patch(short)}, InterventionError, "holds no site"),
        ({"mlp_out.0": skip()}, InterventionError, "resid_post.L"),
        ({"resid_post.0": 3}, InterventionError, "must be add"),
        ({"resid_post.0": []}, InterventionError, "no edit"),
    ]
    for edits, error, message in cases:
        with pytest.raises(error, match=message) as info, intervene(subject, edits):
            pass
        assert "\n" not in str(info.value)
    with pytest.raises(InterventionError, match=r"token counts \[5, 5\].*\[7, 7\]"):  # noqa: SIM117
        with intervene(subject, {"resid_post.0": patch(short)}):
            logits(subject, ids)
    bad_edits = [
        (lambda: add(torch.zeros(2, D_MODEL)), "1-D vector"),
        (lambda: add(direction(0), positions="first"), "unknown positions"),
        (lambda: add(direction(0), positions=[]), "selects nothing"),
        (lambda: ablate("half"), "unknown ablation"),
        (lambda: ablate("mean"), "needs mean="),
        (lambda: project_out(torch.zeros(2, D_MODEL)), "all zeros"),
        (lambda: patch([1, 2, 3]), "Activations or a tensor"),
        (lambda: apply(42), "callable"),
        (lambda: steering_vector(torch.ones(3, 4), torch.ones(3, 5)), "width 4.*width 5"),
    ]
    for build, message in bad_edits:
        with pytest.raises(InterventionError, match=message) as info:
            build()
        assert "\n" not in str(info.value)
    with pytest.raises(InterventionError, match="returned"):  # noqa: SIM117
        with intervene(subject, {"resid_post.0": lambda h, ctx: h[:, :1]}):
            logits(subject, ids)
    assert n_hooks(subject.model) == 0


def test_activation_patching_sweep(subject):
    clean = tokens(20, 1, 6)[0]
    corrupt = clean.clone()
    corrupt[2] = (clean[2] + 1) % VOCAB
    metric = logit_diff(7, 9)
    result = activation_patching(
        subject, clean, corrupt, ["resid_pre", "resid_post"], metric, batch_size=4, progress=False
    )
    sites = [f"{kind}.{layer}" for layer in range(N_LAYERS) for kind in ("resid_pre", "resid_post")]
    assert result.sites == tuple(sites) and result.positions == tuple(range(6))
    table = result.table
    assert len(table) == len(sites) * 6
    assert list(table.columns) == [
        "site", "kind", "layer", "position", "clean_token", "corrupt_token", "metric", "recovered"
    ]  # fmt: skip
    assert table.site.tolist() == [s for s in sites for _ in range(6)]

    def value(logits_):
        return float(metric(logits_)[0])

    assert result.clean_metric == value(logits(subject, clean[None]))
    assert result.corrupt_metric == value(logits(subject, corrupt[None]))
    assert result.clean_metric != result.corrupt_metric
    # the last position of the last block is all the final norm and unembedding see
    last = table[(table.site == f"resid_post.{LAST}") & (table.position == 5)]
    assert abs(last.metric.item() - result.clean_metric) <= 1e-5  # batched: last float32 bits
    single = activation_patching(
        subject, clean, corrupt, f"resid_post.{LAST}", metric, positions=[5], batch_size=1,
        progress=False,
    )  # fmt: skip
    assert single.scores[0, 0] == single.clean_metric and single.recovered[0, 0] == 1.0
    # before the corrupted token the two runs agree: patching there changes nothing
    early = table[table.position < 2]
    assert (early.metric - result.corrupt_metric).abs().max() <= 1e-5
    # one entry against a single hand-built patched run
    source = capture(subject, clean[None], sites="resid_pre.1", progress=False)
    with intervene(subject, {"resid_pre.1": patch(source, positions=[2])}):
        brute = value(logits(subject, corrupt[None]))
    entry = table[(table.site == "resid_pre.1") & (table.position == 2)].metric.item()
    assert abs(entry - brute) <= 1e-5
    # default metric: log-probability of the clean run's top next token
    default = activation_patching(
        subject, clean, corrupt, "resid_post", positions=[2, -1], progress=False
    )
    top = int(logits(subject, clean[None])[0, -1].argmax())
    assert default.metric.startswith("log p(")
    expected = float(logits(subject, clean[None])[0, -1].double().log_softmax(-1)[top])
    assert abs(default.clean_metric - expected) < 1e-9
    assert default.table.shape[0] == N_LAYERS * 2
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["sites"] == sites and len(payload["scores"]) == len(sites)
    fig = result.figure()
    assert fig.data[0].type == "heatmap" and len(fig.data[0].y) == len(sites)
    assert len(fig.data[0].x) == 6 and fig.layout.template.layout.font.family
    assert result.figure("metric").data[0].z.shape == (len(sites), 6)
    assert result.figure_kinds() == ["recovered", "metric"]
    with pytest.raises(FigureKindError, match="unknown figure kind 'bars'; use one of recovered"):
        result.figure("bars")


def test_activation_patching_bad_inputs(subject, tiny_dir):
    clean = tokens(21, 1, 6)[0]
    cases = [
        (dict(corrupt=clean[:5]), "6 tokens but corrupt has 5"),
        (dict(metric=lambda lg: lg.sum()), "one number per row"),
        (dict(positions=[6]), "out of range"),
        (dict(positions="first"), "unknown positions"),
        (dict(batch_size=0), "batch_size"),
    ]
    for kwargs, message in cases:
        args = dict(corrupt=clean, sites="resid_post.0", progress=False) | kwargs
        with pytest.raises(InterventionError, match=message) as info:
            activation_patching(subject, clean, **args)
        assert "\n" not in str(info.value)
    with pytest.raises(SiteError):
        activation_patching(subject, clean, clean, "resid_post.7", progress=False)
    with pytest.raises(InterventionError, match="pass tokenizer="):
        logit_diff(" a", 3)
    encoder = load_model(tiny_dir("bert"), device="cpu")
    with pytest.raises(InterventionError, match="no logits"):
        activation_patching(encoder, "a short one", "a short one", "resid_post.0", progress=False)
    assert n_hooks(subject.model) == 0 and n_hooks(encoder.model) == 0


def test_skip_on_an_encoder(tiny_dir):
    encoder = load_model(tiny_dir("bert"), device="cpu")
    ids = tokens(22)
    reference = copy.deepcopy(encoder.model)
    del reference.encoder.layer[1]
    reference.config.num_hidden_layers = N_LAYERS - 1
    with torch.no_grad():
        expected = reference(input_ids=ids).last_hidden_state
        with intervene(encoder, {"resid_post.1": skip()}):
            got = encoder.model(input_ids=ids).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert n_hooks(encoder.model) == 0
