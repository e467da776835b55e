"""The per-text activation cache: each text alone, computed once, read back bitwise."""

from __future__ import annotations

import pytest
import torch
from tinymodels import SENTENCES

from workbench import capture, load_model, textcache
from workbench.errors import ConfigError
from workbench.interventions import add, intervene
from workbench.interventions import runtime as intervention_runtime
from workbench.textcache import TextCache


@pytest.fixture(scope="module")
def subject(tiny_dir):
    return load_model(tiny_dir("llama"), device="cpu")


def test_cached_rows_equal_a_capture_of_each_text_alone(subject, tmp_path):
    cache = TextCache(subject, sites="resid_post", layers="all", max_length=16, root=tmp_path)
    acts = cache.capture(SENTENCES)
    assert (cache.hits, cache.misses) == (0, len(SENTENCES))
    ref = capture(subject, SENTENCES, sites="resid_post", max_length=16, batch_size=1)
    assert torch.equal(acts.offsets, ref.offsets) and torch.equal(acts.token_ids, ref.token_ids)
    for site in ref.sites:
        assert torch.equal(acts[site], ref[site]), site
    batched = capture(subject, SENTENCES, sites="resid_post", max_length=16, batch_size=4)
    for site in ref.sites:  # padding changes the floats a little, never the values
        torch.testing.assert_close(acts[site], batched[site], rtol=1e-4, atol=1e-5)


def test_a_second_run_reads_every_text_and_computes_only_new_ones(subject, tmp_path, monkeypatch):
    cache = TextCache(subject, sites="resid_post", layers="0,-1", max_length=16, root=tmp_path)
    first = cache.capture(SENTENCES[:3])
    calls = []
    real = textcache.capture

    def counting(subject, inputs, **kwargs):
        calls.append(len(inputs))
        return real(subject, inputs, **kwargs)

    monkeypatch.setattr(textcache, "capture", counting)
    again = TextCache(subject, sites="resid_post", layers="0,-1", max_length=16, root=tmp_path)
    both = again.capture([SENTENCES[1], SENTENCES[4], SENTENCES[0]])
    assert calls == [1]  # only SENTENCES[4] was new
    assert (again.hits, again.misses) == (2, 1)
    n0 = int(first.offsets[1])
    rows_b = slice(int(both.offsets[2]), int(both.offsets[3]))
    for site in first.sites:
        assert torch.equal(both[site][rows_b], first[site][:n0])


def test_a_missing_or_removed_file_is_computed_again(subject, tmp_path):
    cache = TextCache(subject, sites="resid_post", layers="-1", max_length=16, root=tmp_path)
    before = cache.capture(SENTENCES[:2])
    files = sorted(cache.folder.glob("*.safetensors"))
    assert len(files) == 2 and not list(cache.folder.glob("*.tmp*"))
    files[0].unlink()
    after = TextCache(subject, sites="resid_post", layers="-1", max_length=16, root=tmp_path)
    again = after.capture(SENTENCES[:2])
    assert after.misses == 1
    for site in before.sites:
        assert torch.equal(before[site], again[site])


def test_the_key_separates_settings_and_cpu_kernels(subject, tmp_path, monkeypatch):
    a = TextCache(subject, sites="resid_post", max_length=16, root=tmp_path)
    b = TextCache(subject, sites="resid_post", max_length=8, root=tmp_path)
    c = TextCache(subject, sites="attn_out", max_length=16, root=tmp_path)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    d = TextCache(subject, sites="resid_post", max_length=16, root=tmp_path)
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    e = TextCache(subject, sites="resid_post", max_length=16, root=tmp_path)
    assert len({a.folder, b.folder, c.folder, d.folder, e.folder}) == 5


def test_the_fill_runs_on_one_thread_whatever_the_process_uses(subject, tmp_path, monkeypatch):
    seen = []
    real = textcache.capture

    def spying(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(textcache, "capture", spying)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        TextCache(subject, sites="resid_post", max_length=16, root=tmp_path).capture(SENTENCES[:2])
        assert seen == [1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_an_edited_model_is_refused(subject, tmp_path):
    assert textcache.EDITING == intervention_runtime.EDITING
    cache = TextCache(subject, sites="resid_post", max_length=16, root=tmp_path)
    vector = torch.ones(subject.d_model)
    with intervene(subject, {"resid_post.0": add(vector)}):
        with pytest.raises(ConfigError, match="unedited model"):
            cache.capture(SENTENCES[:1])
        with intervene(subject, {"resid_post.1": add(vector)}):
            assert intervention_runtime.is_edited(subject.model)
        assert intervention_runtime.is_edited(subject.model)
    assert not intervention_runtime.is_edited(subject.model)
    assert not hasattr(subject.model, textcache.EDITING)
    assert not list(tmp_path.rglob("*.safetensors"))
