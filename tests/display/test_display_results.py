"""Lens, probe, patching, steering and study results: HTML cards, text, JSON, snapshots."""

from __future__ import annotations

import base64
import importlib
import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from workbench.display import JSON_MIME
from workbench.display import bundle as B

MAX_LINES, MAX_CHARS = 12, 1000


def short(text: str) -> None:
    assert len(text.splitlines()) <= MAX_LINES, text
    assert len(text) < MAX_CHARS, text


@pytest.fixture(autouse=True)
def _no_snapshots(monkeypatch):
    """Snapshots are tested on their own below; the rest runs without a browser either way."""
    monkeypatch.setenv(B.SNAPSHOT_ENV, "0")


def lens_result(n_layers=3, lengths=(4, 2), k=3, tokens=None):
    from workbench.lens import LensResult

    n = sum(lengths)
    rng = np.random.default_rng(0)
    probs = np.sort(rng.dirichlet(np.ones(8), size=(n_layers, n))[..., :k], axis=-1)[..., ::-1]
    toks = np.array(tokens or [f"t{i}" for i in range(n)])
    top_tokens = np.empty((n_layers, n, k), dtype=object)
    for li in range(n_layers):
        for r in range(n):
            top_tokens[li, r] = [f"L{li}r{r}k{j}" for j in range(k)]
    top_tokens[0, 0, 0] = "<script>"
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    positions = np.concatenate([np.arange(m) for m in lengths])
    return LensResult(
        lens="logit",
        model="toy",
        revision="step-10",
        layers=np.arange(n_layers),
        offsets=offsets,
        positions=positions,
        token_ids=np.arange(n),
        next_ids=np.where(np.isin(np.arange(n), offsets[1:] - 1), -1, 1),
        tokens=toks,
        top_ids=np.zeros((n_layers, n, k), dtype=int),
        top_probs=probs,
        top_tokens=top_tokens.astype(str),
        entropy=np.ones((n_layers, n)),
        kl=np.linspace(2.0, 0.0, n_layers)[:, None] * np.ones((1, n)),
        cross_entropy=np.ones((n_layers, n)),
        final_entropy=np.ones(n),
        final_cross_entropy=np.ones(n),
    )


def test_lens_card_is_the_top_token_table_with_kl_by_layer():
    result = lens_result(tokens=["A", "<b>", "&", " c", "x", "y"])
    bundle = result._repr_mimebundle_()
    html = bundle["text/html"]
    assert "&lt;script&gt;" in html and "<script" not in html
    assert "&lt;b&gt;" in html and "&amp;" in html and "␣c" in html
    assert "L2r3k0" in html  # the top-1 token of the last layer at position 3
    assert "L1r0k2" in html  # hover text holds the top-k
    assert "background:rgb(" in html  # cells coloured by probability
    assert "KL(final || lens)" in html and "2" in html
    assert "step-10" in html and "resid_post.0-2" in html  # footer
    data = bundle[JSON_MIME]
    json.dumps(data)
    assert data["kl_by_layer"] == [2.0, 1.0, 0.0]
    short(bundle["text/plain"])
    short(repr(result))
    assert "KL by layer: 2, 1, 0" in repr(result)


def test_lens_card_caps_long_texts_and_many_texts():
    result = lens_result(lengths=(50, 3, 3, 3))
    html = result._repr_mimebundle_()["text/html"]
    assert "positions 32-49 of this text not shown" in html
    assert "2 more texts not drawn" in html
    assert "L0r40k0" not in html
    short(repr(result))


def probe_sweep_result(control="control_task"):
    from workbench.probes import ProbeSweepResult

    rows = []
    for li in range(3):
        for seed in range(2):
            for fold in range(2):
                for task in ("probe", "control"):
                    acc = 0.5 + 0.15 * li + 0.01 * seed if task == "probe" else 0.4
                    rows.append((f"resid_post.{li}", li, seed, fold, task, acc, 8, 2, 5))
    scores = pd.DataFrame(
        rows,
        columns=[
            "site",
            "layer",
            "seed",
            "fold",
            "task",
            "accuracy",
            "n_train",
            "n_test",
            "n_iter",
        ],
    )
    return ProbeSweepResult(scores, "linear", 2, 2, control, 0.5, 10, 2, "row", {})


def test_probe_card_has_headline_and_per_site_table():
    sweep = probe_sweep_result()
    bundle = sweep._repr_mimebundle_()
    html = bundle["text/html"]
    for site in sweep.sites:
        assert site in html
    assert "best resid_post.2: accuracy 0.805" in html and "selectivity 0.405" in html
    assert "majority class 0.5" in html and "95% CI" in html
    assert "scores" not in bundle[JSON_MIME] and "summary" in bundle[JSON_MIME]
    short(bundle["text/plain"])
    short(repr(sweep))


def patching_result(n_sites=3, n_pos=4):
    from workbench.interventions import PatchingResult

    scores = np.linspace(-1.0, 2.0, n_sites * n_pos).reshape(n_sites, n_pos)
    toks = tuple(["<script>", "&", " Paris", "x"][j % 4] for j in range(n_pos))
    corrupt = tuple(("<i>" if j == 0 else t) for j, t in enumerate(toks))
    return PatchingResult(
        sites=tuple(f"resid_post.{i}" for i in range(n_sites)),
        positions=tuple(range(n_pos)),
        scores=scores,
        clean_metric=2.0,
        corrupt_metric=-1.0,
        clean_tokens=toks,
        corrupt_tokens=corrupt,
        metric="logit(' Paris') - logit(' Rome')",
    )


def test_patching_card_is_the_grid_with_clean_and_corrupt_tokens():
    result = patching_result()
    bundle = result._repr_mimebundle_()
    html = bundle["text/html"]
    assert "&lt;script&gt;" in html and "&lt;i&gt;" in html and "<script" not in html
    assert "most recovered: resid_post.2 at position 3" in html
    assert "clean 2, corrupt -1" in html
    assert "logit(&#x27; Paris&#x27;)" in html
    assert bundle[JSON_MIME]["recovered"][2][3] == pytest.approx(1.0)
    short(repr(result))
    big = patching_result(60, 40)
    html = big._repr_mimebundle_()["text/html"]
    assert "not shown: 12 sites and 8 positions" in html
    short(repr(big))
    huge = patching_result(80, 60)
    data = huge._repr_mimebundle_()[JSON_MIME]
    assert data["scores"] is None and "not embedded" in data["note"]


def test_steering_bundle_compares_with_random_vectors():
    from workbench.display.results import steering_bundle

    result = SimpleNamespace(
        layer=2,
        norm=3.5,
        scales=(0.0, 2.0, 4.0),
        effect=(0.0, 0.1, 0.3),
        random=((0.0, 0.01, 0.02), (0.0, -0.01, 0.0)),
        base_mass=0.4,
        n_rows=50,
        to_dict=lambda: {"layer": 2},
    )
    bundle = steering_bundle(result, model="tiny-lm")
    html = bundle["text/html"]
    assert "layer 2: effect 0.3 at scale 4 vs random 0.01" in html
    assert "resid_post.2" in html and "tiny-lm" in html
    short(bundle["text/plain"])


class _Study:
    def figure(self, kind):
        import plotly.graph_objects as go

        return go.Figure(go.Scatter(y=[1, 2]), layout={"title": {"text": kind}})


def test_study_result_bundle_shows_metrics_claims_figures_and_provenance():
    from workbench.claims import Claim, evaluate

    metrics = {
        "kl_by_layer": [3.0, 2.0, None, 0.5] * 5,
        "effect": 0.25,
        "name": "<x>",
        "per_checkpoint": [[float(i)] * 500 for i in range(300)],
    }
    claims = evaluate((Claim("effect positive", "effect", ">", 0.0),), metrics)
    bundle = B.study_result_bundle(
        _Study(),
        title="readouts",
        metrics=metrics,
        claims=claims,
        figure_kinds=["lens_kl", "probe"],
        provenance={
            "model": "tiny-lm",
            "revision": "step-500",
            "sites": ["resid_post.1", "resid_post.2"],
            "seed": 0,
        },
    )
    html = bundle["text/html"]
    assert "kl_by_layer" in html and "(+8)" in html and "&lt;x&gt;" in html
    assert "per_checkpoint" in html and len(html) < 20_000  # nested lists are summarized
    assert "claims: 1/1 hold" in html and "effect positive" in html
    assert "lens_kl, probe" in html and "tiny-lm @ step-500" in html
    assert "resid_post.1-2" in html and "seed 0" in html
    data = bundle[JSON_MIME]
    json.dumps(data)
    assert data["claims"][0]["holds"] is True and data["provenance"]["model"] == "tiny-lm"
    short(bundle["text/plain"])


def test_snapshot_is_left_out_silently_where_it_cannot_be_drawn(monkeypatch):
    export = importlib.import_module("workbench.figures.export")

    monkeypatch.setenv(B.SNAPSHOT_ENV, "1")
    monkeypatch.setattr(export, "static_export_problem", lambda: "no Chromium")
    assert "image/png" not in patching_result()._repr_mimebundle_()
    monkeypatch.setattr(export, "static_export_problem", lambda: None)
    monkeypatch.setattr(export, "_start_kaleido", lambda: None)

    def broken(fig, fmt, scale):
        raise export.ExportError("Chromium failed")

    monkeypatch.setattr(export, "_render", broken)
    assert "image/png" not in patching_result()._repr_mimebundle_()
    png = b"\x89PNG\r\n\x1a\nfake"
    monkeypatch.setattr(export, "_render", lambda fig, fmt, scale: png)
    bundle = patching_result()._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"]) == png
    assert "image/png" not in patching_result()._repr_mimebundle_(exclude=["image/png"])
    monkeypatch.setenv(B.SNAPSHOT_ENV, "0")
    assert "image/png" not in patching_result()._repr_mimebundle_()


def test_snapshot_draws_the_real_figure_with_chromium(chromium, monkeypatch):
    monkeypatch.setenv(B.SNAPSHOT_ENV, "1")
    bundle = lens_result()._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_clipping_keeps_a_few_lines():
    text = B.clip_text([f"line {i} " + "x" * 200 for i in range(40)])
    short(text)
    assert "more lines" in text


def test_metrics_made_of_records_show_as_small_tables():
    table = B.metrics_table(
        {
            "ingredients": {"untied": {"level": -0.02}, "both directions": {"level": 0.27}},
            "per_layer": [{"layer": i, "mean_cosine": 0.1 * i} for i in range(20)],
        },
        max_items=12,
    )
    assert "both directions" in table and "-0.02" in table and ">mean_cosine<" in table
    assert "not shown: 8 more rows" in table
    short(
        B.study_result_bundle(_Study(), title="x", metrics={"rows": [{"a": 1}] * 40})["text/plain"]
    )


def test_flat_records_show_their_values_nested_ones_their_keys():
    assert B._short({"early": 0.81234, "middle": None, "final": 1}) == (
        "{early: 0.812, middle: -, final: 1}"
    )
    assert B._short({"sync": {"f1": 0.5}, "async": {"f1": 0.4}}) == "{sync, async}"
    assert B._short([1234.5, 2.0]) == "[1234, 2] (2)"  # no thousands comma inside a list
