"""Placed models (``load_model(device_map=...)``): same numbers as the model loaded whole.

A random-init Llama-shaped model, saved as sharded safetensors, is bigger than the ``max_memory``
it is loaded with, so accelerate keeps part of it on disk (the head and the final norm too, so
the lenses decode through offloaded modules). Hidden states, logit-lens outputs, steering and
patching edits and a streamed capture must match the whole model's; bad placements fail in one
line before any weight is read.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T
from tinymodels import SENTENCES, bpe_tokenizer

from workbench import ActivationStore, capture, load_model
from workbench.errors import ConfigError
from workbench.interventions import ablate, add, intervene, patch, skip
from workbench.lens import logit_lens

N_LAYERS = 4
D_MODEL = 64
MAX_MEMORY = {"cpu": "400KB"}
"""Room for the embeddings and block 0; blocks 1-3, the final norm and the head go to disk."""
SPLIT = {
    "model.embed_tokens": "cpu",
    "model.layers.0": "disk",
    "model.layers.1": "cpu",
    "model.layers.2": "disk",
    "model.layers.3": "cpu",
    "model.norm": "disk",
    "model.rotary_emb": "cpu",
    "lm_head": "disk",
}
"""An explicit map that alternates blocks between the CPU and the disk."""
TEXTS = SENTENCES[:4]


def _config() -> T.LlamaConfig:
    return T.LlamaConfig(
        num_hidden_layers=N_LAYERS,
        hidden_size=D_MODEL,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=256,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )


@pytest.fixture(scope="module")
def big_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model saved in ~100 KB safetensors shards: more shards than fit in ``MAX_MEMORY``."""
    return save_big_model(tmp_path_factory.mktemp("placed") / "llama")


def save_big_model(folder: Path) -> Path:
    """Saves the random Llama (seed 0) in ~100 KB shards at ``folder`` (other tests reuse it)."""
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(_config())
    n_params = sum(p.numel() for p in model.parameters())
    assert 150_000 < n_params < 250_000
    model.save_pretrained(folder, max_shard_size="100KB")
    bpe_tokenizer().save_pretrained(folder)
    shards = sorted(folder.glob("*.safetensors"))
    assert len(shards) > 4
    assert sum(s.stat().st_size for s in shards) > 1.5 * 400_000  # bigger than MAX_MEMORY
    return folder


@pytest.fixture(scope="module")
def whole(big_dir: Path):
    return load_model(big_dir, device="cpu")


def _placed(big_dir: Path, how: str, tmp_path: Path, dtype: str | None = None):
    offload = tmp_path / "offload"
    if how == "auto":
        return load_model(
            big_dir,
            device_map="auto",
            max_memory=MAX_MEMORY,
            offload_folder=offload,
            dtype=dtype,
        )
    return load_model(big_dir, device_map=SPLIT, offload_folder=offload, dtype=dtype)


@pytest.fixture(params=["auto", "split"])
def placed(request: pytest.FixtureRequest, big_dir: Path, tmp_path: Path):
    return _placed(big_dir, request.param, tmp_path)


def _ids(subject) -> torch.Tensor:
    return subject.tokenizer(TEXTS[0], return_tensors="pt").input_ids


def test_a_whole_load_stays_on_one_device(whole) -> None:
    assert whole.placement == {"": "cpu"}
    assert not whole.is_placed
    assert whole.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in whole.model.parameters())
    assert not hasattr(whole.model, "hf_device_map")  # a plain model, as before placement existed


def test_placement_puts_part_on_disk(placed) -> None:
    where = set(placed.placement.values())
    assert where == {"cpu", "disk"}
    assert placed.is_placed
    assert placed.device == torch.device("cpu")
    assert placed.model.lm_head.weight.device.type == "meta"  # offloaded: only in its forward
    assert "on disk" in placed.placement_summary()
    assert placed.dtype == torch.float32


def test_the_short_repr_shows_the_placement(placed, whole) -> None:
    assert f"placement={placed.placement_summary()!r}" in repr(placed)
    assert "on disk" in repr(placed)
    assert "placement" not in repr(whole)


def test_hidden_states_equal_the_whole_model(placed, whole) -> None:
    got = capture(placed, TEXTS, sites=["resid_post", "unembed"], progress=False)
    want = capture(whole, TEXTS, sites=["resid_post", "unembed"], progress=False)
    assert got.sites == want.sites
    for site in want.sites:
        torch.testing.assert_close(got[site], want[site], atol=1e-5, rtol=0)
    with torch.inference_mode():
        out = placed.model(_ids(placed), output_hidden_states=True).hidden_states
        ref = whole.model(_ids(whole), output_hidden_states=True).hidden_states
    for a, b in zip(out, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_logit_lens_equals_the_whole_model(placed, whole) -> None:
    got = logit_lens(placed, TEXTS, top_k=3)
    want = logit_lens(whole, TEXTS, top_k=3)
    np.testing.assert_array_equal(got.top_ids, want.top_ids)
    np.testing.assert_allclose(got.top_probs, want.top_probs, atol=1e-5)
    np.testing.assert_allclose(got.kl, want.kl, atol=1e-5)
    np.testing.assert_allclose(got.entropy, want.entropy, atol=1e-5)


def test_steering_and_patching_change_the_output_as_on_the_whole_model(placed, whole) -> None:
    vector = torch.linspace(-1, 1, D_MODEL)
    ids = _ids(whole)
    source = torch.randn(ids.shape[1], D_MODEL, generator=torch.Generator().manual_seed(0))
    outputs = []
    for subject in (placed, whole):
        with torch.inference_mode():
            plain = subject.model(ids).logits
            with intervene(subject, {"resid_post.2": add(vector, scale=4.0)}):
                steered = subject.model(ids).logits
            with intervene(subject, {"resid_post.1": patch(source, positions=[1, 2])}):
                patched = subject.model(ids).logits
        outputs.append((plain, steered, patched))
    (plain, steered, patched), (_, ref_steered, ref_patched) = outputs
    assert (steered - plain).abs().max() > 1e-3
    assert (patched - plain).abs().max() > 1e-3
    torch.testing.assert_close(steered, ref_steered, atol=1e-5, rtol=0)
    torch.testing.assert_close(patched, ref_patched, atol=1e-5, rtol=0)


def test_ablation_and_skip_act_as_on_the_whole_model(placed, whole) -> None:
    ids = _ids(whole)
    means = capture(whole, TEXTS, sites="resid_post.1", progress=False)
    edits = {"resid_post.1": ablate("mean", mean=means), "resid_post.2": skip()}
    outputs = []
    for subject in (placed, whole):
        with torch.inference_mode(), intervene(subject, edits):
            outputs.append(subject.model(ids).logits)
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-5, rtol=0)


def test_streamed_capture_equals_the_whole_model(placed, whole, tmp_path: Path) -> None:
    store = capture(
        placed,
        TEXTS,
        sites="resid_post",
        out=tmp_path / "acts",
        shard_bytes=4096,
        batch_size=2,
        progress=False,
    )
    assert isinstance(store, ActivationStore)
    want = capture(whole, TEXTS, sites="resid_post", progress=False)
    torch.testing.assert_close(store.offsets, want.offsets)
    for site in want.sites:
        torch.testing.assert_close(store.read(site), want[site], atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_loads(big_dir: Path, tmp_path: Path, dtype: str) -> None:
    placed = _placed(big_dir, "auto", tmp_path, dtype=dtype)
    whole = load_model(big_dir, device="cpu", dtype=dtype)
    assert placed.dtype == whole.dtype == getattr(torch, dtype)
    got = capture(placed, TEXTS, sites="resid_post", progress=False)
    want = capture(whole, TEXTS, sites="resid_post", progress=False)
    full = capture(load_model(big_dir, device="cpu"), TEXTS, sites="resid_post", progress=False)
    for site in want.sites:
        torch.testing.assert_close(got[site], want[site], atol=1e-5, rtol=0)
        scale = float(full[site].abs().max())
        torch.testing.assert_close(got[site], full[site], atol=0.05 * scale, rtol=0)
    lens = logit_lens(placed, TEXTS, layers=-1, top_k=1)
    assert np.isfinite(lens.kl).all()


def test_dtype_auto_keeps_the_checkpoints_own(big_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "bf16"
    model = T.LlamaForCausalLM.from_pretrained(big_dir, dtype=torch.bfloat16)
    model.save_pretrained(src)
    bpe_tokenizer().save_pretrained(src)
    assert load_model(src, device="cpu", dtype="auto").dtype == torch.bfloat16
    assert load_model(src, device="cpu").dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_split_across_cuda_and_cpu(big_dir: Path, whole) -> None:
    split = {k: ("cuda:0" if i % 2 == 0 else "cpu") for i, k in enumerate(SPLIT)}
    placed = load_model(big_dir, device_map=split)
    assert set(placed.placement.values()) == {"cuda:0", "cpu"}
    got = capture(placed, TEXTS, sites=["resid_post", "unembed"], progress=False)
    want = capture(whole, TEXTS, sites=["resid_post", "unembed"], progress=False)
    for site in want.sites:
        torch.testing.assert_close(got[site], want[site], atol=1e-4, rtol=0)
    lens = logit_lens(placed, TEXTS, top_k=3)
    np.testing.assert_allclose(lens.kl, logit_lens(whole, TEXTS, top_k=3).kl, atol=1e-4)


# ----- bad input: one line, before any weight is read ---------------------------------------------


@pytest.fixture
def no_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if any weight would be read."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("weights were read before the bad input was caught")

    monkeypatch.setattr(T.AutoModelForCausalLM, "from_pretrained", refuse)


def _one_line(excinfo: pytest.ExceptionInfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("device", ["gpu7", "cuda:7", "tpu"])
def test_unknown_device_in_a_map(big_dir: Path, no_weights, device: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_model(big_dir, device_map={**SPLIT, "lm_head": device})
    assert repr(device) in _one_line(excinfo)


def test_unknown_module_in_a_map(big_dir: Path, no_weights) -> None:
    with pytest.raises(ConfigError, match=r"model\.layers\.9"):
        load_model(big_dir, device_map={"model.layers.9": "cpu"})


def test_a_map_that_leaves_weights_out(big_dir: Path, no_weights) -> None:
    partial = {k: v for k, v in SPLIT.items() if k != "model.layers.2"}
    with pytest.raises(ConfigError, match=r"'model\.layers\.2\.") as excinfo:
        load_model(big_dir, device_map=partial, offload_folder=big_dir.parent / "off")
    assert "without a device" in _one_line(excinfo)


def test_unknown_dtype(big_dir: Path, no_weights) -> None:
    with pytest.raises(ConfigError, match="float17") as excinfo:
        load_model(big_dir, device_map="auto", dtype="float17")
    _one_line(excinfo)


def test_unknown_strategy_and_memory(big_dir: Path, no_weights) -> None:
    with pytest.raises(ConfigError, match="everywhere"):
        load_model(big_dir, device_map="everywhere")
    with pytest.raises(ConfigError, match="lots"):
        load_model(big_dir, device_map="auto", max_memory={"cpu": "lots"})
    with pytest.raises(ConfigError, match="not both"):
        load_model(big_dir, device="cpu", device_map="auto")


def test_read_only_offload_folder(big_dir: Path, no_weights, tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root writes through permission bits: use a read-only file system
        target = Path("/proc/workbench-offload")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = locked / "offload"
    with pytest.raises(ConfigError, match="not writable") as excinfo:
        load_model(big_dir, device_map="auto", max_memory=MAX_MEMORY, offload_folder=target)
    _one_line(excinfo)
    assert not target.exists()


def test_memory_too_small_without_offload_folder(big_dir: Path, no_weights) -> None:
    with pytest.raises(ConfigError, match="offload_folder=") as excinfo:
        load_model(big_dir, device_map="auto", max_memory={"cpu": "100KB"})
    assert "largest block" in _one_line(excinfo)


def test_disk_in_a_map_needs_an_offload_folder(big_dir: Path, no_weights) -> None:
    with pytest.raises(ConfigError, match="offload_folder="):
        load_model(big_dir, device_map=SPLIT)


def test_check_leaves_no_folder_behind(big_dir: Path, no_weights, tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "offload"
    with pytest.raises(ConfigError):
        load_model(big_dir, device_map={"model.layers.9": "cpu"}, offload_folder=target)
    assert not (tmp_path / "a").exists()


def test_tuned_lens_trains_through_an_offloaded_head(big_dir: Path, whole, tmp_path: Path) -> None:
    from workbench.lens import TunedLens

    placed = _placed(big_dir, "auto", tmp_path)
    kw = {"steps": 3, "batch_tokens": 16, "progress": False}
    got = TunedLens.train(placed, TEXTS, **kw)
    want = TunedLens.train(whole, TEXTS, **kw)
    torch.testing.assert_close(got.weight, want.weight, atol=1e-5, rtol=0)
    assert got.weight.abs().sum() > 0
