"""The workbench's plotly template and paper sizes.

The template (``"workbench"``) fixes fonts, margins and a colour-blind-safe palette (Okabe & Ito,
2008). Sizes follow two-column paper layouts: :data:`ONE_COLUMN` and :data:`TWO_COLUMN` widths in
pixels at the export scale. Every figure builder in the package ends with :func:`style`.
"""

from __future__ import annotations

from typing import Any

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
"""Colour-blind-safe qualitative palette."""
ONE_COLUMN = 480
TWO_COLUMN = 980
HEIGHT = 360
TEMPLATE = "workbench"


def template() -> Any:
    """Registers (once) and returns the ``workbench`` plotly template."""
    import plotly.graph_objects as go
    import plotly.io as pio

    if TEMPLATE not in pio.templates:
        pio.templates[TEMPLATE] = go.layout.Template(
            layout=go.Layout(
                font={"family": "Helvetica, Arial, sans-serif", "size": 12, "color": "#222"},
                colorway=list(OKABE_ITO),
                paper_bgcolor="white",
                plot_bgcolor="white",
                margin={"l": 60, "r": 20, "t": 40, "b": 50},
                xaxis={
                    "showline": True,
                    "linecolor": "#444",
                    "ticks": "outside",
                    "gridcolor": "#eee",
                },
                yaxis={
                    "showline": True,
                    "linecolor": "#444",
                    "ticks": "outside",
                    "gridcolor": "#eee",
                },
                legend={"bgcolor": "rgba(255,255,255,0.8)"},
                colorscale={"sequential": "Viridis", "diverging": "RdBu"},
                width=ONE_COLUMN,
                height=HEIGHT,
            )
        )
    return pio.templates[TEMPLATE]


def style(
    fig: Any, *, title: str | None = None, width: int = ONE_COLUMN, height: int = HEIGHT
) -> Any:
    """Applies the workbench template and a paper size to ``fig``; returns it."""
    fig.update_layout(template=template(), width=width, height=height)
    if title is not None:
        # a taller top margin keeps the title clear of subplot titles
        fig.update_layout(title={"text": title, "x": 0.02, "font": {"size": 14}}, margin={"t": 80})
    return fig


def notebook_renderer() -> None:
    """Makes figures in notebooks render everywhere offline: JupyterLab, nbconvert HTML, papermill.

    Sets plotly's default renderer to ``plotly_mimetype+notebook``: JupyterLab draws the plotly
    mimetype, and exported HTML (nbconvert) gets plotly.js embedded once per notebook, no CDN.
    Call it once, in a notebook's imports cell.
    """
    import plotly.io as pio

    pio.renderers.default = "plotly_mimetype+notebook"
