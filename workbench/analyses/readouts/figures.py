"""Plotly builders for the readouts study, each taking a :class:`ReadoutsResult`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workbench.figures import style

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from workbench.analyses.readouts.results import ReadoutsResult

LENS_NAMES = {"logit": "logit lens", "last_block": "last-block lens", "tuned": "tuned lens"}


def lens_heatmap(result: ReadoutsResult) -> go.Figure:
    """The logit lens on one held-out text: top token per layer and position, coloured by p."""
    fig = result.heatmap.figure("heatmap", text=0, color="prob")
    fig.update_layout(title={"text": f"{result.model}: logit lens on a held-out text"})
    return fig


def _by_layer(result: ReadoutsResult, metric: str) -> go.Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    for curve in result.curves:
        fig.add_trace(
            go.Scatter(
                x=list(curve.layers),
                y=list(getattr(curve, metric)),
                mode="lines+markers",
                name=LENS_NAMES.get(curve.lens, curve.lens),
            )
        )
    if metric == "loss":
        layers = list(result.curves[0].layers)
        fig.add_trace(
            go.Scatter(
                x=[layers[0], layers[-1]],
                y=[result.model_loss] * 2,
                mode="lines",
                name="model's own loss",
                line={"dash": "dash", "color": "#555"},
            )
        )
    label = {"kl": "KL(final ‖ lens), nats", "loss": "next-token loss, nats"}[metric]
    n_layers = len(result.curves[0].layers)
    fig.update_xaxes(title_text="layer", dtick=1 if n_layers <= 12 else 5)
    fig.update_yaxes(title_text=label, rangemode="tozero")
    title = "KL to the final distribution by layer" if metric == "kl" else "loss by layer"
    return style(fig, title=f"{result.model}: {title} (held-out text)")


def lens_kl(result: ReadoutsResult) -> go.Figure:
    """KL(final || lens) by layer, one line per lens."""
    return _by_layer(result, "kl")


def lens_loss(result: ReadoutsResult) -> go.Figure:
    """Next-token loss by layer, one line per lens, and the model's own loss."""
    return _by_layer(result, "loss")


def probe(result: ReadoutsResult) -> go.Figure:
    """Probe accuracy, control accuracy and selectivity by layer, with intervals over seeds."""
    fig = result.probe.figure()
    fig.update_layout(title={"text": f"{result.model}: probe '{result.probe_task}' by layer"})
    return fig


def steering(result: ReadoutsResult) -> go.Figure:
    """Shift of the word-start probability mass against the steering scale."""
    import numpy as np
    import plotly.graph_objects as go

    s = result.steering
    rand = np.array(s.random) if s.random else np.zeros((0, len(s.scales)))
    fig = go.Figure()
    if len(rand):
        fig.add_trace(
            go.Scatter(
                x=list(s.scales) + list(s.scales)[::-1],
                y=list(rand.max(0)) + list(rand.min(0))[::-1],
                fill="toself",
                line={"width": 0},
                fillcolor="rgba(120,120,120,0.2)",
                name=f"random vectors, same norm (range of {len(rand)})",
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=list(s.scales),
                y=list(rand.mean(0)),
                mode="lines+markers",
                name="random vectors (mean)",
                line={"dash": "dash", "color": "#555"},
            )
        )
    fig.add_trace(
        go.Scatter(
            x=list(s.scales), y=list(s.effect), mode="lines+markers", name="difference of means"
        )
    )
    fig.update_xaxes(title_text=f"scale (vector norm {s.norm:.2f})")
    fig.update_yaxes(title_text="Δ P(next token starts a word)")
    if s.generated:
        fig.add_annotation(
            text=(
                f"generation ({s.generated} greedy tokens, scale {s.scales[-1]:g}): word starts "
                f"{s.gen_base:.3f}, Δ {s.gen_effect:+.3f}<br>random vectors: "
                f"Δ ≤ {s.gen_random_max:+.3f}"
            ),
            align="left",
            xref="paper",
            yref="paper",
            x=0,
            y=1.0,
            yanchor="bottom",
            showarrow=False,
            font={"size": 11},
        )
    return style(fig, title=f"steering at resid_post.{s.layer} (base mass {s.base_mass:.3f})")


BUILDERS: dict[str, Callable[[ReadoutsResult], Any]] = {
    "lens_heatmap": lens_heatmap,
    "lens_kl": lens_kl,
    "lens_loss": lens_loss,
    "probe": probe,
    "steering": steering,
}
"""Figure kind to builder (see :data:`~workbench.analyses.readouts.results.FIGURES`)."""
