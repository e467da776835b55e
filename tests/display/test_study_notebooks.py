"""The study notebooks show, not format: the run cell ends with the result, whose card shows.

Each ``notebooks/<study>.ipynb`` keeps its four code cells (parameters; config and recorder;
run and show; save and claims); the run cell draws the figures and ends with ``result``, the
study result rendered by its own ``_repr_mimebundle_`` (no ``print`` of formatted numbers).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from support import run_notebook

from workbench.display import JSON_MIME

REPO = Path(__file__).resolve().parents[2]
STUDIES = (
    "anisotropy",
    "readouts",
    "geometric_memory",
    "concept_oscillation",
    "depth_ensemble",
    "acmas",
)


def _code(name: str) -> list:
    nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    return [c for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("name", STUDIES)
def test_the_run_cell_ends_with_the_result_and_prints_nothing(name):
    code = _code(name)
    assert len(code) == 4
    run = code[2].source
    assert "print(" not in run and "study.metrics(" not in run
    assert "figures.show(result.figure(kind), kind)" in run
    assert run.splitlines()[-1].split("#")[0].strip() == "result"
    assert code[3].source.splitlines() == [
        "result.save(config, out_dir, figures.written)",
        "result.claims()",
    ]
    assert all(not c.outputs for c in code)


@pytest.mark.slow
def test_the_executed_notebook_holds_the_results_card(tiny_lm_dir, tmp_path, html_figures):
    params = dict(
        model=str(tiny_lm_dir), n_texts=12, tuned_texts=24, tuned_steps=20, max_length=16,
        probe_cv=2, probe_seeds=1, steer_random=2, device="cpu",
    )  # fmt: skip
    _, record = run_notebook(REPO / "notebooks" / "readouts.ipynb", params, tmp_path, cwd=REPO)
    nb = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    run = next(c for c in nb.cells if c.source.startswith("result = study.run("))
    card = next(o for o in run.outputs if o.output_type == "execute_result")
    assert "ReadoutsResult" in card.data["text/plain"]
    html = card.data["text/html"]
    assert "claims:" in html and "kl_logit_by_layer" in html and "workbench-provenance" in html
    assert card.data[JSON_MIME]["metrics"].keys() == record["metrics"].keys()
    assert not [o for o in run.outputs if o.output_type == "stream" and o.name == "stdout"]
