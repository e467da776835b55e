"""Layer-major capture (``capture(..., order="layer")``): batch-major numbers, weights read once.

The offloaded random Llama of ``test_placement`` (part of it on disk) is captured both ways at every
site kind, in memory and streamed to a store (also interrupted and resumed, and with the residuals
spilled to disk); accelerate's offloaded-weight reads are counted to show that layer-major reads
each offloaded weight once per capture where batch-major reads it once per batch. GPT-2 and
GPT-NeoX check that the block call is reproduced for the other supported families.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
import torch
from accelerate.utils.offload import OffloadedWeightsLoader
from test_placement import _placed, save_big_model
from tinymodels import SENTENCES

from workbench import capture, load_model
from workbench import capturing as C
from workbench.errors import ConfigError
from workbench.interventions import add, intervene
from workbench.models import layerwise
from workbench.store import StoreWriter

SITES = [
    "embed",
    "resid_pre",
    "resid_mid",
    "resid_post",
    "attn_out",
    "mlp_out",
    "final_norm",
    "unembed",
]
BATCH = 2
N_BATCHES = -(-len(SENTENCES) // BATCH)


@pytest.fixture(scope="module")
def big_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_big_model(tmp_path_factory.mktemp("layerwise") / "llama")


@pytest.fixture(params=["auto", "split"])
def placed(request: pytest.FixtureRequest, big_dir: Path, tmp_path: Path):
    return _placed(big_dir, request.param, tmp_path)


def _close(got, want) -> None:
    assert list(got) == list(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=0, msg=name)
    assert torch.equal(got.offsets, want.offsets)
    assert torch.equal(got.token_ids, want.token_ids)


def _both(subject, **kwargs):
    kwargs = {"sites": SITES, "batch_size": BATCH, "progress": False, **kwargs}
    return (
        capture(subject, SENTENCES, order="layer", **kwargs),
        capture(subject, SENTENCES, order="batch", **kwargs),
    )


def test_layer_major_equals_batch_major_on_an_offloaded_model(placed, big_dir) -> None:
    assert "disk" in placed.placement.values()
    layer, batch = _both(placed)
    _close(layer, batch)
    whole = capture(
        load_model(big_dir, device="cpu"), SENTENCES, sites=SITES, batch_size=BATCH, progress=False
    )
    _close(layer, whole)


@pytest.mark.parametrize("positions", ["last", "mean"])
def test_layer_major_pools_positions_alike(placed, positions) -> None:
    layer, batch = _both(placed, positions=positions, padding_side="left")
    _close(layer, batch)


class _Reads:
    """Counts the offloaded weights accelerate reads back (each tensor fetched from disk)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        read = OffloadedWeightsLoader.__getitem__

        def counted(loader, key):
            self.n += 1
            return read(loader, key)

        monkeypatch.setattr(OffloadedWeightsLoader, "__getitem__", counted)

    def during(self, fn) -> int:
        before = self.n
        fn()
        return self.n - before


def test_layer_major_reads_each_offloaded_weight_once(big_dir, tmp_path, monkeypatch) -> None:
    placed = _placed(big_dir, "auto", tmp_path)
    reads = _Reads(monkeypatch)
    sites = ["resid_post", "unembed"]
    one_pass = reads.during(lambda: capture(placed, SENTENCES[:1], sites=sites, progress=False))
    assert one_pass > 0

    def run(order: str) -> None:
        capture(placed, SENTENCES, sites=sites, batch_size=BATCH, order=order, progress=False)

    assert reads.during(lambda: run("layer")) == one_pass
    assert reads.during(lambda: run("batch")) == N_BATCHES * one_pass


def test_auto_is_layer_major_when_offloaded(big_dir, tmp_path, caplog) -> None:
    placed = _placed(big_dir, "auto", tmp_path)
    with caplog.at_level(logging.INFO, logger="workbench.capturing"):
        capture(placed, SENTENCES, sites="resid_post", batch_size=BATCH, progress=False)
    assert "layer-major" in caplog.text
    caplog.clear()
    whole = load_model(big_dir, device="cpu")
    with caplog.at_level(logging.INFO, logger="workbench.capturing"):
        capture(whole, SENTENCES, sites="resid_post", batch_size=BATCH, progress=False)
    assert "batch-major" in caplog.text


def test_streamed_layer_major_store_resumes(placed, tmp_path, monkeypatch) -> None:
    want = capture(placed, SENTENCES, sites=SITES, batch_size=BATCH, order="batch")
    out = tmp_path / "acts"
    kwargs = {"sites": SITES, "batch_size": BATCH, "out": out, "shard_bytes": 40_000}
    write = StoreWriter.write
    calls = {"n": 0}

    def fail_third(writer, plan, tensors):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        write(writer, plan, tensors)

    monkeypatch.setattr(StoreWriter, "write", fail_third)
    with pytest.raises(KeyboardInterrupt):
        capture(placed, SENTENCES, order="layer", progress=False, **kwargs)
    assert not list(out.glob(".layerwise-*"))  # scratch removed
    monkeypatch.setattr(StoreWriter, "write", write)
    store = capture(placed, SENTENCES, order="layer", progress=False, **kwargs)
    assert len(store.manifest["shards"]) > 3
    for name in want:
        got = torch.as_tensor(store.read(name)[:])
        torch.testing.assert_close(got, want[name], atol=1e-5, rtol=0)
    assert not list(out.glob(".layerwise-*"))


def test_residuals_spilled_to_disk_give_the_same_rows(placed, monkeypatch) -> None:
    folders = []
    spill_folder = layerwise.spill_folder

    @contextlib.contextmanager
    def watched(parent, needed, budget):
        with spill_folder(parent, needed, budget) as spill:
            folders.append(spill.folder)
            yield spill

    monkeypatch.setattr(C, "SPILL_SHARE", 0.0)
    monkeypatch.setattr(layerwise, "spill_folder", watched)
    layer, batch = _both(placed)
    _close(layer, batch)
    assert folders and None not in folders
    assert not any(folder.exists() for folder in folders)


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox"])
def test_other_families_capture_alike_both_ways(tiny_dir, arch) -> None:
    subject = load_model(tiny_dir(arch), device="cpu")
    sites = [s for s in SITES if s != "resid_mid" or arch != "gpt_neox"]
    layer, batch = _both(subject, sites=sites, padding_side="left")
    _close(layer, batch)


def test_unsupported_family_or_order_fails_in_one_line(tiny_dir) -> None:
    bert = load_model(tiny_dir("bert"), device="cpu")
    with pytest.raises(ConfigError, match="order='batch'") as excinfo:
        capture(bert, SENTENCES, sites="resid_post", order="layer", progress=False)
    assert "\n" not in str(excinfo.value)
    with pytest.raises(ConfigError, match="unknown order"):
        capture(bert, SENTENCES, sites="resid_post", order="rows", progress=False)


def test_inside_intervene_auto_is_batch_major_and_layer_refuses(big_dir, tmp_path, caplog) -> None:
    placed = _placed(big_dir, "auto", tmp_path)
    vector = torch.ones(placed.d_model)
    with intervene(placed, {"resid_post.1": add(vector)}):
        with caplog.at_level(logging.INFO, logger="workbench.capturing"):
            got = capture(placed, SENTENCES, sites="resid_post.2", batch_size=BATCH)
        assert "batch-major" in caplog.text
        want = capture(placed, SENTENCES, sites="resid_post.2", batch_size=BATCH, order="batch")
        with pytest.raises(ConfigError, match="intervene"):
            capture(placed, SENTENCES, sites="resid_post.2", order="layer", progress=False)
    torch.testing.assert_close(got["resid_post.2"], want["resid_post.2"], atol=0, rtol=0)


def test_layer_major_in_bfloat16_matches_batch_major(big_dir, tmp_path) -> None:
    """An offloaded bf16 model: the layer-major replay computes what the batched forward does.

    Both orders run the same bf16 blocks on the same batches, so they agree to bf16's rounding
    (one ulp, 2**-7 relative, of the largest values).
    """
    placed = _placed(big_dir, "split", tmp_path, dtype="bfloat16")  # half the size: map it
    assert "disk" in placed.placement.values() and placed.dtype == torch.bfloat16
    layer, batch = _both(placed, sites=["resid_post", "unembed"])
    assert list(layer) == list(batch)
    for name in batch:
        assert layer[name].dtype == batch[name].dtype
        want, got = batch[name].float(), layer[name].float()
        scale = want.abs().max()
        torch.testing.assert_close(got, want, atol=float(scale) * 2**-7, rtol=0, msg=name)
    assert torch.equal(layer.offsets, batch.offsets)
