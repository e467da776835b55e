"""``workbench demo`` (``make demo``): every analysis notebook on its defaults, one gallery.

Each analysis whose notebook exists runs into ``runs/demo/<analysis>/``; its figures are copied to
``figures/<analysis>/`` and ``figures/index.html`` shows every figure whole at its own size (from
the recorder's ``figures.json``) in a wrapping grid: the PNG linking to the interactive page when
static export worked (no JavaScript needed), else the interactive page itself. Beside each analysis
stand its run's parameters and git commit, and links to the executed notebook and
``results.json``. All links are relative, so the two folders can be moved or served together.
"""

from __future__ import annotations

import contextlib
import functools
import html
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from workbench.figures.recorder import MANIFEST
from workbench.figures.style import HEIGHT, ONE_COLUMN
from workbench.files import atomic_write_bytes
from workbench.runner.notebooks import available
from workbench.runner.results import read_results
from workbench.runner.run import RunResult, run_analysis


@dataclass(frozen=True)
class DemoResult:
    """The outcome of a demo.

    Attributes:
        runs: The runs, by analysis.
        index: The gallery page.
        figures: Gathered figure files, by analysis.
    """

    runs: dict[str, RunResult]
    index: Path
    figures: dict[str, list[Path]] = field(default_factory=dict)

    @property
    def failed(self) -> dict[str, str]:
        """Analysis -> failure, for runs that failed."""
        return {a: r.failure.describe() for a, r in self.runs.items() if r.failure is not None}


def gather(run_dir: Path, target: Path) -> list[Path]:
    """Copies the figures listed in ``run_dir/results.json`` (+ plotly.js, figures.json)."""
    record = read_results(run_dir, complete=False)
    if record is None:
        return []
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in record["figures"]:
        source = run_dir / name
        if not source.is_file():
            continue
        shutil.copy2(source, target / source.name)
        copied.append(target / source.name)
        for extra in (source.parent / "plotly.min.js", source.parent / MANIFEST):
            if extra.is_file() and not (target / extra.name).exists():
                shutil.copy2(extra, target / extra.name)
    return copied


def _replace_figures(run_dir: Path, target: Path) -> list[Path]:
    """Gathers a run's figures into a sibling folder, then swaps it for ``target``.

    An interrupted demo leaves each analysis's figure folder whole, old or new, never half copied.
    """
    staging = target.with_name(f".{target.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    copied = gather(run_dir, staging)
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    if staging.exists():
        staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return [target / path.name for path in copied]


def _rel(path: Path, start: Path) -> str:
    return html.escape(Path(os.path.relpath(path, start)).as_posix(), quote=True)


STYLE = """
body{font-family:Helvetica,Arial,sans-serif;margin:1.5em;color:#222;max-width:100%}
h2{margin-top:2em;border-bottom:1px solid #ddd}
.run{font-size:0.85em;color:#444;margin:0.3em 0 1em}
.run code{background:#f4f4f4;padding:0 0.2em}
.grid{display:flex;flex-wrap:wrap;gap:1.2em;align-items:flex-start}
figure{margin:0;max-width:100%;flex:0 0 auto}
figure img{display:block;max-width:100%;height:auto;border:1px solid #ddd}
figure iframe{display:block;border:1px solid #ddd;max-width:100%}
figcaption{font-size:0.85em;margin-top:0.3em}
.failed{color:#b00}
"""
"""Gallery CSS: figures flow in a wrapping row, each at its own size, never wider than the page."""


def _entries(folder: Path, files: list[Path]) -> list[dict]:
    """The gathered figures as recorder entries (name, title, size, files), in recorded order."""
    by_stem: dict[str, dict[str, Path]] = {}
    for path in files:
        by_stem.setdefault(path.stem, {})[path.suffix.lstrip(".")] = path
    recorded = []
    with contextlib.suppress(OSError, ValueError, KeyError):  # no manifest: default sizes
        recorded = json.loads((folder / MANIFEST).read_text())["figures"]
    entries = [dict(e) for e in recorded if e.get("name") in by_stem]
    known = {e["name"] for e in entries}
    entries += [{"name": stem, "title": stem} for stem in by_stem if stem not in known]
    for entry in entries:
        entry["paths"] = by_stem[entry["name"]]
        entry["width"] = int(entry.get("width") or ONE_COLUMN)
        entry["height"] = int(entry.get("height") or HEIGHT)
    return entries


def _figure_html(entry: dict, figures_dir: Path, run_links: str) -> str:
    paths, w, h = entry["paths"], entry["width"], entry["height"]
    name = html.escape(entry["name"])
    title = html.escape(str(entry.get("title") or entry["name"]))
    box_w, box_h = w, h  # the card is as large as the figure (pages from write_html: no margin)
    parts = [f"<figure class='figure' data-figure='{name}' style='width:{box_w}px'>"]
    if "png" in paths:  # a static image, linking to the interactive page: works without JS
        img = (
            f"<img src='{_rel(paths['png'], figures_dir)}' width='{w}' height='{h}' alt='{title}'>"
        )
        if "html" in paths:
            img = f"<a href='{_rel(paths['html'], figures_dir)}'>{img}</a>"
        parts.append(img)
    elif "html" in paths:
        parts.append(
            f"<iframe src='{_rel(paths['html'], figures_dir)}' width='{box_w}' "
            f"height='{box_h}' title='{title}' loading='lazy'></iframe>"
        )
    links = ", ".join(
        f"<a href='{_rel(p, figures_dir)}'>{fmt}</a>" for fmt, p in sorted(paths.items())
    )
    parts.append(f"<figcaption>{title}: {links}; made by {run_links}</figcaption></figure>")
    return "".join(parts)


def _run_summary(result: RunResult) -> str:
    record = read_results(result.out_dir, complete=False) or {}
    params = {k: v for k, v in record.get("params", {}).items() if k != "out_dir"}
    prov = record.get("provenance", {})
    commit = str(prov.get("git_commit") or "unknown")[:12]
    shown = ", ".join(f"<code>{html.escape(f'{k}={v}')}</code>" for k, v in params.items())
    return (
        f"<p class='run'>commit <code>{html.escape(commit)}</code>"
        f"{' (uncommitted changes)' if prov.get('git_dirty') else ''}; "
        f"{result.seconds:.0f} s; parameters: {shown or 'defaults'}</p>"
    )


def index_page(
    figures_dir: Path, runs: dict[str, RunResult], figures: dict[str, list[Path]]
) -> str:
    """The gallery HTML: per analysis, its run's parameters and commit, then each figure whole."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>workbench figures</title><style>{STYLE}</style></head><body>",
        "<h1>workbench figures</h1>",
    ]
    for analysis, result in runs.items():
        parts.append(f"<section id='{html.escape(analysis)}'><h2>{html.escape(analysis)}</h2>")
        run_links = (
            f"<a href='{_rel(result.notebook, figures_dir)}'>executed notebook</a>, "
            f"<a href='{_rel(result.results, figures_dir)}'>results.json</a>"
        )
        if result.failure is not None:
            parts.append(f"<p class='failed'>run failed: {html.escape(result.failure.describe())}")
            parts.append(f" ({run_links})</p></section>")
            continue
        parts.append(_run_summary(result))
        parts.append("<div class='grid'>")
        entries = _entries(figures_dir / analysis, figures.get(analysis, []))
        parts += [_figure_html(e, figures_dir, run_links) for e in entries]
        parts.append("</div></section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


class DemoProgress:
    """What ``workbench demo`` says while it runs, each line written and flushed as it happens.

    Piped into a file or a CI log, stdout is block-buffered: without a flush, every line would
    arrive when the demo ends. So each line is flushed at once; and each notebook's cells, a unit
    of minutes in a long notebook, show as a bar on a terminal and as one line per finished cell
    where no terminal shows a bar.

    Args:
        stream: Where lines go (default ``sys.stdout``).
        bar: Draw cell progress as a bar (default: when ``stream`` is a terminal).
    """

    def __init__(self, stream: TextIO | None = None, bar: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.bar = bool(isatty and isatty()) if bar is None else bar
        self._bar: Any = None
        self._t0 = time.perf_counter()

    def line(self, text: str) -> None:
        """Writes one line now (above the bar, if one is drawn)."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def start(self, name: str, index: int, count: int) -> None:
        """A notebook starts."""
        self._t0 = time.perf_counter()
        self.line(f"[{index}/{count}] {name}: running")

    def cell(self, name: str, done: int, total: int) -> None:
        """A code cell of ``name``'s notebook finished."""
        seconds = time.perf_counter() - self._t0
        if self.bar:
            if self._bar is None:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total, desc=f"{name} cells", file=self.stream, leave=False)
            self._bar.update(done - self._bar.n)
        else:
            self.line(f"  {name}: cell {done}/{total} done ({seconds:.0f} s)")

    def finish(self, name: str, result: RunResult) -> None:
        """A notebook finished (or failed)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self.line(f"{name}: {'ok' if result.ok else 'FAILED'} ({result.seconds:.0f} s)")
        if result.failure is not None:
            self.line(f"  {name}: {result.failure.describe()}")


def run_demo(
    runs_dir: str | Path = "runs/demo",
    figures_dir: str | Path = "figures",
    *,
    notebooks: str | Path | None = None,
    only: list[str] | None = None,
    timeout: float | None = None,
    formats: str | None = None,
    progress: DemoProgress | None = None,
) -> DemoResult:
    """Runs every available analysis on its defaults and writes the figure gallery.

    Args:
        runs_dir: Parent of the run folders.
        figures_dir: Where figures are gathered and ``index.html`` is written.
        notebooks: Where the notebooks are (default as for ``workbench run``).
        only: Run just these analyses.
        timeout: Per-cell timeout in seconds.
        formats: Figure formats (see :func:`~workbench.runner.run.run_analysis`); checked
            before any notebook runs.
        progress: Says what happens as it happens (``None``: silent).

    Returns:
        The runs, the gathered figures and the index path. A failed run does not stop the others.
    """
    from workbench.runner.run import prepare

    names = only or available(notebooks)
    from workbench.figures import resolve_formats

    for name in names:
        prepare(name, notebooks_dir=notebooks)  # bad names fail before anything runs
    if formats not in (None, "auto"):
        formats = ",".join(resolve_formats(formats)[0])
    runs_root, fig_root = Path(runs_dir).resolve(), Path(figures_dir).resolve()
    runs, figures = {}, {}
    for i, name in enumerate(names, 1):
        on_cell = None
        if progress is not None:
            progress.start(name, i, len(names))
            on_cell = functools.partial(progress.cell, name)
        runs[name] = run_analysis(
            name,
            {},
            runs_root / name,
            notebooks_dir=notebooks,
            timeout=timeout,
            formats=formats,
            on_cell=on_cell,
        )
        figures[name] = _replace_figures(runs_root / name, fig_root / name)
        if progress is not None:
            progress.finish(name, runs[name])
    fig_root.mkdir(parents=True, exist_ok=True)
    index = fig_root / "index.html"
    atomic_write_bytes(index, index_page(fig_root, runs, figures).encode())
    return DemoResult(runs, index, figures)
