"""The figure recorder every analysis notebook uses: show a figure, export it, remember the files.

A notebook makes one :class:`FigureRecorder` next to its config and passes every figure through
:meth:`FigureRecorder.show`. The recorder:

* sets the plotly renderer that works offline in JupyterLab, nbconvert HTML and papermill;
* shows the figure (inside a kernel only: a plain script never opens a browser);
* exports it under ``out_dir/figures/``: interactive HTML always (it needs no browser), and PDF,
  SVG and PNG when a Chromium is found. Without one, the static formats are skipped with one
  warning per run naming the fix, so no analysis ever fails because static export is impossible.
  Asking for static formats explicitly (``formats="pdf,png"``, or ``workbench run --formats``,
  which reaches the kernel as ``$WORKBENCH_FORMATS``) makes a missing Chromium an error instead;
* keeps :attr:`~FigureRecorder.written` (what ``results.json`` lists) and writes
  ``figures/figures.json``: each figure's name, title, size and files, which the demo gallery
  reads to show every figure whole at its own size.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from workbench.figures.export import ExportError, export, resolve_formats
from workbench.figures.style import notebook_renderer
from workbench.files import atomic_write_json

FORMATS_ENV = "WORKBENCH_FORMATS"
"""Environment variable through which ``workbench run --formats`` reaches the notebook."""
MANIFEST = "figures.json"
"""The recorder's list of figures, inside the figures folder."""


class StaticExportSkipped(UserWarning):
    """PDF/SVG/PNG were not written (no Chromium); the interactive HTML was."""


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class FigureRecorder:
    """Shows, exports and records a run's figures.

    Args:
        out_dir: The run folder; figures go to ``out_dir/figures/``.
        formats: ``"auto"`` (default: ``$WORKBENCH_FORMATS`` if set, else HTML plus the static
            formats when a Chromium is found) or a comma list of ``pdf``, ``svg``, ``png``,
            ``html``, all of which must then be written.
        display: Show each figure (default: only inside a Jupyter kernel).

    Raises:
        ExportError: An explicit static format where static export is impossible.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        *,
        formats: str | None = None,
        display: bool | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.figures_dir = self.out_dir / "figures"
        requested = formats or os.environ.get(FORMATS_ENV) or "auto"
        self.explicit = requested != "auto"
        self.formats, reason = resolve_formats(requested)
        self.display = _in_kernel() if display is None else display
        self.written: list[Path] = []
        self.entries: list[dict[str, Any]] = []
        self.skipped_reason: str | None = None
        if reason:
            self._skip(reason)
        notebook_renderer()

    def _skip(self, reason: str) -> None:
        self.skipped_reason = reason
        self.formats = ["html"]
        warnings.warn(
            f"figures: writing interactive HTML only; {reason}", StaticExportSkipped, stacklevel=3
        )

    def show(self, fig: Any, name: str) -> None:
        """Shows ``fig`` and exports it as ``figures/<name>.<format>``.

        Args:
            fig: A plotly figure.
            name: File stem, e.g. ``"by_layer"``; must be unique within the run.
        """
        if not name or "/" in name or name.startswith("."):
            raise ExportError(f"bad figure name {name!r}; use a plain file stem like 'by_layer'")
        if self.display:
            fig.show()
        base = self.figures_dir / name
        try:
            files = export(fig, base, self.formats)
        except ExportError as exc:
            if self.explicit or self.formats == ["html"]:
                raise
            self._skip(str(exc))
            files = export(fig, base, self.formats)
        self.written.extend(files)
        self.entries = [e for e in self.entries if e["name"] != name]
        self.entries.append(
            {
                "name": name,
                "title": fig.layout.title.text or name,
                "width": fig.layout.width,
                "height": fig.layout.height,
                "files": [p.name for p in files],
            }
        )
        atomic_write_json(self.figures_dir / MANIFEST, {"figures": self.entries})
