"""Plotly builders for the concept-oscillation study, each taking a ConceptOscillationResult."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.figures import OKABE_ITO, TWO_COLUMN, style

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from workbench.analyses.concept_oscillation.results import ConceptOscillationResult


def follow_curve(result: ConceptOscillationResult) -> go.Figure:
    """``P(follow a)`` against ``dH``: the cases, binned rates, the fit and the balance point."""
    import plotly.graph_objects as go

    curve = result.follow
    x = curve.dh[curve.used]
    y = curve.follow_a[curve.used].astype(float)
    jitter = np.random.default_rng(0).uniform(-0.03, 0.03, len(y))
    fig = go.Figure()
    if curve.balance_point is not None and curve.balance_ci is not None:
        lo, hi = curve.balance_ci
        fig.add_vrect(x0=lo, x1=hi, fillcolor=OKABE_ITO[1], opacity=0.15, line_width=0)
    fig.add_trace(
        go.Scatter(
            x=x,
            y=y + jitter,
            mode="markers",
            marker={"size": 4, "color": "#888", "opacity": 0.35},
            name="cases (1 = follows A)",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=curve.bin_centers,
            y=curve.bin_rates,
            mode="markers+lines",
            marker={"size": 8, "color": OKABE_ITO[0]},
            line={"dash": "dot"},
            name="binned rate",
            customdata=curve.bin_counts,
            hovertemplate="dH %{x:.2f}<br>P(follow A) %{y:.2f}<br>n=%{customdata}<extra></extra>",
        )
    )
    if curve.slope is not None and len(x):
        grid = np.linspace(float(curve.dh.min()), float(curve.dh.max()), 200)
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=curve.predict(grid),
                mode="lines",
                line={"color": OKABE_ITO[3]},
                name=f"logistic fit (slope {curve.slope:.2f})",
            )
        )
    if curve.balance_point is not None:
        fig.add_vline(x=curve.balance_point, line={"color": OKABE_ITO[1], "dash": "dash"})
        fig.add_annotation(
            x=curve.balance_point,
            y=1.08,
            text=f"balance {curve.balance_point:.2f}",
            showarrow=False,
            font={"size": 11},
        )
    fig.add_hline(y=0.5, line={"color": "#bbb", "width": 1})
    fig.update_xaxes(title_text="relative uncertainty dH = 2(H_a - H_b)/(H_a + H_b)")
    fig.update_yaxes(title_text="P(follow source A)", range=[-0.1, 1.15])
    title = f"{result.model}: which source the model follows"
    return style(fig, title=title, width=TWO_COLUMN // 2 + 120, height=400)


def oscillations(result: ConceptOscillationResult) -> go.Figure:
    """Mean oscillations per case (with standard errors) for ambiguous, clear and control."""
    import plotly.graph_objects as go

    summary = result.oscillations
    groups = list(summary.GROUPS)
    means = [summary.mean(g) for g in groups]
    errors = [summary.sem(g) or 0.0 for g in groups]
    labels = [f"{g}<br>(n={len(getattr(summary, g))})" for g in groups]
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=[m if m is not None else 0.0 for m in means],
            error_y={"type": "data", "array": errors, "visible": True},
            marker_color=[OKABE_ITO[3], OKABE_ITO[0], "#999"],
            text=[f"{m:.2f}" if m is not None else "n/a" for m in means],
            textposition="outside",
        )
    )
    fig.update_yaxes(title_text="switches of top-1 between Y_a and Y_b")
    title = f"{result.model}: layer-wise oscillations ({result.lens} lens)"
    return style(fig, title=title, height=380)


def logit_diff_heatmap(result: ConceptOscillationResult) -> go.Figure:
    """Lens ``logit(Y_a) - logit(Y_b)`` over layers (rows) and ``dH`` bins (columns)."""
    import plotly.graph_objects as go

    heat = result.heatmap
    bound = float(np.nanmax(np.abs(heat.mean_diff))) if heat.mean_diff.size else 1.0
    fig = go.Figure(
        go.Heatmap(
            z=heat.mean_diff,
            x=[f"{c:.2f}" for c in heat.dh_centers],
            y=heat.layers,
            zmid=0,
            zmin=-bound,
            zmax=bound,
            colorscale="RdBu",
            colorbar={"title": {"text": "logit A - B"}},
            customdata=np.broadcast_to(heat.counts, heat.mean_diff.shape),
            hovertemplate="dH %{x}<br>layer %{y}<br>%{z:.2f}<br>n=%{customdata}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="dH (equal-count bins; mean)", type="category")
    fig.update_yaxes(title_text="layer", dtick=1)
    title = f"{result.model}: lens logit(Y_a) - logit(Y_b) by layer and dH"
    return style(fig, title=title, width=TWO_COLUMN // 2 + 160, height=400)


def probe_accuracy(result: ConceptOscillationResult) -> go.Figure:
    """Held-out accuracy of the per-layer "which source wins" probe, with its control."""
    import plotly.graph_objects as go

    probe = result.probe
    assert probe is not None  # figure_kinds() offers this kind only when it is set
    layers = probe.layers.tolist()
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=layers + layers[::-1],
            y=probe.accuracy_hi.tolist() + probe.accuracy_lo.tolist()[::-1],
            fill="toself",
            fillcolor="rgba(0,114,178,0.15)",
            line={"width": 0},
            hoverinfo="skip",
            showlegend=False,
        )
    )
    fig.add_trace(go.Scatter(x=layers, y=probe.accuracy, mode="lines+markers", name="probe"))
    fig.add_trace(
        go.Scatter(
            x=layers,
            y=probe.control,
            mode="lines",
            line={"dash": "dot", "color": "#999"},
            name="shuffled labels",
        )
    )
    fig.add_hline(y=probe.chance, line={"color": "#bbb", "dash": "dash"})
    fig.update_xaxes(title_text="layer (lens logit(Y_a) - logit(Y_b), last position)", dtick=1)
    fig.update_yaxes(title_text="accuracy: will the model follow A?", range=[0.3, 1.02])
    title = f"{result.model}: which source wins, decoded per layer (n={probe.n_cases})"
    return style(fig, title=title, height=380)


BUILDERS: dict[str, Callable[[Any], Any]] = {
    "follow_curve": follow_curve,
    "oscillations": oscillations,
    "logit_diff_heatmap": logit_diff_heatmap,
    "probe_accuracy": probe_accuracy,
}
"""Figure kind to builder."""
