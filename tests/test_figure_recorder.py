"""FigureRecorder: HTML always, static formats only where a Chromium is found, one warning."""

from __future__ import annotations

import json
import warnings

import plotly.graph_objects as go
import pytest

from workbench import figures
from workbench.figures import ExportError, FigureRecorder, StaticExportSkipped


def _fig(title="Squares"):
    return figures.style(go.Figure(go.Scatter(x=[1, 2, 3], y=[1, 4, 9])), title=title)


@pytest.fixture
def no_chromium(monkeypatch, tmp_path):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chromium"))
    monkeypatch.delenv(figures.FORMATS_ENV, raising=False)


def test_without_chromium_auto_writes_html_and_warns_once(no_chromium, tmp_path):
    with pytest.warns(StaticExportSkipped, match="apt-get install chromium") as caught:
        recorder = FigureRecorder(tmp_path / "run")
        recorder.show(_fig(), "a")
        recorder.show(_fig("Other"), "b")
    assert len(caught) == 1
    assert [p.name for p in recorder.written] == ["a.html", "b.html"]
    assert recorder.skipped_reason and "Chromium" in recorder.skipped_reason
    folder = tmp_path / "run" / "figures"
    assert (folder / "plotly.min.js").stat().st_size > 100_000
    assert 'src="plotly.min.js"' in (folder / "a.html").read_text()
    manifest = json.loads((folder / "figures.json").read_text())["figures"]
    assert [(e["name"], e["title"], e["files"]) for e in manifest] == [
        ("a", "Squares", ["a.html"]),
        ("b", "Other", ["b.html"]),
    ]
    assert manifest[0]["width"] == figures.ONE_COLUMN and manifest[0]["height"] == figures.HEIGHT


def test_explicit_static_formats_without_chromium_are_an_error(no_chromium, tmp_path, monkeypatch):
    with pytest.raises(ExportError, match="needs Chromium"):
        FigureRecorder(tmp_path, formats="pdf,html")
    monkeypatch.setenv(figures.FORMATS_ENV, "png")
    with pytest.raises(ExportError, match="needs Chromium"):
        FigureRecorder(tmp_path)
    with pytest.raises(ExportError, match="unknown figure format"):
        FigureRecorder(tmp_path, formats="gif")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recorder = FigureRecorder(tmp_path, formats="html")  # no warning: nothing was skipped
    assert recorder.formats == ["html"]


def test_a_chromium_that_fails_to_render_falls_back_to_html(tmp_path, monkeypatch):
    from workbench.figures import recorder as module

    monkeypatch.setattr(module, "resolve_formats", lambda f: (list(figures.FORMATS), None))
    real = module.export

    def broken(fig, path, formats):
        if formats != ["html"]:
            raise ExportError("Chromium failed to render the pdf (TimeoutError: x)")
        return real(fig, path, formats)

    monkeypatch.setattr(module, "export", broken)
    with pytest.warns(StaticExportSkipped, match="failed to render"):
        recorder = FigureRecorder(tmp_path)
        recorder.show(_fig(), "a")
    assert [p.name for p in recorder.written] == ["a.html"]
    explicit = FigureRecorder(tmp_path, formats="pdf,html")
    with pytest.raises(ExportError, match="failed to render"):
        explicit.show(_fig(), "b")


def test_bad_names_and_repeated_names(tmp_path):
    recorder = FigureRecorder(tmp_path, formats="html")
    for bad in ("", "../x", ".hidden", "a/b"):
        with pytest.raises(ExportError, match="bad figure name"):
            recorder.show(_fig(), bad)
    recorder.show(_fig("one"), "same")
    recorder.show(_fig("two"), "same")
    manifest = json.loads((tmp_path / "figures" / "figures.json").read_text())["figures"]
    assert [e["title"] for e in manifest] == ["two"]


def test_static_export_problem_names_the_fix(no_chromium):
    assert "apt-get install chromium" in figures.static_export_problem()
    assert figures.resolve_formats("auto")[0] == ["html"]
    assert figures.resolve_formats("html, html")[0] == ["html"]
