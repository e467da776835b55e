"""Paper figures: one plotly template, export to PDF/SVG/PNG/HTML, and the notebooks' recorder.

* :mod:`~workbench.figures.style`: the ``workbench`` template and paper sizes (:func:`style`);
* :mod:`~workbench.figures.export`: :func:`export` with provenance embedded in every file, and
  :func:`read_provenance`;
* :mod:`~workbench.figures.recorder`: :class:`FigureRecorder`, which every analysis notebook uses to
  show, export and list its figures (HTML always; static formats when a Chromium is found).
"""

from workbench.figures.export import (
    FORMATS,
    STATIC_FORMATS,
    ExportError,
    chromium_path,
    export,
    provenance,
    read_provenance,
    resolve_formats,
    static_export_problem,
)
from workbench.figures.recorder import FORMATS_ENV, FigureRecorder, StaticExportSkipped
from workbench.figures.style import (
    HEIGHT,
    OKABE_ITO,
    ONE_COLUMN,
    TWO_COLUMN,
    notebook_renderer,
    style,
    template,
)

__all__ = [
    "FORMATS",
    "FORMATS_ENV",
    "HEIGHT",
    "OKABE_ITO",
    "ONE_COLUMN",
    "STATIC_FORMATS",
    "TWO_COLUMN",
    "ExportError",
    "FigureRecorder",
    "StaticExportSkipped",
    "chromium_path",
    "export",
    "notebook_renderer",
    "provenance",
    "read_provenance",
    "resolve_formats",
    "static_export_problem",
    "style",
    "template",
]
