"""The explorers' common base: an anywidget with a static HTML twin in the same output.

An explorer is an :class:`anywidget.AnyWidget` whose front end is one ES module shipped beside
this file (``static/*.js``: no JupyterLab extension to build, no network). Its output bundle holds
the widget view *and* ``text/html``: a static twin built in Python from the same data, which any
viewer without a widget front end shows instead (exported HTML, GitHub, papermill output, a
closed kernel). The twin needs no script: hover texts are ``title`` attributes.
"""

from __future__ import annotations

from pathlib import Path

from workbench.errors import WorkbenchError

STATIC = Path(__file__).resolve().parent / "static"
"""Folder of the explorers' ES modules."""


class ExplorerError(WorkbenchError):
    """An explorer was given data it cannot show."""


def require_anywidget() -> None:
    """Raises a one-line error naming the fix when anywidget is not installed."""
    try:
        import anywidget  # noqa: F401
    except ImportError as exc:
        raise ExplorerError(
            "the explorers need anywidget: pip install -e '.[notebooks]' (or pip install anywidget)"
        ) from exc


def esm(name: str) -> str:
    """The source of ``static/<name>.js``."""
    return (STATIC / f"{name}.js").read_text()


def base_class() -> type:
    """:class:`Explorer`, imported on first use (importing the package needs no anywidget)."""
    require_anywidget()
    from workbench.explore._widget import Explorer

    return Explorer
