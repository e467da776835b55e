"""The tidy results table of a sweep (one row per run) and its summary figure.

Columns: ``run`` (the point id), ``status`` (``ok``/``failed``), ``error``, then ``params.<name>``,
``metrics.<name>`` and ``provenance.<name>``. Nested mappings are flattened with dots
(``metrics.summary.max``, ``provenance.versions.torch``); lists are kept as JSON strings. A column
whose values mix types (beyond int and float) is written as strings.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.files import atomic_write_bytes
from workbench.runner.results import read_results

log = logging.getLogger(__name__)
SKIP_PARAMS = ("out_dir",)


def flatten(prefix: str, value: Any, into: dict[str, Any]) -> dict[str, Any]:
    """Flattens ``value`` under ``prefix``: mappings by dotted keys, lists as JSON strings."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            flatten(f"{prefix}.{key}", inner, into)
    elif isinstance(value, list | tuple):
        into[prefix] = json.dumps(value)
    else:
        into[prefix] = value
    return into


def _failure(run_dir: Path) -> str:
    from workbench.runner.run import FAILURE

    try:
        record = json.loads((run_dir / FAILURE).read_text())
    except (OSError, ValueError):
        return "not finished"
    where = f"cell {record.get('cell')}: " if record.get("cell") is not None else ""
    return f"{record.get('kind')}: {where}{record.get('message')}"


def rows(out_dir: str | Path, points: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per point, in grid order."""
    out = []
    for pid, params in points.items():
        run_dir = Path(out_dir) / "runs" / pid
        record = read_results(run_dir)
        row: dict[str, Any] = {"run": pid, "status": "ok" if record else "failed", "error": None}
        shown = {
            k: v for k, v in (record or {}).get("params", params).items() if k not in SKIP_PARAMS
        }
        flatten("params", shown, row)
        if record is None:
            row["error"] = _failure(run_dir)
        else:
            flatten("metrics", record["metrics"], row)
            flatten("provenance", record["provenance"], row)
            row["figures"] = json.dumps(record["figures"])
        out.append(row)
    return out


def columns(table: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Column name -> values (``None`` where a row lacks it), mixed types made strings."""
    names: dict[str, None] = {}
    for row in table:
        names.update(dict.fromkeys(row))
    cols = {}
    for name in names:
        values = [row.get(name) for row in table]
        kinds = {type(v) for v in values if v is not None}
        if kinds == {int, float}:
            values = [float(v) if v is not None else None for v in values]
        elif len(kinds) > 1:
            values = [
                v if v is None else (v if isinstance(v, str) else json.dumps(v)) for v in values
            ]
        cols[name] = values
    return cols


def write_table(out_dir: str | Path, points: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """Writes ``results.parquet`` and ``results.csv`` in ``out_dir``; returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    cols = columns(rows(out, points))
    table = pa.table({name: pa.array(values) for name, values in cols.items()})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(out / "results.parquet", sink.getvalue().to_pybytes())
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(cols)
    for i in range(table.num_rows):
        writer.writerow(["" if cols[c][i] is None else cols[c][i] for c in cols])
    atomic_write_bytes(out / "results.csv", text.getvalue().encode())
    return [out / "results.parquet", out / "results.csv"]


def summary_figure(table: list[dict[str, Any]], max_metrics: int = 6) -> Any:
    """Each scalar metric (up to ``max_metrics``) against the runs, one panel each."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from workbench.figures import TWO_COLUMN, style

    ok = [r for r in table if r["status"] == "ok"]
    metrics = [
        k
        for k in dict.fromkeys(k for r in ok for k in r)
        if k.startswith("metrics.") and all(isinstance(r.get(k), int | float) for r in ok)
    ][:max_metrics] or ["(no scalar metrics)"]
    varying = [
        k
        for k in dict.fromkeys(k for r in table for k in r)
        if k.startswith("params.") and len({json.dumps(r.get(k)) for r in table}) > 1
    ]
    labels = [", ".join(f"{k[7:]}={r.get(k)}" for k in varying) or r["run"] for r in ok]
    ncols = min(3, len(metrics))
    nrows = -(-len(metrics) // ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=[m[8:] for m in metrics])
    for i, metric in enumerate(metrics):
        ys = [r.get(metric) for r in ok]
        fig.add_trace(
            go.Scatter(x=labels, y=ys, mode="markers", name=metric[8:], showlegend=False),
            row=i // ncols + 1,
            col=i % ncols + 1,
        )
    failed = len(table) - len(ok)
    title = f"{len(ok)} runs" + (f", {failed} failed" if failed else "")
    return style(fig, title=title, width=TWO_COLUMN, height=300 * nrows)


def write_summary(
    out_dir: str | Path, points: Mapping[str, Mapping[str, Any]], formats: str | None = None
) -> list[Path]:
    """Writes ``summary.html`` and, when the sweep's formats allow it, ``summary.png``.

    Args:
        out_dir: The sweep folder.
        points: Every point of the grid by id.
        formats: The sweep's figure formats: ``None``/``"auto"`` adds the PNG when Chromium is
            available (a warning otherwise); an explicit list adds it only if it names ``png``.
    """
    from workbench.figures import ExportError, export

    fig = summary_figure(rows(out_dir, points))
    written = export(fig, Path(out_dir) / "summary", formats=("html",))
    if formats not in (None, "auto") and "png" not in formats.split(","):
        return written
    try:
        written += export(fig, Path(out_dir) / "summary", formats=("png",))
    except ExportError as exc:
        log.warning("summary.png not written: %s", exc)
    return written
