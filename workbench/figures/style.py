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
                # automargin: the margins grow to fit long or rotated tick labels, which a fixed
                # margin cut off (the geometric-memory ingredient names)
                xaxis={
                    "showline": True,
                    "linecolor": "#444",
                    "ticks": "outside",
                    "gridcolor": "#eee",
                    "automargin": True,
                },
                yaxis={
                    "showline": True,
                    "linecolor": "#444",
                    "ticks": "outside",
                    "gridcolor": "#eee",
                    "automargin": True,
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
    """Applies the workbench template and a paper size to ``fig``; returns it.

    Also gives every series one colour across the figure's panels (:func:`one_colour_per_series`).
    """
    fig.update_layout(template=template(), width=width, height=height)
    one_colour_per_series(fig)
    if title is not None:
        # a taller top margin keeps the title clear of subplot titles
        fig.update_layout(title={"text": title, "x": 0.02, "font": {"size": 14}}, margin={"t": 80})
    return fig


_COLOURED = ("scatter", "scattergl", "bar", "histogram", "box", "violin")


def series_colour(trace: Any) -> str | None:
    """The one colour a trace is drawn in, if set (line first, then marker), else None."""
    if trace.type not in _COLOURED:
        return None
    line = getattr(trace, "line", None)
    for value in (getattr(line, "color", None), getattr(trace.marker, "color", None)):
        if isinstance(value, str):
            return value
    return None


def one_colour_per_series(fig: Any) -> Any:
    """One colour and one legend entry per series name across all of ``fig``'s panels.

    Plotly colours traces by their index, so a series drawn in two subplots gets two colours
    and the one legend is wrong for the second panel. Here every named trace without a colour
    of its own takes the colour its name already has (set on an earlier trace), or the next
    palette colour not yet used; traces of one name share a legend group and a legend entry.
    Traces coloured per point or of other types (heatmaps) are left alone.
    """
    named = [t for t in fig.data if t.type in _COLOURED and t.name]
    colours: dict[str, str] = {}
    for t in named:
        colour = series_colour(t)
        if colour is not None:
            colours.setdefault(t.name, colour)
    free = [c for c in OKABE_ITO if c not in colours.values()]
    counts: dict[str, int] = {}
    for t in named:
        counts[t.name] = counts.get(t.name, 0) + 1
    seen: set[str] = set()
    for t in named:
        if t.name not in colours:
            colours[t.name] = free.pop(0) if free else OKABE_ITO[len(colours) % len(OKABE_ITO)]
        own = series_colour(t)
        if own is not None and own != colours[t.name]:
            continue  # a builder's deliberate second colour: its own series, left as drawn
        if own is None and not _per_point(t):
            if t.type in ("scatter", "scattergl") and "lines" in (t.mode or "lines"):
                t.line.color = colours[t.name]
            t.marker.color = colours[t.name]
        if counts[t.name] > 1:
            t.legendgroup = t.legendgroup or t.name
            if t.name in seen:
                t.showlegend = False
        if t.showlegend is not False:
            seen.add(t.name)
    return fig


def _per_point(trace: Any) -> bool:
    value = getattr(trace.marker, "color", None)
    return value is not None and not isinstance(value, str)


def notebook_renderer() -> None:
    """Makes figures in notebooks render everywhere offline: JupyterLab, nbconvert HTML, papermill.

    Sets plotly's default renderer to ``plotly_mimetype+notebook``: JupyterLab draws the plotly
    mimetype, and exported HTML (nbconvert) gets plotly.js embedded once per notebook, no CDN.
    Call it once, in a notebook's imports cell.
    """
    import plotly.io as pio

    pio.renderers.default = "plotly_mimetype+notebook"
