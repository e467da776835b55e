"""The TransformerLens and nnsight capture backends give the core's output, layout and all."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from tinymodels import D_MODEL, N_LAYERS, SENTENCES

from workbench import capture, load_model
from workbench.backends import BACKENDS, get, shadow_copy
from workbench.backends.transformer_lens import hook_name
from workbench.errors import ConfigError

ALL_KINDS = ("embed", "resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "final_norm")
TL_ARCHS = ("gpt2", "llama", "gpt_neox", "qwen2")  # the bridge has no adapter for a bare BertModel
NNSIGHT_ARCHS = (*TL_ARCHS, "bert")


def tiny_subject(folder):
    subject = load_model(folder, device="cpu")
    assert subject.n_layers == N_LAYERS and subject.d_model == D_MODEL
    assert sum(p.numel() for p in subject.model.parameters()) < 200_000
    # Random init leaves norm weights at 1 and biases at 0, which would hide a site read before
    # an affine step (e.g. TransformerLens' ln_final.hook_normalized): perturb them.
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in subject.model.parameters():
            if param.ndim == 1:
                param.add_(0.2 * torch.randn(param.shape, generator=gen))
    return subject


@pytest.fixture(scope="module")
def subjects(tiny_dir):
    cache = {}

    def get_subject(arch):
        if arch not in cache:
            cache[arch] = tiny_subject(tiny_dir(arch))
        return cache[arch]

    return get_subject


def kinds(subject, unembed=True):
    names = [k for k in ALL_KINDS if k in subject.family.sites]
    return names + (["unembed"] if unembed and "unembed" in subject.family.sites else [])


def assert_same(acts, ref, atol=1e-5):
    assert acts.sites == ref.sites
    assert torch.equal(acts.offsets, ref.offsets)
    assert torch.equal(acts.token_ids, ref.token_ids)
    for site in ref.sites:
        torch.testing.assert_close(acts[site], ref[site], atol=atol, rtol=0, msg=site)


@pytest.mark.parametrize(
    ("arch", "backend"),
    [(a, "transformer_lens") for a in TL_ARCHS] + [(a, "nnsight") for a in NNSIGHT_ARCHS],
)
@pytest.mark.parametrize("side", ["right", "left"])
def test_backend_matches_core(subjects, arch, backend, side):
    subject = subjects(arch)
    sites = kinds(subject)
    options = {"sites": sites, "batch_size": 3, "padding_side": side, "progress": False}
    ref = capture(subject, SENTENCES, **options)  # mixed lengths: every batch is padded
    acts = capture(subject, SENTENCES, backend=backend, **options)
    per_layer = [k for k in sites if subject.family.sites[k].per_layer]
    assert len(acts.sites) == len(sites) - len(per_layer) + N_LAYERS * len(per_layer)
    assert {f"resid_post.{i}" for i in range(N_LAYERS)} <= set(acts.sites)
    assert_same(acts, ref)


@pytest.mark.parametrize("backend", ["transformer_lens", "nnsight"])
@pytest.mark.parametrize("positions", ["last", "mean"])
def test_positions_and_layer_selection(subjects, backend, positions):
    subject = subjects("llama")
    options = {"sites": ["resid_post", "final_norm"], "layers": "0,-1", "positions": positions}
    ref = capture(subject, SENTENCES, batch_size=2, progress=False, **options)
    acts = capture(subject, SENTENCES, batch_size=2, progress=False, backend=backend, **options)
    assert acts.sites == ["resid_post.0", f"resid_post.{N_LAYERS - 1}", "final_norm"]
    assert_same(acts, ref)


@pytest.mark.parametrize("backend", ["transformer_lens", "nnsight"])
def test_streamed_store_matches(subjects, backend, tmp_path):
    subject = subjects("gpt2")
    ref = capture(subject, SENTENCES, sites="resid_post", batch_size=2, progress=False)
    store = capture(
        subject,
        SENTENCES,
        sites="resid_post",
        batch_size=2,
        out=tmp_path / "acts",
        shard_bytes=8 * D_MODEL * 4 * N_LAYERS,  # several shards
        backend=backend,
        progress=False,
    )
    assert len(list((tmp_path / "acts").glob("*.safetensors"))) > 1
    assert torch.equal(store.offsets, ref.offsets)
    for site in ref.sites:
        torch.testing.assert_close(store.read(site), ref[site], atol=1e-5, rtol=0)


def test_subject_is_left_untouched(tiny_dir):
    subject = load_model(tiny_dir("gpt2"), device="cpu")
    model, tokenizer = subject.model, subject.tokenizer
    before = {name: type(m) for name, m in model.named_modules()}
    attn, side = model.config._attn_implementation, tokenizer.padding_side
    for backend in ("transformer_lens", "nnsight"):
        capture(subject, SENTENCES, sites="resid_post", backend=backend, progress=False)
    capture(
        subject, SENTENCES, sites="resid_post.0", backend="nnsight", remote="local", progress=False
    )
    assert {name: type(m) for name, m in model.named_modules()} == before
    for module in model.modules():
        assert "forward" not in vars(module)  # nnsight patches forward on what it wraps
        assert not module._forward_hooks and not module._forward_pre_hooks
    assert model.config._attn_implementation == attn and tokenizer.padding_side == side


def test_shadow_copy_shares_weights(subjects):
    model = subjects("gpt2").model
    copy = shadow_copy(model)
    assert copy is not model and copy.transformer.h[0] is not model.transformer.h[0]
    originals = {id(p) for p in model.parameters()} | {id(b) for b in model.buffers()}
    assert {id(p) for p in copy.parameters()} | {id(b) for b in copy.buffers()} == originals


def test_nnsight_remote_local_rehearsal_matches_core(subjects):
    subject = subjects("gpt2")
    ref = capture(subject, SENTENCES, sites=kinds(subject), batch_size=3, progress=False)
    acts = capture(
        subject,
        SENTENCES,
        sites=kinds(subject),
        batch_size=3,
        backend="nnsight",
        remote="local",
        progress=False,
    )
    assert_same(acts, ref)


def test_nnsight_remote_true_reaches_trace(subjects, monkeypatch):
    """``remote=True`` goes to ``TransformersModel.trace`` (NDIF); here it is rerouted locally."""
    import nnsight

    seen = []
    original = nnsight.TransformersModel.trace

    def trace(self, *args, remote=False, **kwargs):
        seen.append(remote)
        return original(self, *args, remote="local", **kwargs)

    monkeypatch.setattr(nnsight.TransformersModel, "trace", trace)
    subject = subjects("gpt2")
    ref = capture(subject, SENTENCES, sites="resid_post", batch_size=2, progress=False)
    acts = capture(
        subject,
        SENTENCES,
        sites="resid_post",
        batch_size=2,
        backend="nnsight",
        remote=True,
        progress=False,
    )
    assert seen == [True] * 3  # one trace per batch
    assert_same(acts, ref)


@pytest.mark.parametrize(
    ("backend", "package", "extra"),
    [
        ("transformer_lens", "transformer_lens", "tl"),
        ("nnsight", "nnsight", "nnsight"),
    ],
)
def test_missing_package_is_one_line_config_error(subjects, monkeypatch, backend, package, extra):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` raise ImportError
    with pytest.raises(ConfigError) as info:
        capture(subjects("gpt2"), SENTENCES, sites="resid_post", backend=backend, progress=False)
    message = str(info.value)
    assert "\n" not in message and f"pip install 'workbench[{extra}]'" in message
    assert repr(backend) in message


def test_bad_backend_settings(subjects):
    subject = subjects("gpt2")
    with pytest.raises(ConfigError, match="unknown capture backend 'tl'; use one of hooks"):
        capture(subject, SENTENCES, sites="resid_post", backend="tl", progress=False)
    for backend in ("hooks", "transformer_lens"):
        with pytest.raises(ConfigError, match="remote=True needs backend='nnsight'"):
            capture(subject, SENTENCES, sites="resid_post", backend=backend, remote=True)
    assert BACKENDS == ("hooks", "transformer_lens", "nnsight")


def test_transformer_lens_refuses_bare_bert(subjects):
    with pytest.raises(
        ConfigError, match=r"TransformerLens cannot wrap BertModel .*backend='hooks'"
    ):
        capture(subjects("bert"), SENTENCES, sites="resid_post", backend="transformer_lens")


def test_hooks_backend_function_matches_core(subjects):
    subject = subjects("gpt_neox")
    sites = subject.expand("resid_post,final_norm")
    ids = torch.tensor([[5, 6, 7, 8], [0, 0, 9, 10]])
    mask = (torch.arange(4) >= torch.tensor([[0], [2]])).long()
    kwargs = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
    }
    with torch.inference_mode():
        outs = {b: get(b)(subject, sites)(**kwargs, use_cache=False) for b in BACKENDS}
    for backend in ("transformer_lens", "nnsight"):
        for site in sites:
            assert outs[backend][site.name].shape == (2, 4, D_MODEL)
            torch.testing.assert_close(
                outs[backend][site.name][mask.bool()],
                outs["hooks"][site.name][mask.bool()],
                atol=1e-5,
                rtol=0,
            )


def test_tl_hook_names(subjects):
    subject = subjects("llama")
    names = {s.name: hook_name(s) for s in subject.expand(kinds(subject), layers=1)}
    assert names == {
        "embed": "blocks.0.hook_resid_pre",
        "resid_pre.1": "blocks.1.hook_resid_pre",
        "resid_mid.1": "blocks.1.hook_resid_mid",
        "resid_post.1": "blocks.1.hook_resid_post",
        "attn_out.1": "blocks.1.hook_attn_out",
        "mlp_out.1": "blocks.1.hook_mlp_out",
        "final_norm": "ln_final.hook_out",
        "unembed": "unembed.hook_out",
    }


def test_core_never_imports_the_optional_libraries():
    code = textwrap.dedent(
        """
        import sys
        import workbench, workbench.capturing, workbench.backends
        import workbench.backends.transformer_lens, workbench.backends.nnsight
        bad = [m for m in ("transformer_lens", "nnsight") if m in sys.modules]
        assert not bad, bad
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
