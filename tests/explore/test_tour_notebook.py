"""notebooks/tour.ipynb runs under papermill on a small tiny-lm, and its outputs show themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "tour.ipynb"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def test_tour_has_a_parameters_cell():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "parameters" in code[0]["metadata"].get("tags", [])
    assert not any(c.get("outputs") for c in code), "commit the tour without outputs"


@pytest.mark.slow
def test_tour_runs_under_papermill(tiny_lm_dir, tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    pytest.importorskip("anywidget")
    monkeypatch.setenv("WORKBENCH_SNAPSHOTS", "0")  # figure snapshots are tested on their own
    out = tmp_path / "executed.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOK),
        str(out),
        parameters={
            "model": str(tiny_lm_dir),
            "device": "cpu",
            "n_texts": 24,
            "max_length": 24,
            "probe_cv": 2,
            "out_dir": str(tmp_path / "run"),
        },
        cwd=str(REPO),
        progress_bar=False,
        kernel_name="python3",
    )
    nb = json.loads(out.read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    shown = [o["data"] for o in outputs if o["output_type"] in ("execute_result", "display_data")]
    html = "\n".join("".join(d.get("text/html", "")) for d in shown)
    for card in (
        "Subject",
        "Activations",
        "ActivationStore",
        "LensResult",
        "ProbeSweepResult",
        "PatchingResult",
        "lens explorer",
        "activations explorer",
        "patching explorer",
    ):
        assert f"font-weight:700'>{card}</span>" in html, card
    assert html.count("workbench-provenance") >= 9
    explorers = [d for d in shown if "Explorer(" in "".join(d.get("text/plain", ""))]
    assert len(explorers) == 3  # each a live widget with its static twin
    assert all(WIDGET_MIME in d and "text/html" in d for d in explorers)
    assert "<script" not in html
    text = "".join("".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream")
    assert "plain:" in text and "steered:" in text
