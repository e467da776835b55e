"""Every study's notebook has the template's shape: four code cells, parameters == config fields."""

from pathlib import Path

import nbformat
import pytest

from workbench.analyses import ANALYSES, registry
from workbench.runner.params import notebook_params

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("analysis", ANALYSES)
def test_notebook_has_four_code_cells_and_lists_each_parameter_once(analysis):
    nb = nbformat.read(REPO / "notebooks" / f"{analysis}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code) == 4
    assert "parameters" in code[0].metadata.get("tags", [])
    names = [
        line.split("=")[0].strip()
        for line in code[0].source.splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    ]
    config = registry.get(analysis).config
    assert names == [*config.parameter_names(), "out_dir"]
    # the config is built from the parameters (from_params), never by listing them again
    assert f"{config.__name__}(" not in "".join(c.source for c in code[1:])
    assert "from_params(globals())" in code[1].source
    # the notebook's defaults are the config's
    namespace: dict = {}
    exec(code[0].source, namespace)
    assert config.from_params(namespace) == config()
    assert nb.metadata["kernelspec"]["name"] == "python3"
    # and `workbench run` sees every parameter (papermill's parser skips a line it cannot read)
    specs = notebook_params(REPO / "notebooks" / f"{analysis}.ipynb")
    assert sorted(specs) == sorted([*config.parameter_names(), "out_dir"])
