"""Lens figures: the classic layers x positions heatmap and metrics by layer for several lenses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from workbench.errors import LensError

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from workbench.lens.results import LensResult

COLORS = ("prob", "kl", "entropy", "cross_entropy", "target_prob")
"""What a heatmap cell's colour can show."""

_COLOR_TITLES = {
    "prob": "top-1 probability",
    "kl": "KL(final || lens) [nats]",
    "entropy": "entropy [nats]",
    "cross_entropy": "next-token loss [nats]",
    "target_prob": "target probability",
}
_METRIC_TITLES = {
    "kl": "KL(final || lens) [nats]",
    "loss": "next-token cross-entropy [nats]",
    "entropy": "entropy [nats]",
}
_LENS_NAMES = {"logit": "logit lens", "last_block": "last-block lens", "tuned": "tuned lens"}


def _show(token: str) -> str:
    """A token made visible in a cell: spaces as '·', newlines as '⏎'."""
    return token.replace(" ", "·").replace("\n", "⏎").replace("\t", "⇥") or "∅"


def heatmap(result: LensResult, *, text: int = 0, color: str = "prob") -> go.Figure:
    """The classic lens picture for one text: layers x positions, the top token in each cell.

    Args:
        result: A lens result.
        text: Which text.
        color: What the colour shows (see :data:`COLORS`).

    Raises:
        LensError: Unknown colour, no target for ``"target_prob"``, or no such text.
    """
    import plotly.graph_objects as go

    from workbench.figures import ONE_COLUMN, TWO_COLUMN, style

    if color not in COLORS:
        raise LensError(f"unknown color {color!r}; use one of {', '.join(COLORS)}")
    if color == "target_prob" and result.target_prob is None:
        raise LensError("color='target_prob' needs a lens run with target=")
    rows = result.text_rows(text)
    values = {
        "prob": result.top_probs[:, rows, 0],
        "kl": result.kl[:, rows],
        "entropy": result.entropy[:, rows],
        "cross_entropy": result.cross_entropy[:, rows],
        "target_prob": None if result.target_prob is None else result.target_prob[:, rows],
    }[color]
    cells = np.vectorize(_show, otypes=[str])(result.top_tokens[:, rows, 0])
    n_pos = rows.stop - rows.start
    hover = []
    for li in range(len(result.layers)):
        line = []
        for r in range(rows.start, rows.stop):
            tops = ", ".join(
                f"{_show(t)} {p:.2f}"
                for t, p in zip(result.top_tokens[li, r], result.top_probs[li, r], strict=True)
            )
            line.append(
                f"layer {result.layers[li]}, position {result.positions[r]}<br>{tops}<br>"
                f"KL {result.kl[li, r]:.3f}, entropy {result.entropy[li, r]:.3f}"
            )
        hover.append(line)
    x = list(range(n_pos))
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=x,
            y=list(range(len(result.layers))),
            text=cells,
            texttemplate="%{text}",
            textfont={"size": 9},
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            colorscale="Viridis",
            zmin=0.0 if color in ("prob", "target_prob") else None,
            zmax=1.0 if color in ("prob", "target_prob") else None,
            colorbar={"title": {"text": _COLOR_TITLES[color], "side": "right"}},
        )
    )
    fig.update_xaxes(
        tickvals=x, ticktext=[_show(t) for t in result.tokens[rows]], tickangle=-50, showgrid=False
    )
    fig.update_yaxes(
        tickvals=list(range(len(result.layers))),
        ticktext=[f"{result.layers[i]}" for i in range(len(result.layers))],
        title="layer (resid_post)",
    )
    longest = max((len(_show(t)) for t in result.tokens[rows]), default=1)
    width = int(min(TWO_COLUMN, max(ONE_COLUMN, 140 + 48 * n_pos)))
    height = int(max(280, 170 + 34 * len(result.layers) + 6 * min(longest, 14)))
    name = _LENS_NAMES.get(result.lens, result.lens)
    fig = style(fig, title=f"{name}: {result.model}, text {text}", width=width, height=height)
    # room under the axis for the slanted input tokens (which name the x axis)
    fig.update_layout(margin={"b": 30 + 6 * min(longest, 14)})
    return fig


def compare_figure(results: Sequence[LensResult], metric: str = "kl") -> go.Figure:
    """A metric by layer for several lenses (or models) on one axis.

    Args:
        results: Lens results, each drawn as one line.
        metric: ``"kl"`` (to the final distribution), ``"loss"`` (next-token cross-entropy; the
            model's own loss is drawn as a dashed line) or ``"entropy"``.

    Raises:
        LensError: No result, or an unknown metric.
    """
    import plotly.graph_objects as go

    from workbench.figures import style

    results = list(results)
    if not results or not all(callable(getattr(r, "by_layer", None)) for r in results):
        raise LensError("compare_figure needs a non-empty list of LensResult")
    results[0].by_layer(metric)  # an unknown metric: the result's own one-line LensError
    several_models = len({(r.model, r.revision) for r in results}) > 1
    fig = go.Figure()
    for r in results:
        name = _LENS_NAMES.get(r.lens, r.lens)
        if several_models:
            name += f" ({r.model}{'@' + r.revision if r.revision else ''})"
        fig.add_trace(
            go.Scatter(x=r.layers.tolist(), y=r.by_layer(metric), mode="lines+markers", name=name)
        )
    if metric == "loss":
        own = results[0].final_loss()
        if np.isfinite(own):
            fig.add_hline(
                y=own,
                line={"dash": "dash", "color": "#444"},
                annotation_text="model output",
                annotation_position="bottom left",
            )
    fig.update_layout(
        xaxis_title="layer (resid_post)",
        yaxis_title=_METRIC_TITLES[metric],
        legend={"x": 0.98, "y": 0.98, "xanchor": "right", "yanchor": "top"},
    )
    fig.update_xaxes(dtick=1)
    return style(fig, title=f"{_METRIC_TITLES[metric].split(' [')[0]} by layer")
