"""``workbench sweep``: one notebook run per grid point, resumable, gathered into one table.

Layout of a sweep folder::

    DIR/sweep.json                 the analysis (a folder holds one analysis's sweeps)
    DIR/runs/<point id>/           one ``workbench run`` folder per point (+ ``.claim``)
    DIR/results.parquet, .csv      one row per point: params x metrics x provenance
    DIR/summary.html, .png         each scalar metric against the run's parameters (.png with
                                   Chromium, unless --formats leaves PNG out)

A point is finished when its ``results.json`` is complete; finished points are skipped, so rerunning
the same command resumes a sweep that was killed. A point that fails is retried once, then reported;
it never stops the others. Each point is claimed while it runs (:mod:`workbench.runner.claim`), so
two sweeps into one folder never run the same point: a point claimed elsewhere is waited for.
"""

from __future__ import annotations

import collections
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.files import atomic_write_bytes
from workbench.runner.backends import PointTask, as_path, make_backend
from workbench.runner.errors import GridError
from workbench.runner.grid import Grid, point_id
from workbench.runner.notebooks import find_notebook
from workbench.runner.params import notebook_params, resolve
from workbench.runner.results import read_results

log = logging.getLogger(__name__)
SWEEP = "sweep.json"


@dataclass(frozen=True)
class SweepResult:
    """The outcome of a sweep.

    Attributes:
        out_dir: The sweep folder.
        ran: Points this call executed successfully.
        skipped: Points already finished (by an earlier or a concurrent sweep).
        failed: Point id -> the last failure, for points that failed twice.
        tables: The written table files.
    """

    out_dir: Path
    ran: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    tables: tuple[Path, ...] = ()


def plan(
    analysis: str, grid: Grid, *, notebooks: str | Path | None = None
) -> dict[str, dict[str, Any]]:
    """Checks every grid point against the notebook's parameters before anything runs.

    Returns:
        Point id -> checked parameter values, in grid order.

    Raises:
        UnknownAnalysisError, NotBuiltError, ParameterError: on bad input.
    """
    specs = notebook_params(find_notebook(analysis, notebooks))
    points = {}
    for values in grid.points():
        checked = resolve(specs, values)
        points.setdefault(point_id(checked), checked)
    return points


def _mark(out: Path, analysis: str, grid: Grid) -> None:
    marker = out / SWEEP
    if marker.exists():
        try:
            before = json.loads(marker.read_text()).get("analysis")
        except (OSError, ValueError):
            before = None
        if before not in (None, analysis):
            raise GridError(
                f"{out} holds a sweep of {before!r}, not {analysis!r}; use another --out"
            )
    record = {"analysis": analysis, "axes": grid.axes, "fixed": grid.fixed}
    atomic_write_bytes(marker, json.dumps(record, indent=2).encode())


def run_sweep(
    analysis: str,
    grid: Grid,
    out_dir: str | Path,
    *,
    backend: str = "local",
    workers: int = 1,
    address: str | None = None,
    notebooks: str | Path | None = None,
    timeout: float | None = None,
    retries: int = 1,
    poll: float = 1.0,
    formats: str | None = None,
) -> SweepResult:
    """Runs every point of ``grid`` not yet finished, then writes the table and summary.

    Args:
        analysis: The analysis.
        grid: The parameter grid.
        out_dir: The sweep folder (rerun with the same folder to resume).
        backend: ``local`` (worker processes) or ``ray``.
        workers: Worker processes (local) or CPUs of a local Ray cluster.
        address: An existing Ray cluster.
        notebooks: Where the notebooks are (default as for ``workbench run``).
        timeout: Per-cell timeout in seconds.
        retries: Extra attempts for a point that fails.
        poll: Seconds between checks on points claimed by another sweep.
        formats: Figure formats of every run (see :func:`~workbench.runner.run.run_analysis`);
            checked before any run starts.

    Returns:
        What ran, what was skipped, what failed, and the table files.
    """
    from workbench.figures import resolve_formats
    from workbench.runner.table import write_summary, write_table

    if formats not in (None, "auto"):
        formats = ",".join(resolve_formats(formats)[0])
    points = plan(analysis, grid, notebooks=notebooks)
    out = Path(out_dir).resolve()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    _mark(out, analysis, grid)
    nb_dir = as_path(find_notebook(analysis, notebooks).parent)
    tasks = {
        pid: PointTask(pid, analysis, params, str(out / "runs" / pid), nb_dir, timeout, formats)
        for pid, params in points.items()
    }
    ran, skipped, failed = execute(
        tasks,
        backend=backend,
        workers=workers,
        address=address,
        retries=retries,
        poll=poll,
        desc=f"sweep {analysis}",
    )
    tables = write_table(out, points)
    tables += write_summary(out, points, formats)
    return SweepResult(out, tuple(ran), tuple(skipped), failed, tuple(tables))


def execute(
    tasks: Mapping[str, PointTask],
    *,
    backend: str = "local",
    workers: int = 1,
    address: str | None = None,
    retries: int = 1,
    poll: float = 1.0,
    desc: str = "runs",
) -> tuple[list[str], list[str], dict[str, str]]:
    """Runs every task not finished yet: the engine of sweeps and replications.

    A task is finished when its folder holds a complete ``results.json``. Finished points are
    skipped (so a rerun resumes), a failed point is retried ``retries`` times and then reported,
    and a point claimed by another process is waited for.

    Returns:
        ``(ran, skipped, failed)``: point ids run here, point ids already finished, and point id ->
        the last failure for points that failed every attempt.
    """
    from tqdm.auto import tqdm

    todo = collections.deque(p for p, t in tasks.items() if read_results(t.run_dir) is None)
    skipped = [p for p in tasks if p not in todo]
    ran: list[str] = []
    failed: dict[str, str] = {}
    attempts: collections.Counter[str] = collections.Counter()
    waiting: list[tuple[float, str]] = []
    bar = tqdm(total=len(tasks), initial=len(skipped), desc=desc, unit="run")
    runner = make_backend(backend, workers, address) if todo else None
    pending: dict[Any, str] = {}
    try:
        while todo or pending or waiting:
            now = time.monotonic()
            todo.extend(p for t, p in waiting if t <= now)
            waiting = [(t, p) for t, p in waiting if t > now]
            while todo and len(pending) < 2 * runner.workers:
                pid = todo.popleft()
                pending[runner.submit(tasks[pid])] = pid
            if not pending:
                time.sleep(poll / 4)
                continue
            for handle, outcome in runner.wait(pending, timeout=poll):
                pid = pending.pop(handle)
                if outcome.status == "busy":
                    waiting.append((time.monotonic() + poll, pid))
                elif outcome.status in ("ok", "done"):
                    (ran if outcome.status == "ok" else skipped).append(pid)
                    failed.pop(pid, None)
                    bar.update()
                else:
                    attempts[pid] += 1
                    failed[pid] = outcome.message
                    if attempts[pid] <= retries:
                        log.warning("run %s failed (%s); retrying", pid, outcome.message)
                        todo.append(pid)
                    else:
                        log.warning("run %s failed twice: %s", pid, outcome.message)
                        bar.update()
    except BaseException:
        # Interrupted (SIGINT/SIGTERM) or broken: stop the running points now, finishing none;
        # their folders stay unfinished and the rerun runs them again.
        if runner is not None:
            runner, stopping = None, runner
            stopping.abort(pending)
        raise
    finally:
        bar.close()
        if runner is not None:
            runner.close()
    return ran, skipped, failed


def runs_of(out_dir: str | Path, points: Mapping[str, Any]) -> list[tuple[str, dict | None]]:
    """``(point id, results record or None)`` for every point, in order."""
    return [(pid, read_results(Path(out_dir) / "runs" / pid)) for pid in points]
