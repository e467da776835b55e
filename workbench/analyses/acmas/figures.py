"""Plotly builders for the AcMAS study, each taking an :class:`AcmasResult`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.figures import TWO_COLUMN, style

if TYPE_CHECKING:
    from workbench.analyses.acmas.results import AcmasResult


def score_distributions(result: AcmasResult) -> Any:
    """Headline prototype scores (deepest layer) of benign vs compromised messages.

    With the last-token alarm (the default) a score is the larger of the two views' distances,
    each over its own cut, so messages above 1 are flagged; without it, the covariance-aware
    distance to the agent's prototype.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=len(result.schedules), subplot_titles=[s.schedule for s in result.schedules]
    )
    for c, s in enumerate(result.schedules, 1):
        scores = s.scores[s.detectors.index("prototype"), -1]
        for label, name, color in ((0, "benign", "#4c72b0"), (1, "compromised", "#c44e52")):
            fig.add_trace(
                go.Histogram(
                    x=scores[s.labels == label],
                    name=name,
                    marker_color=color,
                    opacity=0.6,
                    nbinsx=30,
                    showlegend=c == 1,
                ),
                row=1,
                col=c,
            )
        fig.update_xaxes(title_text="prototype detector score", row=1, col=c)
    fig.update_layout(barmode="overlay")
    return style(fig, title="Detection scores: benign vs compromised", width=TWO_COLUMN, height=300)


def f1_by_layer(result: AcmasResult) -> Any:
    """F1 of each detector by layer and schedule, with the text baseline as a dashed line."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=len(result.schedules), subplot_titles=[s.schedule for s in result.schedules]
    )
    colors = {"prototype": "#c44e52", "linear_probe": "#4c72b0", "mahalanobis": "#55a868"}
    for c, s in enumerate(result.schedules, 1):
        for i, det in enumerate(s.detectors):
            fig.add_trace(
                go.Scatter(
                    x=list(s.layers),
                    y=s.f1[i],
                    mode="lines+markers",
                    name=det,
                    line={"color": colors.get(det)},
                    showlegend=c == 1,
                ),
                row=1,
                col=c,
            )
        fig.add_trace(
            go.Scatter(
                x=list(s.layers),
                y=[s.text_metrics[0]] * len(s.layers),
                mode="lines",
                name="text baseline",
                line={"dash": "dash", "color": "gray"},
                showlegend=c == 1,
            ),
            row=1,
            col=c,
        )
        fig.update_yaxes(range=[0, 1.05], title_text="F1" if c == 1 else None, row=1, col=c)
    return style(fig, title="F1 by layer and schedule", width=TWO_COLUMN, height=300)


def _roc(y: np.ndarray, s: np.ndarray) -> tuple[list[float], list[float]]:
    from sklearn.metrics import roc_curve

    if len(set(y.tolist())) < 2:
        return [0.0, 1.0], [0.0, 1.0]
    fpr, tpr, _ = roc_curve(y, s)
    return fpr.tolist(), tpr.tolist()


def roc(result: AcmasResult) -> Any:
    """ROC curves of every detector at the deepest layer, and the text baseline."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=len(result.schedules), subplot_titles=[s.schedule for s in result.schedules]
    )
    for c, s in enumerate(result.schedules, 1):
        curves = [(d, s.scores[i, -1]) for i, d in enumerate(s.detectors)] + [
            ("text baseline", s.text_scores)
        ]
        for name, scores in curves:
            x, y = _roc(s.labels, scores)
            fig.add_trace(
                go.Scatter(x=x, y=y, mode="lines", name=name, showlegend=c == 1), row=1, col=c
            )
        fig.update_xaxes(title_text="false-positive rate", row=1, col=c)
        fig.update_yaxes(title_text="true-positive rate" if c == 1 else None, row=1, col=c)
    return style(fig, title="ROC at the deepest layer", width=TWO_COLUMN, height=320)


def restoration(result: AcmasResult) -> Any:
    """Task completion and attack success with no defense, isolation and steering."""
    import plotly.graph_objects as go

    r = result.restoration
    fig = go.Figure()
    for name in ("task_completion", "attack_success"):
        fig.add_trace(go.Bar(x=list(r.defenses), y=getattr(r, name), name=name.replace("_", " ")))
    fig.update_layout(barmode="group", yaxis={"range": [0, 1.05]})
    return style(fig, title=f"Restoration: steering ({r.steer_layer}) vs isolation")


BUILDERS: dict[str, Callable[[AcmasResult], Any]] = {
    "score_distributions": score_distributions,
    "f1_by_layer": f1_by_layer,
    "roc": roc,
    "restoration": restoration,
}
"""Figure kind to builder (see :data:`~workbench.analyses.acmas.results.FIGURES`)."""
