"""ActivationStore: round trip, memory maps, resume after SIGKILL, truncated shards, mismatches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from workbench import ActivationStore, capture, load_model
from workbench.errors import CorruptShardError, StoreError, StoreMismatchError
from workbench.inputs import read_texts

TEXTS = read_texts("builtin:pydoc", limit=24)
SHARD_BYTES = 40_000  # a few texts per shard for the tiny model


@pytest.fixture(scope="module")
def subject(tiny_dir):
    return load_model(tiny_dir("gpt2"), device="cpu")


@pytest.fixture(scope="module")
def reference(subject):
    return capture(subject, TEXTS, sites="resid_post,final_norm", max_length=48, progress=False)


def run_capture(subject, out, **kwargs):
    return capture(
        subject,
        TEXTS,
        sites="resid_post,final_norm",
        max_length=48,
        out=out,
        shard_bytes=SHARD_BYTES,
        progress=False,
        **kwargs,
    )


def test_store_equals_in_memory(subject, reference, tmp_path):
    store = run_capture(subject, tmp_path / "s")
    assert len(store.manifest["shards"]) > 3 and store.complete
    assert store.sites == reference.sites
    assert torch.equal(store.offsets, reference.offsets)
    assert torch.equal(store.token_ids, reference.token_ids)
    for site in reference.sites:
        torch.testing.assert_close(store.read(site), reference[site], atol=1e-5, rtol=1e-5)
        streamed = torch.cat(list(store.iter_batches(site, batch_size=7)))
        torch.testing.assert_close(streamed, store.read(site), atol=0, rtol=0)
    reopened = ActivationStore(tmp_path / "s")
    assert reopened.manifest["input_hash"] == store.manifest["input_hash"]
    assert reopened.manifest["provenance"]["family"] == "gpt2"


def test_overlapped_writes_give_the_same_store(subject, reference, tmp_path, monkeypatch):
    """The accelerator path (writes on a thread, behind the next forward) run on the CPU."""
    import importlib

    wc = importlib.import_module("workbench.capturing")  # the module, not the function

    monkeypatch.setattr(wc, "_overlap_writes", lambda _subject: True)
    store = run_capture(subject, tmp_path / "s")
    assert len(store.manifest["shards"]) > 3 and store.complete
    for site in reference.sites:
        torch.testing.assert_close(store.read(site), reference[site], atol=1e-5, rtol=1e-5)
    # a failure inside the forward passes leaves only complete, recorded shards behind
    calls = {"n": 0}
    real = wc._Runner.run

    def fail_third(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("boom")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(wc._Runner, "run", fail_third)
    with pytest.raises(RuntimeError, match="boom"):
        run_capture(subject, tmp_path / "partial")
    manifest = json.loads((tmp_path / "partial" / "manifest.json").read_text())
    done = [e for e in manifest["shards"] if e["bytes"] is not None]
    assert len(done) == 2
    files = sorted(p.name for p in (tmp_path / "partial").glob("shard-*.safetensors"))
    assert files == sorted(e["file"] for e in done)
    assert not list((tmp_path / "partial").glob(".*.tmp"))
    monkeypatch.setattr(wc._Runner, "run", real)
    resumed = run_capture(subject, tmp_path / "partial")
    for site in reference.sites:
        torch.testing.assert_close(resumed.read(site), store.read(site), atol=0, rtol=0)


def test_read_is_memory_mapped(subject, tmp_path):
    store = capture(subject, TEXTS[:3], sites="resid_post.0", out=tmp_path / "one", progress=False)
    assert len(store.manifest["shards"]) == 1
    tensor = store.read("resid_post.0")
    shard = str((tmp_path / "one" / store.manifest["shards"][0]["file"]).resolve())
    maps = [
        line.split()
        for line in Path("/proc/self/maps").read_text().splitlines()
        if line.endswith(shard)
    ]
    ranges = [tuple(int(x, 16) for x in m[0].split("-")) for m in maps]
    assert any(lo <= tensor.data_ptr() < hi for lo, hi in ranges), (
        "tensor is not backed by the shard file"
    )


def test_bfloat16_round_trip(subject, tmp_path):
    mem = capture(subject, TEXTS[:5], sites="resid_post.1", dtype="bfloat16", progress=False)
    store = capture(
        subject,
        TEXTS[:5],
        sites="resid_post.1",
        dtype="bfloat16",
        out=tmp_path / "bf",
        progress=False,
    )
    assert store.read("resid_post.1").dtype == torch.bfloat16
    torch.testing.assert_close(
        store.read("resid_post.1").float(), mem["resid_post.1"].float(), atol=2e-2, rtol=2e-2
    )


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    os.environ["HF_HUB_OFFLINE"] = "1"
    from workbench import capture, load_model
    from workbench.inputs import read_texts
    from workbench.store import StoreWriter
    written = []
    original = StoreWriter.write
    def write_then_die(self, plan, tensors):
        original(self, plan, tensors)
        written.append(plan.index)
        if len(written) == {kill_after}:
            os.kill(os.getpid(), signal.SIGKILL)
    StoreWriter.write = write_then_die
    subject = load_model({model!r}, device="cpu")
    capture(subject, read_texts("builtin:pydoc", limit=24), sites="resid_post,final_norm",
            max_length=48, out={out!r}, shard_bytes={shard}, progress=False)
    """
)


def test_resume_after_sigkill_equals_uninterrupted(subject, tiny_dir, tmp_path, monkeypatch):
    out = tmp_path / "killed"
    script = KILLER.format(
        tests=str(Path(__file__).parent),
        kill_after=2,
        model=str(tiny_dir("gpt2")),
        out=str(out),
        shard=SHARD_BYTES,
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    partial = json.loads((out / "manifest.json").read_text())
    assert sum(s["bytes"] is not None for s in partial["shards"]) == 2
    with pytest.raises(StoreError, match="incomplete"):
        ActivationStore(out).read("resid_post.0")

    from workbench.store import StoreWriter

    calls = []
    original = StoreWriter.write
    monkeypatch.setattr(
        StoreWriter,
        "write",
        lambda self, plan, t: (calls.append(plan.index), original(self, plan, t)),
    )
    resumed = run_capture(subject, out)
    assert sorted(calls) == list(range(2, len(partial["shards"])))  # finished shards not redone
    clean = run_capture(subject, tmp_path / "clean")
    for site in clean.sites:
        assert torch.equal(resumed.read(site), clean.read(site))
    assert [s["bytes"] for s in resumed.manifest["shards"]] == [
        s["bytes"] for s in clean.manifest["shards"]
    ]
    assert not list(out.glob(".*.tmp"))


def test_truncated_shard_is_detected_then_rewritten(subject, tmp_path):
    store = run_capture(subject, tmp_path / "t")
    victim = tmp_path / "t" / store.manifest["shards"][1]["file"]
    expected = store.read("resid_post.2").clone()
    with open(victim, "rb+") as fh:
        fh.truncate(victim.stat().st_size - 100)
    with pytest.raises(CorruptShardError, match="truncated"):
        ActivationStore(tmp_path / "t").read("resid_post.2")
    with pytest.raises(CorruptShardError):
        ActivationStore(tmp_path / "t").verify()
    repaired = run_capture(subject, tmp_path / "t")
    assert torch.equal(repaired.read("resid_post.2"), expected)


def test_different_inputs_into_same_folder_are_refused(subject, tmp_path):
    run_capture(subject, tmp_path / "m")
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "m").iterdir()}
    with pytest.raises(StoreMismatchError, match="other inputs"):
        capture(
            subject,
            TEXTS[:5],
            sites="resid_post,final_norm",
            max_length=48,
            out=tmp_path / "m",
            shard_bytes=SHARD_BYTES,
            progress=False,
        )
    with pytest.raises(StoreMismatchError, match="other settings"):
        run_capture(subject, tmp_path / "m", dtype="float16")
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "m").iterdir()}
    assert before == after


def test_non_store_folder_is_refused_and_bad_input_leaves_nothing(subject, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(StoreMismatchError, match="not an activation store"):
        run_capture(subject, tmp_path / "busy")
    with pytest.raises(Exception, match="unknown site"):
        capture(subject, TEXTS, sites="nope", out=tmp_path / "never", progress=False)
    with pytest.raises(Exception, match="no input"):
        capture(subject, [], sites="resid_post", out=tmp_path / "never", progress=False)
    assert not (tmp_path / "never").exists()


def test_open_errors(tmp_path):
    with pytest.raises(StoreError, match="not an activation store"):
        ActivationStore(tmp_path)
    (tmp_path / "manifest.json").write_text("{broken")
    with pytest.raises(StoreError, match="unreadable manifest"):
        ActivationStore(tmp_path)


def test_streamed_capture_memory_is_bounded_by_shard(subject, tmp_path):
    """The writer never holds more than one shard: buffers are sized by the shard plan."""
    store = run_capture(subject, tmp_path / "b")
    rows = [s["rows"][1] - s["rows"][0] for s in store.manifest["shards"]]
    row_bytes = (len(store.sites)) * 32 * 4
    longest_text = int(torch.diff(store.offsets).max())
    assert max(rows) * row_bytes <= SHARD_BYTES + longest_text * row_bytes
    assert os.path.getsize(tmp_path / "b" / store.manifest["shards"][0]["file"]) < 2 * SHARD_BYTES
