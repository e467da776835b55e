"""``workbench run``: execute one analysis notebook with papermill, complete ``results.json``.

Steps: find ``notebooks/<analysis>.ipynb``; read its ``parameters`` cell and check every given value
(name, type, plain data) before anything is written or any kernel starts; execute it with papermill
into ``out_dir/<analysis>.ipynb`` with ``out_dir`` injected; then add the provenance the notebook
cannot know (git commit, versions, start time, duration) to the ``results.json`` it wrote.

The kernel runs with its working directory at ``out_dir`` (absolute), so anything a notebook writes
to a relative path lands in its own run folder and concurrent runs never share a folder.

A failed run keeps the partial executed notebook and writes ``out_dir/failure.json``; the failure is
classified as ``cell-error``, ``dead-kernel``, ``timeout``, ``no-results`` or ``error`` and names
the failing cell (its index in the executed notebook, not counting papermill's error banners).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from workbench import provenance as prov
from workbench.files import atomic_write_bytes
from workbench.provenance import PROVENANCE_ENV
from workbench.runner.kernel import KERNEL_MANAGER
from workbench.runner.lifecycle import kernels_stopped_on_interrupt
from workbench.runner.notebooks import find_notebook
from workbench.runner.params import defaults, notebook_params, resolve
from workbench.runner.results import RESULTS, complete_provenance, read_results

FAILURE = "failure.json"
FailureKind = Literal["cell-error", "dead-kernel", "timeout", "no-results", "error"]


@dataclass(frozen=True)
class Failure:
    """Why a run failed.

    Attributes:
        kind: ``cell-error``, ``dead-kernel``, ``timeout``, ``no-results`` or ``error``.
        cell: Index of the failing cell in the executed notebook (``None`` if not known).
        source: First line of that cell's source.
        message: The exception line, e.g. ``ValueError: bad n``.
    """

    kind: FailureKind
    cell: int | None
    source: str
    message: str

    def describe(self) -> str:
        """One line: kind, cell and exception."""
        where = f"cell {self.cell} ({self.source!r})" if self.cell is not None else "notebook"
        return f"{self.kind} in {where}: {self.message}"


@dataclass(frozen=True)
class RunResult:
    """The outcome of one notebook run.

    Attributes:
        analysis: The analysis (notebook name).
        out_dir: The run folder.
        notebook: The executed notebook (partial if the run failed).
        params: The injected parameters (including ``out_dir``).
        seconds: Wall time of the execution.
        failure: ``None`` on success.
    """

    analysis: str
    out_dir: Path
    notebook: Path
    params: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    failure: Failure | None = None

    @property
    def ok(self) -> bool:
        """Whether the run finished and wrote a complete ``results.json``."""
        return self.failure is None

    @property
    def results(self) -> Path:
        """Path of ``results.json``."""
        return self.out_dir / RESULTS


def prepare(
    analysis: str,
    params: Mapping[str, Any] | None = None,
    raw: Mapping[str, str] | None = None,
    *,
    notebooks_dir: str | Path | None = None,
) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """Finds the notebook and checks parameters, touching nothing.

    Returns:
        ``(notebook, checked given values, every parameter's effective value)``.

    Raises:
        UnknownAnalysisError, NotBuiltError, ParameterError: on bad input.
        ConfigError: (or another WorkbenchError) the study's own config refuses the values.
    """
    notebook = find_notebook(analysis, notebooks_dir)
    specs = notebook_params(notebook)
    checked = resolve(specs, dict(params or {}), raw)
    effective = {**defaults(specs), **checked}
    if notebooks_dir is None:
        check_study(analysis, effective)
    return notebook, checked, effective


def check_study(analysis: str, params: Mapping[str, Any]) -> None:
    """Validates parameters with the study's own config before any kernel starts.

    The registered study (:mod:`workbench.analyses.registry`) builds its config from them
    (:meth:`~workbench.analyses.registry.Study.configure`: the config's validation, or the
    study's ``check`` when it also reads the files the parameters name), touching no model. When
    the studies cannot be imported here (a missing optional dependency), the notebook reports the
    import error itself.

    Raises:
        WorkbenchError: A one-line error naming the bad parameter.
    """
    from workbench.analyses import registry

    try:
        study = registry.get(analysis)
    except (ImportError, registry.UnknownStudyError):
        return
    study.configure(params)


@contextlib.contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Sets (or, for ``None``, unsets) environment variables for the block, then restores them."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        _set_environment(values)
        yield
    finally:
        _set_environment(saved)


def _set_environment(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _first_line(source: str) -> str:
    lines = [line for line in source.splitlines() if line.strip()]
    return lines[0].strip()[:80] if lines else ""


def _locate(executed: Path, status: str) -> tuple[int | None, str]:
    """Index and first source line of the failing cell in the executed notebook."""
    import nbformat

    try:
        nb = nbformat.read(executed, as_version=4)
    except Exception:  # the partial notebook may be unreadable; report no cell then
        return None, ""
    cells = [c for c in nb.cells if "papermill-error-cell-tag" not in c.metadata.get("tags", [])]
    found = None
    for index, cell in enumerate(cells):
        meta = cell.metadata.get("papermill", {})
        if cell.cell_type != "code":
            continue
        if status == "failed" and meta.get("status") == "failed":
            return index, _first_line(cell.source)
        if meta.get("start_time"):
            found = index  # the last cell that started is the one that hung or died
    if found is None:
        return None, ""
    return found, _first_line(cells[found].source)


def _classify(exc: BaseException, executed: Path) -> Failure:
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        cell, source = _locate(executed, "failed")
        return Failure("cell-error", cell, source, f"{exc.ename}: {exc.evalue}".strip())
    if isinstance(exc, CellTimeoutError):
        cell, source = _locate(executed, "running")
        return Failure("timeout", cell, source, str(exc).splitlines()[0])
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, DeadKernelError) or "kernel died" in text.lower():
        cell, source = _locate(executed, "running")
        return Failure("dead-kernel", cell, source, f"{type(exc).__name__}: {text}")
    return Failure("error", None, "", f"{type(exc).__name__}: {text}")


def _cell_counter(notebook: Path, on_cell: Callable[[int, int], None]) -> Callable[..., None]:
    """An nbclient ``on_cell_executed`` hook calling ``on_cell(done, total)`` per code cell."""
    import nbformat

    cells = nbformat.read(notebook, as_version=4).cells
    total = sum(c.cell_type == "code" for c in cells) + 1  # papermill injects the parameters
    done = 0

    def hook(cell: Any = None, **_: Any) -> None:
        nonlocal done
        if getattr(cell, "cell_type", "code") == "code":
            done += 1
            on_cell(min(done, total), total)

    return hook


def run_analysis(
    analysis: str,
    params: Mapping[str, Any] | None = None,
    out_dir: str | Path = "run",
    *,
    raw: Mapping[str, str] | None = None,
    notebooks_dir: str | Path | None = None,
    timeout: float | None = None,
    kernel: str | None = None,
    formats: str | None = None,
    env: Mapping[str, str] | None = None,
    on_cell: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Executes ``analysis``'s notebook into ``out_dir`` and completes its ``results.json``.

    Args:
        analysis: An analysis name (see :data:`~workbench.runner.notebooks.ANALYSES`).
        params: Parameter values to inject (already parsed plain data).
        out_dir: The run folder (created).
        raw: The command-line text of each value (``str`` parameters keep it verbatim).
        notebooks_dir: Where the notebooks are (default: ``$WORKBENCH_NOTEBOOKS`` or the repo's).
        timeout: Per-cell timeout in seconds (``None``: no limit).
        kernel: Kernel name (default: the notebook's).
        formats: Figure formats the notebook's :class:`~workbench.figures.FigureRecorder`
            writes: ``"auto"``/``None`` (HTML, plus PDF/SVG/PNG when a Chromium is found) or a
            comma list such as ``"pdf,png"``, all of which must then be possible here.
        env: Extra environment variables of the kernel (``ATEN_CPU_CAPABILITY`` and friends: the
            kernel is a new process, so torch reads them when the notebook imports it).
        on_cell: Called as ``on_cell(done, total)`` after each code cell ran (``total`` counts
            the cell papermill injects); ``workbench demo`` prints progress with it.

    Returns:
        The outcome; a failed run has ``failure`` set and is not an exception.

    Raises:
        UnknownAnalysisError, NotBuiltError, ParameterError: bad input, before anything is written.
        ExportError: ``formats`` names a static format and no Chromium is found, before any
            kernel starts.
    """
    import papermill

    from workbench.figures import FORMATS_ENV, resolve_formats

    notebook, checked, effective = prepare(analysis, params, raw, notebooks_dir=notebooks_dir)
    formats = formats or os.environ.get(FORMATS_ENV) or "auto"
    if formats != "auto":
        formats = ",".join(resolve_formats(formats)[0])
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for stale in (RESULTS, FAILURE):
        (out / stale).unlink(missing_ok=True)
    executed = out / f"{analysis}.ipynb"
    inject = {**checked, "out_dir": str(out)}
    effective = {**effective, "out_dir": str(out)}
    commit, dirty = prov.git_state()
    started = prov.now_iso()
    record = {"analysis": analysis, "params": effective, "git_commit": commit, "started": started}
    kernel_env = {
        **(env or {}),
        PROVENANCE_ENV: json.dumps(record, default=str),
        FORMATS_ENV: formats,
    }
    hooks = {} if on_cell is None else {"on_cell_executed": _cell_counter(notebook, on_cell)}
    t0 = time.perf_counter()
    failure = None
    try:
        with environment(kernel_env), kernels_stopped_on_interrupt():
            papermill.execute_notebook(
                str(notebook),
                str(executed),
                parameters=inject,
                cwd=str(out),
                kernel_name=kernel,
                progress_bar=False,
                log_output=False,
                execution_timeout=timeout,
                kernel_manager_class=KERNEL_MANAGER,
                # a batch run has no live widget: saved widget state would make an nbconvert
                # export render each explorer through a CDN script instead of its static twin
                store_widget_state=False,
                **hooks,
            )
    except Exception as exc:  # every papermill/nbclient failure is classified, never propagated
        failure = _classify(exc, executed)
    seconds = time.perf_counter() - t0
    if failure is None and read_results(out, complete=False) is None:
        failure = Failure("no-results", None, "", f"the notebook wrote no valid {out / RESULTS}")
    if failure is None:
        complete_provenance(
            out / RESULTS,
            params=effective,
            provenance={
                "git_commit": commit,
                "git_dirty": dirty,
                "versions": prov.versions(),
                "started": started,
                "seconds": round(seconds, 3),
            },
        )
    else:
        record = {"analysis": analysis, "params": effective, **asdict(failure)}
        atomic_write_bytes(out / FAILURE, json.dumps(record, indent=2, default=str).encode())
    return RunResult(analysis, out, executed, effective, seconds, failure)
