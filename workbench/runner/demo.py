"""``workbench demo`` (``make demo``): every analysis notebook on its defaults, one gallery.

Each analysis whose notebook exists runs into ``runs/demo/<analysis>/``; its figures are copied to
``figures/<analysis>/`` and ``figures/index.html`` shows each one (interactive where there is an
HTML version) with links to its PDF/SVG/PNG and to the run that made it (executed notebook and
``results.json``). All links are relative, so the two folders can be moved or served together.
"""

from __future__ import annotations

import html
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

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
    """Copies the figures listed in ``run_dir/results.json`` (+ plotly.js) to ``target``."""
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
        script = source.parent / "plotly.min.js"
        if source.suffix == ".html" and script.is_file() and not (target / script.name).exists():
            shutil.copy2(script, target / script.name)
    return copied


def _rel(path: Path, start: Path) -> str:
    return html.escape(Path(os.path.relpath(path, start)).as_posix(), quote=True)


def index_page(
    figures_dir: Path, runs: dict[str, RunResult], figures: dict[str, list[Path]]
) -> str:
    """The gallery HTML: per analysis, each figure with its formats and the run that made it."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>workbench figures</title>",
        "<style>body{font-family:Helvetica,Arial,sans-serif;margin:2em;color:#222}"
        "figure{display:inline-block;margin:1em;vertical-align:top}"
        "iframe{border:1px solid #ddd}img{max-width:480px;border:1px solid #ddd}</style>",
        "</head><body><h1>workbench figures</h1>",
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
        stems: dict[str, dict[str, Path]] = {}
        for path in figures.get(analysis, []):
            stems.setdefault(path.stem, {})[path.suffix.lstrip(".")] = path
        for stem, files in stems.items():
            parts.append(f"<figure class='figure' data-figure='{html.escape(stem)}'>")
            if "html" in files:
                parts.append(
                    f"<iframe src='{_rel(files['html'], figures_dir)}' width='520' height='400' "
                    f"title='{html.escape(stem)}'></iframe>"
                )
            elif "png" in files:
                parts.append(
                    f"<img src='{_rel(files['png'], figures_dir)}' alt='{html.escape(stem)}'>"
                )
            links = ", ".join(
                f"<a href='{_rel(p, figures_dir)}'>{fmt}</a>" for fmt, p in sorted(files.items())
            )
            parts.append(f"<figcaption>{html.escape(stem)}: {links}; made by {run_links}")
            parts.append("</figcaption></figure>")
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def run_demo(
    runs_dir: str | Path = "runs/demo",
    figures_dir: str | Path = "figures",
    *,
    notebooks: str | Path | None = None,
    only: list[str] | None = None,
    timeout: float | None = None,
    formats: str | None = None,
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
    for name in names:
        runs[name] = run_analysis(
            name, {}, runs_root / name, notebooks_dir=notebooks, timeout=timeout, formats=formats
        )
        target = fig_root / name
        if target.exists():
            shutil.rmtree(target)
        figures[name] = gather(runs_root / name, target)
    fig_root.mkdir(parents=True, exist_ok=True)
    index = fig_root / "index.html"
    atomic_write_bytes(index, index_page(fig_root, runs, figures).encode())
    return DemoResult(runs, index, figures)
