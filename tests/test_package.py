"""The package's public names: what `from workbench import ...` gives, in any import order."""

import subprocess
import sys

import pytest

ORDERS = [
    "import workbench.store, workbench.interventions, workbench.lens",
    "import workbench.analyses.anisotropy.collect",
    "pass",
]


@pytest.mark.parametrize("first", ORDERS)
def test_public_names_are_the_functions_whatever_was_imported_first(first):
    """Regression: importing a submodule first bound `workbench.capture` to a module."""
    code = (
        f"{first}\n"
        "import inspect, workbench\n"
        "from workbench import capture, load_model, ActivationStore, WorkbenchError, geometry\n"
        "assert inspect.isfunction(capture), type(capture)\n"
        "assert inspect.isfunction(load_model), type(load_model)\n"
        "assert inspect.isclass(ActivationStore) and issubclass(WorkbenchError, Exception)\n"
        "assert inspect.ismodule(geometry)\n"
        "assert workbench.capture is capture\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_importing_the_package_loads_no_torch():
    code = "import sys, workbench, workbench.figures\nassert 'torch' not in sys.modules\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
