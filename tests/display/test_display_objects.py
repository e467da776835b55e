"""Subject, Activations and ActivationStore show themselves: HTML cards, short text, JSON."""

from __future__ import annotations

import json

import pytest

from workbench.display import JSON_MIME

MAX_LINES, MAX_CHARS = 12, 1000


def short(text: str) -> None:
    assert len(text.splitlines()) <= MAX_LINES, text
    assert len(text) < MAX_CHARS, text


@pytest.fixture(scope="module")
def subject(tiny_dir):
    from workbench import load_model

    return load_model(tiny_dir("gpt2"), device="cpu")


@pytest.fixture(scope="module")
def acts(subject):
    from workbench import capture

    texts = ["The quick <script>alert(1)</script> fox.", "A short one & more.", "x", "y z"]
    return capture(subject, texts, sites="resid_post,attn_out", progress=False)


def test_subject_bundle_names_identity_size_and_sites(subject):
    bundle = subject._repr_mimebundle_()
    assert {"text/plain", "text/html", JSON_MIME} <= set(bundle)
    assert "application/json" not in bundle  # JupyterLab would show a JSON tree instead
    html = bundle["text/html"]
    params = sum(p.numel() for p in subject.model.parameters())
    for expected in (
        "GPT2LMHeadModel",
        "gpt2",
        f"{params:,}",
        "float32",
        "cpu",
        "resid_post",
        "h.{layer}",
        "final_norm",
        "unembed",
        "0-2",
        "hooks/gpt2.toml",
    ):
        assert expected in html, expected
    assert "<script" not in html
    assert "workbench-provenance" in html and "CPU kernels" in html and "git" in html
    data = bundle[JSON_MIME]
    json.dumps(data)
    assert data["n_layers"] == subject.n_layers == 3 and data["parameters"] == params
    short(bundle["text/plain"])
    short(repr(subject))
    assert "layers=3" in repr(subject) and "d_model=32" in repr(subject)


def test_activations_show_sites_shapes_bytes_and_token_boundaries(acts):
    bundle = acts._repr_mimebundle_()
    html = bundle["text/html"]
    n_rows = int(acts.offsets[-1])
    for site in acts.sites:
        assert site in html
    assert f"{n_rows} x 32" in html and "float32" in html
    n_bytes = sum(t.numel() * t.element_size() for t in acts.data.values())
    assert bundle[JSON_MIME]["bytes"] == n_bytes
    assert "KiB" in html
    # texts are decoded with the model folder's tokenizer: one chip per token, escaped
    sample = bundle[JSON_MIME]["sample_tokens"]
    assert len(sample) == 3 and len(sample[0]) == int(acts.offsets[1])
    assert "".join(sample[0]).startswith("The quick <script>")
    assert "<script" not in html and "&lt;" in html
    assert "1 more texts not shown" in html
    text = repr(acts)
    short(text)
    assert "tensor(" not in text and "resid_post.0: (" in text


def test_activations_text_repr_stays_short_with_many_sites(subject):
    from workbench import capture

    many = capture(
        subject,
        ["One text."],
        sites="resid_pre,resid_mid,resid_post,attn_out,mlp_out",
        progress=False,
    )
    assert len(many) == 15
    short(repr(many))
    short(many._repr_mimebundle_()["text/plain"])
    assert "more sites" in repr(many)


def test_store_shows_disk_bytes_and_complete_or_resumable(subject, tmp_path):
    from workbench import ActivationStore, capture

    store = capture(
        subject,
        ["a b c", "d e", "f"],
        sites="resid_post",
        out=tmp_path / "s",
        shard_bytes=3 * 32 * 4 * 3,
        progress=False,
    )
    bundle = store._repr_mimebundle_()
    html, data = bundle["text/html"], bundle[JSON_MIME]
    assert data["complete"] and data["shards"] == data["shards_written"] > 1
    assert "complete" in html and "on disk" in html and str(tmp_path / "s") in html
    for site in store.sites:
        assert site in html
    assert f"{store.n_rows} x 32" in html
    short(repr(store))
    # a killed capture: the manifest says which shards are missing
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    manifest["shards"][-1]["bytes"] = None
    (tmp_path / "s" / "manifest.json").write_text(json.dumps(manifest))
    partial = ActivationStore(tmp_path / "s")
    html = partial._repr_mimebundle_()["text/html"]
    assert "resumable" in html and "rerun the same capture" in html
    assert "resumable" in repr(partial)
    short(repr(partial))


def test_tokens_fall_back_to_ids_without_a_tokenizer(acts):
    from workbench.capturing import Activations

    bare = Activations(dict(acts.data), acts.offsets, acts.token_ids, "all", {"model": "m"})
    html = bare._repr_mimebundle_()["text/html"]
    assert f"#{int(acts.token_ids[0])}" in html


def test_include_and_exclude_filter_the_bundle(subject):
    assert set(subject._repr_mimebundle_(include=["text/plain"])) == {"text/plain"}
    assert "text/html" not in subject._repr_mimebundle_(exclude=["text/html"])


def test_ipython_formatter_uses_the_bundle(acts):
    ipython = pytest.importorskip("IPython.core.formatters")
    data, _ = ipython.DisplayFormatter().format(acts)
    assert "text/html" in data and data["text/plain"] == repr(acts)
