"""One contract over every registered study, and a seventh study added from outside the package.

Like scikit-learn's ``parametrize_with_checks`` for estimators: every study in the registry is held
to the same declarations (its result class, claims on its own metrics, its figures, its presets),
and a study written outside the package runs through the runner, the display and the replication
once it is registered, with no change anywhere else.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from workbench.analyses import ANALYSES, registry
from workbench.analyses.base import Study, StudyConfig, StudyResult
from workbench.claims import check_claims
from workbench.errors import ConfigError

STUDIES = tuple(registry.studies().values())


def test_the_registry_lists_the_bundled_studies_in_demo_order():
    assert tuple(registry.studies()) == ANALYSES
    with pytest.raises(registry.UnknownStudyError, match="known: anisotropy"):
        registry.get("nope")


@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_every_study_keeps_the_protocol(study: Study):
    assert issubclass(study.config, StudyConfig) and dataclasses.is_dataclass(study.config)
    result = study.result
    assert issubclass(result, StudyResult) and dataclasses.is_dataclass(result)
    assert result.__dataclass_params__.frozen
    assert result.__repr__ is StudyResult.__repr__  # the card's text, not the dataclass repr
    assert study.name == result.STUDY and study.paper
    assert study.claims and study.metric_keys
    check_claims(study.claims, study.metric_keys)
    assert study.main_figure in result.FIGURES
    for name in ("compute_metrics", "figure_builders", "provenance"):
        assert getattr(result, name) is not getattr(StudyResult, name), name
    assert callable(result.from_dict) and callable(result.to_dict)
    assert study.configure({}) == study.config()
    for preset in study.presets:
        assert isinstance(study.configure(preset=preset), study.config)
    with pytest.raises(ConfigError, match="no preset"):
        study.configure(preset="nope")


@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_every_study_refuses_a_bad_seed_in_one_line(study: Study):
    assert "seed" in {f.name for f in dataclasses.fields(study.config)}
    with pytest.raises(ConfigError, match="seed must be a non-negative integer") as error:
        study.configure({"seed": -1})
    assert "\n" not in str(error.value)


# ----- a seventh study, written outside the package ---------------------------------------------

MODULE = '''
"""A study of a coin: the mean of n draws (a seventh study, outside the package)."""
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from workbench.analyses.base import Study, StudyConfig, StudyResult
from workbench.claims import Claim


@dataclass(frozen=True)
class CoinConfig(StudyConfig):
    POSITIVE: ClassVar[tuple[str, ...]] = ("n",)
    n: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        self.validate()


def histogram(result):
    import plotly.graph_objects as go

    return go.Figure(go.Histogram(x=list(result.draws)))


@dataclass(frozen=True, repr=False)
class CoinResult(StudyResult):
    STUDY: ClassVar[str] = "coin"
    CLAIMS: ClassVar[tuple] = (Claim("the coin is fair", "mean", "<", 0.6),)
    METRIC_KEYS: ClassVar[tuple[str, ...]] = ("mean", "n")
    FIGURES: ClassVar[tuple[str, ...]] = ("histogram",)
    MAIN_FIGURE: ClassVar[str] = "histogram"

    draws: tuple[float, ...]
    notes: tuple[str, ...] = ()

    def compute_metrics(self) -> dict[str, Any]:
        return {"mean": float(np.mean(self.draws)), "n": len(self.draws)}

    def figure_builders(self):
        return {"histogram": histogram}

    def provenance(self) -> dict[str, Any]:
        return {"model": "a coin", "revision": None}

    def to_dict(self) -> dict[str, Any]:
        return {"draws": list(self.draws), "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data):
        return cls(tuple(data["draws"]), tuple(data["notes"]))


def run(config, *, cache_dir=None, progress=True):
    draws = np.random.default_rng(config.seed).integers(0, 2, config.n)
    return CoinResult(tuple(float(x) for x in draws))


STUDY = Study(
    name="coin", config=CoinConfig, result=CoinResult, run=run,
    presets={"test": {"n": 20}}, paper="a fair coin", notebook=NOTEBOOK,
)
'''

CELLS = (
    "n = 200\nseed = 0\nout_dir = 'runs/coin'",
    "import sys\nsys.path.insert(0, {folder!r})\nimport coin_study as study\n"
    "from workbench.figures import FigureRecorder\n"
    "config = study.CoinConfig.from_params(globals())\nfigures = FigureRecorder(out_dir)",
    "result = study.run(config)\nfor kind in result.figure_kinds():\n"
    "    figures.show(result.figure(kind), kind)\nresult",
    "result.save(config, out_dir, figures.written)\nresult.claims()",
)


@pytest.fixture
def coin(tmp_path, monkeypatch):
    """The coin study, registered for the test (module and notebook in ``tmp_path``)."""
    notebook = tmp_path / "coin.ipynb"
    (tmp_path / "coin_study.py").write_text(
        textwrap.dedent(MODULE).replace("NOTEBOOK", repr(str(notebook)))
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c.format(folder=str(tmp_path))) for c in CELLS]
    nb.cells[0].metadata["tags"] = ["parameters"]
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["kernelspec"] = kernel
    nbformat.write(nb, notebook)
    monkeypatch.syspath_prepend(str(tmp_path))
    import coin_study

    remove = registry.register(coin_study.STUDY)
    yield coin_study
    remove()
    sys.modules.pop("coin_study", None)


def test_a_registered_study_is_listed_configured_and_shown(coin):
    study = registry.get("coin")
    assert "coin" in registry.studies() and study.configure(preset="test").n == 20
    with pytest.raises(ConfigError, match="registered already"):
        registry.register(coin.STUDY)
    result = study.run(study.configure({"seed": 1}))
    card = result._repr_mimebundle_()
    assert "the coin is fair" in card["text/html"] and ">mean<" in card["text/html"]
    assert repr(result).startswith("CoinResult(coin")
    assert result.figure().data  # the main figure
    from workbench.runner.notebooks import available, find_notebook

    assert find_notebook("coin") == Path(coin.STUDY.notebook) and "coin" in available()


@pytest.mark.slow
def test_a_registered_study_runs_through_the_runner_and_the_replication(coin, tmp_path):
    from workbench.errors import WorkbenchError
    from workbench.runner.replicate import replicate
    from workbench.runner.run import run_analysis

    with pytest.raises(WorkbenchError, match="n must be an integer"):
        run_analysis("coin", {"n": 0}, tmp_path / "bad")
    # one replication is the runner's runs too: each seed is a `workbench run` of the notebook
    rep = replicate("coin", [0, 1, 2], tmp_path / "rep", params={"n": 400}, formats="html")
    verdicts = json.loads((tmp_path / "rep" / "replication.json").read_text())["claims"]
    assert [v["verdict"] for v in verdicts] == ["robust"] and len(rep.ran) == 3
    record = json.loads((tmp_path / "rep" / "runs" / "seed-0" / "results.json").read_text())
    assert record["analysis"] == "coin" and record["params"]["n"] == 400
    assert [c["name"] for c in record["claims"]] == ["the coin is fair"]
    assert "git_commit" in record["provenance"] and record["figures"]
