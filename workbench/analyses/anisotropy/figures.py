"""Plotly builders for the anisotropy study, each taking an :class:`AnisotropyResult`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workbench.analyses.anisotropy.config import CHECKPOINT_METRICS, LAYER_METRICS
from workbench.figures import TWO_COLUMN, style

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from workbench.analyses.anisotropy.results import AnisotropyResult


def _title(metric: str) -> str:
    return metric.replace("_", " ")


def by_layer(result: AnisotropyResult) -> go.Figure:
    """Each metric by layer (one small panel per metric) for the final checkpoint."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    final = result.final
    fig = make_subplots(
        rows=1,
        cols=len(LAYER_METRICS),
        subplot_titles=[_title(m) for m in LAYER_METRICS],
        horizontal_spacing=0.07,
    )
    layers = result.layers
    for col, metric in enumerate(LAYER_METRICS, 1):
        fig.add_trace(
            go.Scatter(
                x=layers,
                y=[getattr(m, metric) for m in final.layers],
                mode="lines+markers",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="layer", row=1, col=col, dtick=1)
    revision = final.revision or "as loaded"
    title = f"{result.model} ({revision}): geometry by layer"
    return style(fig, title=title, width=TWO_COLUMN, height=280)


def layer_step_heatmaps(result: AnisotropyResult) -> go.Figure:
    """Layer x training-step heatmaps, one panel per metric in :data:`CHECKPOINT_METRICS`."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    labels = [c.label for c in result.checkpoints]
    fig = make_subplots(
        rows=1,
        cols=len(CHECKPOINT_METRICS),
        subplot_titles=[_title(m) for m in CHECKPOINT_METRICS],
        horizontal_spacing=0.06,
    )
    for col, metric in enumerate(CHECKPOINT_METRICS, 1):
        z = [
            [getattr(c.layers[i], metric) for c in result.checkpoints]
            for i in range(len(result.layers))
        ]
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=labels,
                y=result.layers,
                showscale=False,
                colorscale="Viridis",
                hovertemplate="step %{x}<br>layer %{y}<br>%{z:.3f}<extra>" + metric + "</extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="step", type="category", row=1, col=col)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    return style(fig, title=f"{result.model}: geometry over training", width=TWO_COLUMN, height=320)


def over_training(result: AnisotropyResult, metric: str = "mean_cosine") -> go.Figure:
    """One metric against training step, one line per layer."""
    import plotly.graph_objects as go

    steps = [c.step if c.step is not None else i for i, c in enumerate(result.checkpoints)]
    fig = go.Figure()
    for i, layer in enumerate(result.layers):
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[getattr(c.layers[i], metric) for c in result.checkpoints],
                mode="lines+markers",
                name=f"layer {layer}",
            )
        )
    fig.update_xaxes(title_text="training step", type="log" if min(steps) > 0 else "linear")
    fig.update_yaxes(title_text=_title(metric))
    return style(fig, title=f"{_title(metric)} over training")


def frequency_distance(result: AnisotropyResult) -> go.Figure:
    """Log corpus frequency vs mean distance to the centroid per token type, last layer."""
    freq = result.final.frequency
    assert freq is not None  # figure_kinds() offers this kind only when it is set
    return freq.figure()


def tangent_test(result: AnisotropyResult) -> go.Figure:
    """Share of gradient energy in the tangent subspace vs random subspaces, over training."""
    import plotly.graph_objects as go

    tangent = result.tangent
    assert tangent is not None  # figure_kinds() offers this kind only when it is set
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=tangent.steps, y=tangent.shares, mode="lines+markers", name="early tangent subspace"
        )
    )
    fig.add_trace(
        go.Scatter(
            x=tangent.steps,
            y=tangent.null_means,
            mode="lines+markers",
            name="random subspaces (mean)",
            line={"dash": "dash"},
        )
    )
    fig.update_xaxes(title_text="training step", type="log")
    fig.update_yaxes(title_text="share of gradient energy", rangemode="tozero")
    title = f"tangent test, {tangent.site}, rank {tangent.rank}"
    return style(fig, title=title)


BUILDERS: dict[str, Callable[[AnisotropyResult], Any]] = {
    "by_layer": by_layer,
    "layer_step_heatmaps": layer_step_heatmaps,
    "mean_cosine_over_training": over_training,
    "frequency_distance": frequency_distance,
    "tangent_test": tangent_test,
}
"""Figure kind to builder (see :data:`~workbench.analyses.anisotropy.results.FIGURES`)."""
