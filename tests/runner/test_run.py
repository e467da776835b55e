"""`workbench run`: results.json schema and provenance, bad parameters, classified failures."""

from __future__ import annotations

import json

import pytest
from runner_helpers import workbench

from workbench.cli import main
from workbench.figures import FORMATS, read_provenance, static_export_problem
from workbench.runner.errors import ParameterError
from workbench.runner.params import parse_value
from workbench.runner.results import read_results


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """One CLI run of the toy notebook with every figure format."""
    out = tmp_path_factory.mktemp("run") / "toy-run"
    proc = workbench(
        "run", "toy", "-p", "n", "5", "-p", "scale", "2", "-p", "model", "x: y", "--out", str(out)
    )
    return out, proc


@pytest.mark.slow
def test_run_writes_notebook_results_and_figures(toy_run):
    out, proc = toy_run
    assert proc.returncode == 0, proc.stderr
    assert (out / "toy.ipynb").is_file()
    record = json.loads((out / "results.json").read_text())
    assert set(record) == {"analysis", "params", "metrics", "figures", "claims", "provenance"}
    assert [c["holds"] for c in record["claims"]] == [
        True,
        False,
    ]  # the toy's noise is -1 at seed 0
    assert record["analysis"] == "toy"
    params = record["params"]
    assert params["n"] == 5 and params["scale"] == 2.0 and params["model"] == "x: y"
    assert params["out_dir"] == str(out.resolve()) and params["sleep"] == 0.0  # defaults too
    assert record["metrics"]["total"] == sum((2.0 * i) ** 2 for i in range(5))
    formats = FORMATS if static_export_problem() is None else ("html",)
    assert record["figures"] == [f"figures/squares.{f}" for f in formats]
    assert all((out / f).is_file() for f in record["figures"])
    prov = record["provenance"]
    assert prov["model"] == "x: y" and prov["seed"] == 0 and "revision" in prov
    assert len(prov["git_commit"]) == 40
    assert prov["versions"]["workbench"] and prov["versions"]["torch"]
    assert prov["versions"]["transformers"] and prov["versions"]["papermill"]
    assert prov["started"][:2] == "20" and "T" in prov["started"]
    assert 0 < prov["seconds"] < 300
    assert read_results(out) is not None


@pytest.mark.slow
def test_exported_figures_are_valid_with_provenance(toy_run, chromium):
    import io

    import numpy as np
    from PIL import Image

    out, _ = toy_run
    figs = out / "figures"
    assert (figs / "squares.pdf").read_bytes().startswith(b"%PDF")
    svg = (figs / "squares.svg").read_text()
    assert svg.lstrip().startswith("<svg") and "</svg>" in svg
    pixels = np.asarray(Image.open(io.BytesIO((figs / "squares.png").read_bytes())).convert("L"))
    assert pixels.shape[0] > 100 and pixels.var() > 0
    assert "plotly.min.js" in (figs / "squares.html").read_text()
    for fmt in ("pdf", "svg", "png"):
        meta = read_provenance(figs / f"squares.{fmt}")
        assert meta is not None, fmt
        assert meta["analysis"] == "toy" and meta["params"]["n"] == 5, fmt
        assert meta["title"] == "Squares" and len(meta["git_commit"]) == 40, fmt


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-p", "nn", "3"], ["unknown parameter 'nn'", "n, scale"]),
        (["-p", "n", "2.5"], ["'n' expects int", "2.5"]),
        (["-p", "fail", "maybe"], ["'fail' expects bool"]),
        (["-p", "n", "!!python/object/apply:os.system [echo hi]"], ["not", "plain data"]),
        (["-p", "scale", "{a: !!binary aGk=}"], ["not plain data"]),
        (["--formats", "pdf,gif"], ["unknown figure format", "gif"]),
        (["-p", "out_dir", "/etc"], ["set by the runner"]),
        (["-p", "n", "1", "-p", "n", "2"], ["given twice"]),
    ],
)
def test_bad_parameters_exit_2_before_any_kernel(args, words, tmp_path, capsys, monkeypatch):
    import papermill

    def no_kernel(*a, **k):
        raise AssertionError("a kernel was started")

    monkeypatch.setattr(papermill, "execute_notebook", no_kernel)
    out = tmp_path / "never"
    assert main(["run", "toy", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err
    assert not out.exists()


def test_static_formats_without_chromium_are_refused_before_any_kernel(
    tmp_path, capsys, monkeypatch
):
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("kernel"))
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium"))
    out = tmp_path / "never"
    commands = [
        ["run", "toy", "--out", str(out), "--formats", "pdf,html"],
        ["demo", "--runs", str(out), "--figures", str(out), "--formats", "png"],
    ]
    for argv in commands:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "needs Chromium" in err and err.count("\n") == 1
        assert not out.exists()


def test_unknown_and_unbuilt_analyses_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORKBENCH_NOTEBOOKS")
    monkeypatch.setattr("workbench.runner.notebooks.notebooks_dir", lambda o=None: tmp_path)
    assert main(["run", "acmas", "--out", str(tmp_path / "x")]) == 2
    assert "'acmas' is not built yet" in capsys.readouterr().err
    assert main(["run", "nope", "--out", str(tmp_path / "x")]) == 2
    assert "unknown analysis 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_values_are_parsed_as_plain_data_only():
    assert parse_value("3") == 3 and parse_value("0.5") == 0.5 and parse_value("true") is True
    assert parse_value("[1, 2]") == [1, 2] and parse_value("null") is None
    assert parse_value("__import__('os')") == "__import__('os')"  # a string, never evaluated
    for bad in ("2024-01-01", ".nan", "!!python/name:os.system", "{1: 2}"):
        with pytest.raises(ParameterError):
            parse_value(bad)


@pytest.mark.slow
def test_failing_cell_exits_1_keeps_partial_notebook_and_names_cell(tmp_path):
    out = tmp_path / "fails"
    proc = workbench("run", "toy", "-p", "fail", "true", "--formats", "html", "--out", str(out))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: toy failed: cell-error in cell 4 ('if marker:')"), last
    assert "ValueError: toy failure for n=8" in last
    assert (out / "toy.ipynb").is_file() and not (out / "results.json").exists()
    failure = json.loads((out / "failure.json").read_text())
    assert failure["kind"] == "cell-error" and failure["cell"] == 4


@pytest.mark.slow
def test_timeout_is_classified_with_its_cell(tmp_path):
    from workbench.runner.run import run_analysis

    result = run_analysis("toy", {"sleep": 60.0, "formats": "html"}, tmp_path / "slow", timeout=8)
    assert not result.ok and result.failure.kind == "timeout"
    assert result.failure.source == "if marker:"
    assert result.notebook.is_file()
