"""Plotly builders for the depth-ensemble study, each taking a :class:`DepthEnsembleResult`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.figures import OKABE_ITO, TWO_COLUMN, style

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from workbench.analyses.depth_ensemble.results import DepthEnsembleResult
    from workbench.analyses.depth_ensemble.scaling import ScalingFit

TEACHER_COLOURS = {"independent": OKABE_ITO[0], "tied": OKABE_ITO[3]}


def _finite(values: Any) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=np.float64)]


def angles_norms(result: DepthEnsembleResult) -> go.Figure:
    """Angles by layer (step, increment, to the final state) and update/state norms by layer."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    model = result.model
    assert model is not None  # figure_kinds() offers this kind only with a model
    g = model.geometry
    layers = list(range(g.n_layers))
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=["angles (degrees)", "norms"],
        horizontal_spacing=0.12,
    )
    traces = [
        ("step angle(h_l, h_l+1)", layers, g.step_angle, OKABE_ITO[0]),
        ("increment angle(dh_l, dh_l+1)", layers[:-1], g.increment_angle, OKABE_ITO[3]),
        ("angle(h_l, h_L)", list(range(g.n_layers + 1)), g.angle_to_final, OKABE_ITO[2]),
    ]
    for name, x, y, colour in traces:
        fig.add_trace(
            go.Scatter(x=x, y=_finite(y), mode="lines+markers", name=name, line={"color": colour}),
            row=1,
            col=1,
        )
    fig.add_hline(y=90, line_dash="dot", line_color="#999", row=1, col=1)
    fig.add_trace(
        go.Scatter(
            x=layers,
            y=_finite(g.update_norm),
            mode="lines+markers",
            name="|dh_l|",
            line={"color": OKABE_ITO[1]},
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Scatter(
            x=list(range(g.n_layers + 1)),
            y=_finite(g.state_norm),
            mode="lines+markers",
            name="|h_l|",
            line={"color": OKABE_ITO[4]},
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="layer l", dtick=1 if g.n_layers <= 16 else None)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    title = f"{model.model}: residual stream by layer ({g.n_tokens} tokens)"
    return style(fig, title=title, width=TWO_COLUMN, height=340)


def lens_loss(result: DepthEnsembleResult) -> go.Figure:
    """Next-token loss by layer through the logit lens and the tuned lens."""
    import plotly.graph_objects as go

    model = result.model
    assert model is not None and model.lens is not None
    lens = model.lens
    layers = list(range(len(lens.logit)))
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=layers, y=_finite(lens.logit), mode="lines+markers", name="logit lens")
    )
    if lens.tuned is not None:
        fig.add_trace(
            go.Scatter(x=layers, y=_finite(lens.tuned), mode="lines+markers", name="tuned lens")
        )
    fig.add_hline(
        y=lens.final_loss, line_dash="dash", annotation_text="model", annotation_position="top left"
    )
    fig.update_xaxes(
        title_text="layer l (output of block l)", dtick=1 if len(layers) <= 16 else None
    )
    fig.update_yaxes(title_text="next-token loss (nats)")
    title = f"lens loss by layer; {100 * lens.early_exit_fraction:.0f}% of tokens settled early"
    return style(fig, title=title)


def layer_skip(result: DepthEnsembleResult) -> go.Figure:
    """Loss change per removed layer, per removed block, and for reordered middle layers."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    model = result.model
    assert model is not None and model.skip is not None
    skip = model.skip
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=["one layer removed", "blocks removed; middle layers reordered"],
        horizontal_spacing=0.12,
    )
    fig.add_trace(
        go.Bar(
            x=list(range(skip.n_layers)),
            y=_finite(skip.single),
            name="layer removed",
            marker_color=OKABE_ITO[0],
        ),
        row=1,
        col=1,
    )
    labels, values, colours = [], [], []
    for size, start, delta in zip(
        skip.block_sizes, skip.block_starts, skip.block_deltas, strict=True
    ):
        labels.append(f"drop {start}-{start + size - 1}")
        values.append(delta)
        colours.append(OKABE_ITO[1])
    if np.isfinite(skip.reverse):
        labels.append(f"reverse {skip.middle[0]}-{skip.middle[1]}")
        values.append(skip.reverse)
        colours.append(OKABE_ITO[2])
    for i, delta in enumerate(skip.shuffle_deltas):
        labels.append(f"shuffle {i + 1}")
        values.append(delta)
        colours.append(OKABE_ITO[4])
    fig.add_trace(
        go.Bar(x=labels, y=_finite(values), marker_color=colours, name="blocks and orders"),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="layer", dtick=1, row=1, col=1)
    fig.update_yaxes(title_text="loss change (nats)", row=1, col=1)
    fig.update_layout(showlegend=False)
    title = f"{model.model}: layer skipping (baseline loss {skip.baseline:.3f})"
    return style(fig, title=title, width=TWO_COLUMN, height=360)


def toy_depth(result: DepthEnsembleResult) -> go.Figure:
    """Students' held-out loss against depth on log-log axes, with ``L0 + c / l^a`` fitted."""
    import plotly.graph_objects as go

    toys = result.toys
    fig = go.Figure()
    for fit in toys.fits:
        colour = TEACHER_COLOURS.get(fit.teacher, OKABE_ITO[5])
        grid = np.geomspace(fit.depths[0], fit.depths[-1], 50)
        fig.add_trace(
            go.Scatter(
                x=fit.depths.tolist(),
                y=_finite(fit.losses),
                mode="markers",
                marker={"color": colour, "size": 8},
                name=f"{fit.teacher} teacher",
            ),
        )
        label = f"a = {fit.a:.2f} ± {fit.a_se:.2f} (fit), ± {fit.a_bootstrap_se:.2f} (bootstrap)"
        fig.add_trace(
            go.Scatter(
                x=grid.tolist(),
                y=_finite(fit.curve(grid)),
                mode="lines",
                line={"color": colour, "dash": "dash"},
                name=label,
            ),
        )
    fig.update_xaxes(title_text="student depth l", type="log")
    fig.update_yaxes(title_text="held-out KL to the teacher", type="log")
    preset = toys.preset
    title = (
        f"toys: loss vs depth (T = {preset['temperature']:g}, {preset['steps']} steps, "
        f"preset {preset['name']})"
    )
    return style(fig, title=title)


def toy_geometry(result: DepthEnsembleResult) -> go.Figure:
    """Increment angles by layer: each teacher and its deepest student."""
    import plotly.graph_objects as go

    toys = result.toys
    fig = go.Figure()
    for teacher in toys.teachers:
        colour = TEACHER_COLOURS.get(teacher.kind, OKABE_ITO[5])
        inc = teacher.geometry.increment_angle
        fig.add_trace(
            go.Scatter(
                x=(np.arange(len(inc)) / max(len(inc), 1)).tolist(),
                y=_finite(inc),
                mode="lines",
                line={"color": colour},
                name=f"{teacher.kind} teacher",
            ),
        )
        students = toys.students_of(teacher.kind)
        if students:
            deepest = students[-1]
            inc = deepest.geometry.increment_angle
            fig.add_trace(
                go.Scatter(
                    x=(np.arange(len(inc)) / max(len(inc), 1)).tolist(),
                    y=_finite(inc),
                    mode="lines+markers",
                    line={"color": colour, "dash": "dot"},
                    name=f"{teacher.kind} teacher's depth-{deepest.depth} student",
                ),
            )
    fig.add_hline(y=90, line_dash="dot", line_color="#999")
    fig.update_xaxes(title_text="relative depth l / L", range=[0, 1])
    fig.update_yaxes(title_text="increment angle (degrees)", range=[0, 120])
    return style(fig, title="toys: angle between successive updates")


def scaling_fit(fit: ScalingFit | DepthEnsembleResult) -> go.Figure:
    """The depth part of the loss against depth (log-log, fitted line) and the log residuals."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not hasattr(fit, "values"):
        fit = fit.scaling  # type: ignore[union-attr]
    assert fit is not None
    depth_part = fit.loss - fit.term("m") - fit.term("D") - fit.value("L0")
    shown = depth_part > 0
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=["depth part of the loss", "residuals of log L"],
        horizontal_spacing=0.12,
    )
    fig.add_trace(
        go.Scatter(
            x=fit.depth[shown].tolist(),
            y=depth_part[shown].tolist(),
            mode="markers",
            marker={"color": "#000", "opacity": 0.4, "size": 5},
            name="runs",
        ),
        row=1,
        col=1,
    )
    grid = np.geomspace(fit.depth.min(), fit.depth.max(), 50)
    a, se = fit.value("a_l"), fit.error("a_l")
    fig.add_trace(
        go.Scatter(
            x=grid.tolist(),
            y=(fit.value("c_l") * grid**-a).tolist(),
            mode="lines",
            line={"color": OKABE_ITO[3], "dash": "dash"},
            name=f"c_l / l^a_l, a_l = {a:.2f} ± {se:.2f}",
        ),
        row=1,
        col=1,
    )
    fitted = fit.loss / np.exp(fit.residuals)
    fig.add_trace(
        go.Scatter(
            x=fitted.tolist(),
            y=fit.residuals.tolist(),
            mode="markers",
            marker={"color": OKABE_ITO[0], "opacity": 0.5, "size": 5},
            showlegend=False,
        ),
        row=1,
        col=2,
    )
    fig.add_hline(y=0, line_dash="dot", line_color="#999", row=1, col=2)
    fig.update_xaxes(
        title_text=f"depth l = n_layers - {fit.depth_offset}", type="log", row=1, col=1
    )
    fig.update_yaxes(title_text="L - c_m/m^a_m - c_D/D^a_D - L0", type="log", row=1, col=1)
    fig.update_xaxes(title_text="fitted loss", row=1, col=2)
    fig.update_yaxes(title_text="log L - log fit", row=1, col=2)
    title = (
        f"scaling law on {fit.n_runs} runs of {fit.source} ({len(fit.loss) - shown.sum()} "
        "runs with a non-positive depth part not shown)"
    )
    return style(fig, title=title, width=TWO_COLUMN, height=360)


BUILDERS: dict[str, Callable[[DepthEnsembleResult], Any]] = {
    "angles_norms": angles_norms,
    "lens_loss": lens_loss,
    "layer_skip": layer_skip,
    "toy_depth": toy_depth,
    "toy_geometry": toy_geometry,
    "scaling_fit": scaling_fit,
}
"""Figure kind to builder (see :data:`~workbench.analyses.depth_ensemble.results.FIGURES`)."""
