"""The explorers' Python side: traitlets hold the right data; the static twin names the tokens."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("anywidget")

from workbench import explore
from workbench.explore._base import STATIC, ExplorerError

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
TEXTS = ["The quick <script> fox jumps.", "A short one & more.", "Padding must never leak."]


@pytest.fixture(scope="module")
def subject(tiny_dir):
    from workbench import load_model

    return load_model(tiny_dir("gpt2"), device="cpu")


@pytest.fixture(scope="module")
def acts(subject):
    from workbench import capture

    return capture(subject, TEXTS, sites="resid_post,final_norm", progress=False)


def bundle(widget):
    data, _ = widget._repr_mimebundle_()
    return data


def test_lens_explorer_from_a_subject_runs_both_lenses(subject):
    widget = explore.lens(subject, TEXTS, top_k=4)
    data = widget.data
    assert set(data["lenses"]) == {"logit", "last_block"}
    assert widget.lens == "logit" and widget.text == 0 and widget.selected == {}
    logit = widget.results["logit"]
    assert data["tokens"] == [str(t) for t in logit.tokens]
    assert data["texts"] == [
        [int(a), int(b)] for a, b in zip(logit.offsets[:-1], logit.offsets[1:], strict=True)
    ]
    lens = data["lenses"]["logit"]
    assert lens["layers"] == [0, 1, 2]
    assert np.allclose(lens["top_probs"], logit.top_probs, atol=1e-4)
    assert lens["top_tokens"][2][5] == list(logit.top_tokens[2, 5])
    json.dumps(data)
    # a click in the front end sets `selected`; Python reads the cell's top-k
    widget.selected = {"lens": "logit", "layer": 1, "row": 3}
    top = widget.top_k()
    assert [t for t, _ in top] == list(logit.top_tokens[1, 3])
    assert top[0][1] == pytest.approx(float(logit.top_probs[1, 3, 0]), abs=1e-4)


def test_lens_explorer_bundle_has_the_widget_and_its_static_twin(subject):
    from workbench.lens import logit_lens

    result = logit_lens(subject, TEXTS)
    widget = explore.lens(result)
    data = bundle(widget)
    assert WIDGET_MIME in data and data[WIDGET_MIME]["model_id"] == widget.model_id
    html = data["text/html"]
    for token in result.tokens[result.text_rows(0)]:
        assert _visible(token) in html
    assert "<script" not in html and "&lt;" in html
    assert "workbench-provenance" in html
    assert data["text/plain"].startswith("LensExplorer(") and "logit" in data["text/plain"]
    widget.text = 1
    assert _visible(result.tokens[result.text_rows(1)][0]) in bundle(widget)["text/html"]


def _visible(token: str) -> str:
    from workbench.display import html as H

    return H.token(token)


def test_lens_explorer_refuses_results_of_other_texts(subject):
    from workbench.lens import last_block_lens, logit_lens

    a = logit_lens(subject, TEXTS[:1])
    b = last_block_lens(subject, TEXTS[1:2])
    with pytest.raises(ExplorerError, match="same texts"):
        explore.lens([a, b])
    with pytest.raises(ExplorerError, match="LensResult"):
        explore.lens(42)


def test_activations_explorer_maps_every_layer_with_context(acts):
    widget = explore.activations(acts, site="resid_post", max_points=30)
    d = widget.data
    n_rows = int(acts.offsets[-1])
    assert d["sites"] == ["resid_post.0", "resid_post.1", "resid_post.2"]
    assert d["layers"] == [0, 1, 2] and widget.layer == 0
    assert len(d["rows"]) == min(30, n_rows) == len(d["tokens"]) == len(d["context"])
    assert all(len(p) == len(d["rows"]) and len(p[0]) == 2 for p in d["points"])
    # coordinates are the centred rows projected on the top two principal directions
    x = acts["resid_post.1"].numpy()[d["rows"]].astype(np.float64)
    x -= x.mean(0)
    coords = np.array(d["points"][1])
    top = np.linalg.svd(x, full_matrices=False)[2][:2]
    assert np.allclose(np.abs(coords), np.abs(x @ top.T), atol=1e-3)
    assert all("[" in c and "]" in c for c in d["context"])
    assert set(d["colors"]) == {"position", "frequency", "text"}
    assert d["colors"]["position"]["values"][0] == d["rows"][0] - 0
    json.dumps(d)
    assert "30 of" in d["note"] or n_rows <= 30


def test_activations_explorer_starts_at_a_named_layer_and_takes_labels(acts):
    widget = explore.activations(acts, site="resid_post.2", color_by=["a", "b", "a"])
    assert widget.layer == 2 and widget.color_by == "label"
    labels = widget.data["colors"]["label"]["values"]
    offsets = acts.offsets.numpy()
    texts = np.searchsorted(offsets, widget.data["rows"], side="right") - 1
    assert labels == [["a", "b", "a"][t] for t in texts]
    single = explore.activations(acts, site="final_norm")
    assert single.data["sites"] == ["final_norm"]
    with pytest.raises(ExplorerError, match="one per row"):
        explore.activations(acts, color_by=[1, 2])
    with pytest.raises(ExplorerError, match="no site"):
        explore.activations(acts, site="mlp_out")


def test_activations_static_twin_is_an_svg_with_escaped_contexts(acts):
    widget = explore.activations(acts, color_by="frequency")
    html = bundle(widget)["text/html"]
    assert "<svg" in html and html.count("<circle") == len(widget.data["rows"])
    assert "&lt;" in html and "<script" not in html
    assert "resid_post.0" in html and "frequency" in html
    widget.layer = 2
    assert "resid_post.2" in bundle(widget)["text/html"]


def test_activations_explorer_reads_a_store(subject, tmp_path):
    from workbench import capture

    store = capture(subject, TEXTS, sites="resid_post", out=tmp_path / "s", progress=False)
    widget = explore.activations(store)
    assert widget.data["model"] == str(store.manifest["model"])
    assert widget.data["layers"] == [0, 1, 2]
    assert any("fox" in c for c in widget.data["context"])


def test_patching_explorer_cell_details(subject):
    from workbench.interventions import activation_patching

    result = activation_patching(
        subject, "The quick brown fox", "The quick brown dog", progress=False
    )
    widget = explore.patching(result)
    d = widget.data
    assert d["sites"] == list(result.sites) and d["positions"] == list(result.positions)
    assert np.allclose(d["scores"], result.scores, atol=1e-5)
    widget.selected = {"site": 1, "position": len(result.positions) - 1}
    cell = widget.cell()
    assert cell["site"] == result.sites[1]
    assert cell["clean_token"] == result.clean_tokens[-1]
    assert cell["corrupt_token"] == result.corrupt_tokens[-1]
    assert cell["metric"] == pytest.approx(float(result.scores[1, -1]), abs=1e-5)
    html = bundle(widget)["text/html"]
    for token in set(result.clean_tokens):
        assert _visible(token) in html
    assert "most recovered" in html
    with pytest.raises(ExplorerError, match="PatchingResult"):
        explore.patching(object())


@pytest.mark.parametrize("name", ["lens", "activations", "patching"])
def test_es_modules_are_self_contained(name):
    source = (STATIC / f"{name}.js").read_text()
    assert "export default" in source and "render" in source
    assert not re.search(r"^\s*import\s", source, re.M)  # nothing to fetch
    assert "http" not in source.replace("http://www.w3.org/2000/svg", "")
    assert ".innerHTML" not in source  # tokens are set as text
    node = shutil.which("node")
    if node:
        check = subprocess.run(
            [node, "--input-type=module", "--check"], input=source, text=True, capture_output=True
        )
        assert check.returncode == 0, check.stderr


HARNESS = Path(__file__).with_name("dom_harness.mjs")


def run_front_end(widget, names, actions, tmp_path):
    """Runs the widget's ES module in node against a fake DOM; returns the harness's report."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node to run the explorers' ES modules")
    module = tmp_path / "widget.mjs"
    module.write_text(widget._esm)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({name: getattr(widget, name) for name in names}))
    script = tmp_path / "script.json"
    script.write_text(json.dumps(actions))
    done = subprocess.run(
        [node, str(HARNESS), str(module), str(state), str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["cleanup"] and report["handlers_left"] == 0
    return report


def _shown(token: str) -> str:
    """A token as the ES modules write it (the same marks as workbench.display.html.token)."""
    text = token.replace("\n", "⏎").replace("\t", "⇥")
    stripped = text.lstrip(" ")
    return ("␣" * (len(text) - len(stripped)) + stripped) or "∅"


def test_lens_front_end_draws_clicks_and_switches(subject, tmp_path):
    widget = explore.lens(subject, TEXTS, top_k=3)
    lens = widget.data["lenses"]["logit"]
    row = 2
    token = lens["top_tokens"][1][row][0]
    clicked = _shown(token)
    report = run_front_end(
        widget,
        ["data", "lens", "text", "selected"],
        [{"click": {"text": clicked}}, {"select": [0, "last_block"]}, {"select": [1, "1"]}],
        tmp_path,
    )
    first = report["sets"][0]
    assert first[0] == "selected" and first[1]["lens"] == "logit"
    sel = first[1]
    assert _shown(lens["top_tokens"][sel["layer"]][sel["row"]][0]) == clicked
    assert ["lens", "last_block"] in report["sets"]
    assert ["text", 1] in report["sets"] and report["state"]["selected"] == {}
    n_rows = widget.data["texts"][1][1] - widget.data["texts"][1][0]
    assert report["cells"] == 3 * (n_rows + 2)  # layer, one cell per position, KL
    assert report["titles"] and "0." in report["titles"][0]


def test_lens_front_end_shows_the_top_k_of_a_selected_cell(subject, tmp_path):
    widget = explore.lens(subject, TEXTS, top_k=3)
    widget.selected = {"lens": "logit", "layer": 2, "row": 1}
    report = run_front_end(widget, ["data", "lens", "text", "selected"], [], tmp_path)
    tops = widget.top_k()
    assert "logit lens, layer 2" in report["text"]
    for token, prob in tops:
        assert f"{prob:.3f}  {_shown(token)}" in report["text"]


def test_activations_front_end_hover_slider_and_colours(acts, tmp_path):
    widget = explore.activations(acts, site="resid_post", max_points=40)
    report = run_front_end(
        widget,
        ["data", "layer", "color_by", "hovered"],
        [{"hover": 3}, {"input": 2}, {"select": [0, "text"]}],
        tmp_path,
    )
    assert report["sets"][:3] == [["hovered", 3], ["layer", 2], ["color_by", "text"]]
    assert report["circles"] == len(widget.data["rows"])
    assert "resid_post layer 2" in report["text"] and "text 0" in report["text"]


def test_patching_front_end_click_shows_the_cell(subject, tmp_path):
    from workbench.interventions import activation_patching

    result = activation_patching(
        subject, "The quick brown fox", "The quick brown dog", progress=False
    )
    widget = explore.patching(result)
    value = widget.data["recovered"][0][0]
    report = run_front_end(
        widget,
        ["data", "kind", "selected"],
        [{"click": {"text": f"{value:.2f}"}}, {"select": [0, "metric"]}],
        tmp_path,
    )
    assert report["sets"][0][0] == "selected" and ["kind", "metric"] in report["sets"]
    sel = report["state"]["selected"]
    assert f"{widget.data['sites'][sel['site']]} at position" in report["text"]
    assert "clean token" in report["text"] and "recovered" in report["text"]
