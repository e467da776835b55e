"""``workbench demo`` piped into a file says what happens when it happens.

A real ``workbench demo`` subprocess with its stdout a pipe (block-buffered, no
``PYTHONUNBUFFERED``) over two copies of the toy notebook, the second sleeping in a cell: each
line must arrive while the demo still runs, not all at the end.
"""

from __future__ import annotations

import io
import os
import selectors
import subprocess
import time

import nbformat
from runner_helpers import DATA, cli

from workbench.runner.demo import DemoProgress


def _notebooks(folder, sleep: float):
    folder.mkdir()
    nb = nbformat.read(DATA / "toy.ipynb", as_version=4)
    nbformat.write(nb, folder / "a_first.ipynb")
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    params.source = params.source.replace("sleep = 0.0", f"sleep = {sleep}")
    assert f"sleep = {sleep}" in params.source
    nbformat.write(nb, folder / "b_second.ipynb")
    return folder


def _timed_lines(proc: subprocess.Popen, timeout: float) -> list[tuple[float, str]]:
    """Each stdout line with the time it arrived here, until the process ends."""
    lines, buffer = [], b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sel.select(timeout=1.0):
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            lines.append((time.monotonic(), line.decode()))
    proc.wait(timeout=30)
    return lines


def test_piped_demo_lines_arrive_as_each_notebook_and_cell_finishes(tmp_path):
    sleep = 6.0
    notebooks = _notebooks(tmp_path / "notebooks", sleep)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["WORKBENCH_NOTEBOOKS"] = str(notebooks)
    out = tmp_path / "out"
    args = ["demo", "--runs", str(out / "runs"), "--figures", str(out / "fig")]
    proc = subprocess.Popen(
        cli(*args, "--formats", "html"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    lines = _timed_lines(proc, timeout=300)
    assert proc.returncode == 0, lines
    text = [line for _, line in lines]
    at = {line: t for t, line in lines}
    end = lines[-1][0]
    assert text[0] == "[1/2] a_first: running" and "[2/2] b_second: running" in text
    first_ok = next(line for line in text if line.startswith("a_first: ok"))
    # a_first's result is out while b_second still sleeps (not with the rest at the end)
    assert end - at[first_ok] >= sleep - 1, lines
    cells = [line for line in text if line.startswith("  b_second: cell ")]
    assert cells[-1].startswith("  b_second: cell 6/6 done"), cells  # 5 code cells + injected
    # the cell before the sleeping one is reported before the sleep ends
    second_ok = next(t for t, line in lines if line.startswith("b_second: ok"))
    assert second_ok - at[cells[2]] >= sleep - 1, lines  # cell 3: the imports; 4 sleeps
    assert text[-1].endswith("s in all)") and "index.html" in text[-1]


def test_a_terminal_gets_a_bar_and_a_pipe_gets_lines():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    piped, tty = io.StringIO(), Tty()
    for progress in (DemoProgress(piped), DemoProgress(tty)):
        progress.start("toy", 1, 1)
        for done in (1, 2, 3):
            progress.cell("toy", done, 3)
    assert not DemoProgress(piped).bar and DemoProgress(tty).bar
    assert piped.getvalue().splitlines()[1:] == [f"  toy: cell {i}/3 done (0 s)" for i in (1, 2, 3)]
    assert "toy: cell" not in tty.getvalue() and "toy cells" in tty.getvalue()
