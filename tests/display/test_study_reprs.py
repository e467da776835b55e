"""Every study's result shows itself: card (metrics, claims, figures, provenance) and short text.

Each study runs once on a tiny setting (seconds), then again from its cache: the result a user
gets back from the cache is the one shown, and it must render the same as the fresh one.
"""

from __future__ import annotations

import json
from html import escape as html_escape

import pytest

from workbench.analyses import registry
from workbench.criteria import Shortfall
from workbench.display import JSON_MIME
from workbench.display import bundle as B

pytestmark = pytest.mark.slow

STUDIES = (
    "anisotropy",
    "readouts",
    "geometric_memory",
    "concept_oscillation",
    "depth_ensemble",
    "acmas",
)


def _config(name: str, tiny_lm: str):
    small = {
        "anisotropy": dict(model=tiny_lm, n_texts=24, max_length=24, max_points=400,
                           tangent_rank=4, tangent_fit=1),
        "readouts": dict(model=tiny_lm, n_texts=24, tuned_texts=48, tuned_steps=40,
                         max_length=24, probe_cv=3, probe_seeds=2, steer_random=2),
        "geometric_memory": dict(degree=8, path_length=2, epochs=200, n_heldout=4,
                                 path_epochs=20, incontext_epochs=10, ingredients=False,
                                 umap=False),
        "concept_oscillation": dict(n_cases=60, n_bootstrap=100, toy_steps=150, toy_target_kl=0,
                                    batch_size=64, lens="logit"),
        "depth_ensemble": dict(model=tiny_lm, n_texts=12, max_length=24, toy_depths="1,2,4",
                               toy_steps=40, toy_pool=1024, lens_steps=10, shuffles=2,
                               bootstrap=20),
        "acmas": dict(n_tasks=12, n_calib=8, restore_detector="linear_probe"),
    }[name]  # fmt: skip
    study = registry.get(name)
    return study, study.configure({"device": "cpu", **small})


@pytest.fixture(scope="module")
def results(tiny_lm_dir, tmp_path_factory):
    """``name -> (registered study, the result loaded from the cache of a first run)``."""
    out = {}
    for name in STUDIES:
        mod, config = _config(name, str(tiny_lm_dir))
        cache = tmp_path_factory.mktemp(f"{name}-cache")
        kwargs = {} if name == "readouts" else {"progress": False}
        mod.run(config, cache_dir=cache, **kwargs)
        out[name] = (mod, mod.run(config, cache_dir=cache, **kwargs))
    return out


@pytest.fixture(autouse=True)
def _no_snapshots(monkeypatch):
    monkeypatch.setenv(B.SNAPSHOT_ENV, "0")


@pytest.mark.parametrize("name", STUDIES)
def test_the_card_names_metrics_claims_figures_and_provenance(results, name):
    mod, cached = results[name]
    bundle = cached._repr_mimebundle_()
    html = bundle["text/html"]
    data = bundle[JSON_MIME]
    claims = data["claims"]  # acmas's metrics take a minute: computed once, by the card
    assert [c["name"] for c in claims] == [c.name for c in mod.claims]
    for key in mod.metric_keys:
        assert f">{key}<" in html, key
    held = sum(c["holds"] is True for c in claims)
    assert f"claims: {held}/{len(claims)} hold" in html
    # a training that missed its criterion is a line on the card and makes claims not evaluable
    shortfalls = cached.shortfalls()
    assert all(isinstance(s, Shortfall) for s in shortfalls)
    for s in shortfalls:
        assert html_escape(s.message()) in html
    assert any(c.get("not_evaluable") for c in claims) == bool(shortfalls)
    for claim in claims:
        assert html_escape(claim["name"]) in html
        assert {True: "holds", False: "fails", None: "not measured"}[claim["holds"]] in html
    for kind in cached.figure_kinds():
        assert kind in html
    assert "workbench-provenance" in html and "CPU kernels" in html
    assert "<script" not in html
    json.dumps(data)
    assert data["analysis"] == name and list(data["metrics"]) == list(mod.metric_keys)
    assert data["figures"] == list(cached.figure_kinds())


@pytest.mark.parametrize("name", STUDIES)
def test_the_text_repr_is_a_few_lines_without_arrays(results, name):
    _, cached = results[name]
    text = repr(cached)
    lines = text.splitlines()
    assert lines[0].startswith(f"{type(cached).__name__}({name}")
    assert len(lines) <= 10, text
    assert all(len(line) <= 160 for line in lines), text
    assert "array(" not in text and "tensor(" not in text and "\n\n" not in text
    assert "claims:" in text and "figures:" in text
    assert cached._repr_mimebundle_(include=["text/plain"]) == {"text/plain": text}


def test_a_snapshot_of_the_main_figure_where_chromium_draws_it(results, chromium, monkeypatch):
    monkeypatch.setenv(B.SNAPSHOT_ENV, "1")
    _, cached = results["anisotropy"]
    png = cached._repr_mimebundle_()["image/png"]
    import base64

    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_result_whose_metrics_fail_still_shows_itself(results, monkeypatch):
    _, cached = results["geometric_memory"]
    again = type(cached).from_dict(cached.to_dict())  # a new object: nothing memoized

    def broken(result):
        raise ValueError("no path queries")

    monkeypatch.setattr(type(again), "compute_metrics", broken)
    text = repr(again)
    assert "metrics could not be computed" in text and len(text.splitlines()) <= 3
    assert "no path queries" in again._repr_mimebundle_()["text/html"]


def test_what_a_result_shows_saves_and_checks_is_computed_once(results, monkeypatch, tmp_path):
    mod, cached = results["readouts"]
    again = type(cached).from_dict(cached.to_dict())
    calls = []
    real = type(again).compute_metrics
    monkeypatch.setattr(type(again), "compute_metrics", lambda r: calls.append(1) or real(r))
    first = again._repr_mimebundle_()
    assert repr(again) == first["text/plain"]
    assert first[JSON_MIME]["claims"] == again.claims().to_list()
    record = json.loads(again.save(mod.configure({}), tmp_path).read_text())
    assert record["claims"] == again.claims().to_list()
    assert len(calls) == 1  # the card, the text, the claims and results.json share one


@pytest.mark.parametrize("name", STUDIES)
def test_every_figure_kind_draws_with_one_colour_per_series(results, name):
    """Issue 22: a method keeps its colour across a figure's panels (the AcMAS ROC did not)."""
    from support import same_series_same_colour

    _, cached = results[name]
    for kind in cached.figure_kinds():
        fig = cached.figure(kind)
        same_series_same_colour(fig)
        names = [t.name for t in fig.data if t.name and t.showlegend is not False]
        assert len(names) == len(set(names)), f"{name}/{kind}: a series listed twice in the legend"
