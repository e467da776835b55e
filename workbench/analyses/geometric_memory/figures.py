"""Plotly builders for the geometric-memory study, each taking a :class:`GeometricMemoryResult`.

The builders compute nothing themselves: the pairwise views they show (2-D PCA scores, cosine
matrices, hop distances) come from :mod:`workbench.geometry.pairwise`, and the ``draw_*``
functions take those computed values only. This module imports the results' types for type
checking alone (the results import it to draw).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.figures import OKABE_ITO, TWO_COLUMN, style
from workbench.geometry.pairwise import cosine_matrix, pca2, shortest_paths

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from workbench.analyses.geometric_memory.results import GeometricMemoryResult

TITLES = {
    "transformer": "transformer",
    "control": "control (frozen embeddings)",
    "node2vec": "tied Node2Vec",
    "node2vec_walks": "random-walk Node2Vec",
    "eigenmap": "Laplacian eigenmap",
}
MODELS = ("transformer", "control", "node2vec", "node2vec_walks")


def _title(name: str) -> str:
    return TITLES.get(name, name)


def _colors(result: GeometricMemoryResult) -> tuple[list[Any], str]:
    """Marker colours: by arm/subtree when the graph has a centre, else by hop depth."""
    graph = result.graph
    if graph.root is not None:
        colors = ["#000000" if g < 0 else OKABE_ITO[g % (len(OKABE_ITO) - 1)] for g in graph.groups]
        return colors, "arm"
    return list(graph.depth), "hops from node 0"


def _edge_lines(xy: np.ndarray, edges) -> tuple[list[float | None], list[float | None]]:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for u, v in edges:
        xs += [float(xy[u, 0]), float(xy[v, 0]), None]
        ys += [float(xy[u, 1]), float(xy[v, 1]), None]
    return xs, ys


def projections(result: GeometricMemoryResult) -> go.Figure:
    """2-D node projections side by side: UMAP (when computed) and PCA, edges drawn.

    The Laplacian-eigenmap column shows the graph's own top two non-trivial eigenvectors in its
    PCA row: the picture a geometric memory should resemble.
    """
    geos = result.geometries()
    names = [n for n in (*MODELS, "eigenmap") if n in geos]
    panels: dict[str, dict[str, np.ndarray | None]] = {}
    if any(geos[n].umap is not None for n in names):
        panels["UMAP"] = {n: geos[n].umap for n in names}
    panels["PCA"] = {
        n: geos[n].embeddings[:, :2] if n == "eigenmap" else pca2(geos[n].embeddings) for n in names
    }
    return draw_projections(result, panels)


def draw_projections(
    result: GeometricMemoryResult, panels: dict[str, dict[str, np.ndarray | None]]
) -> go.Figure:
    """Draws computed 2-D coordinates: ``panels[row][name]`` is ``(n_nodes, 2)`` or ``None``.

    ``result`` gives only the graph (edges, colours, name); nothing is computed here.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = list(panels)
    names = list(next(iter(panels.values())))
    titles = [
        f"{_title(n)}: {row}"
        if not (n == "eigenmap" and row == "PCA")
        else f"{_title(n)}: eigenvectors 1-2"
        for row in rows
        for n in names
    ]
    fig = make_subplots(
        rows=len(rows),
        cols=len(names),
        subplot_titles=titles,
        horizontal_spacing=0.03,
        vertical_spacing=0.12,
    )
    colors, label = _colors(result)
    numeric = not isinstance(colors[0], str)
    labels = [
        f"node {i}, {label} {result.graph.groups[i] if not numeric else colors[i]}"
        for i in range(result.graph.n_nodes)
    ]
    for r, row in enumerate(rows, 1):
        for c, name in enumerate(names, 1):
            xy = panels[row][name]
            if xy is None:
                continue
            ex, ey = _edge_lines(xy, result.graph.edges)
            fig.add_trace(
                go.Scatter(
                    x=ex,
                    y=ey,
                    mode="lines",
                    line={"color": "#bbb", "width": 1},
                    hoverinfo="skip",
                    showlegend=False,
                ),
                row=r,
                col=c,
            )
            marker = {"size": 7, "color": colors, "line": {"width": 0.5, "color": "#333"}}
            if numeric:
                marker.update(
                    colorscale="Viridis",
                    showscale=(r == 1 and c == len(names)),
                    colorbar={"title": {"text": label}, "len": 0.5},
                )
            fig.add_trace(
                go.Scatter(
                    x=xy[:, 0],
                    y=xy[:, 1],
                    mode="markers",
                    marker=marker,
                    text=labels,
                    hoverinfo="text",
                    showlegend=False,
                ),
                row=r,
                col=c,
            )
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    fig.update_annotations(font_size=10)
    title = f"{result.graph.name}: node embeddings in 2-D (colour: {label})"
    return style(fig, title=title, width=TWO_COLUMN + 120, height=260 * len(rows) + 90)


def spectral_energy(result: GeometricMemoryResult) -> go.Figure:
    """Energy share on each non-trivial Laplacian eigenvector, eigenvalues ascending."""
    import plotly.graph_objects as go

    geos = result.geometries()
    fig = go.Figure()
    rank = np.arange(1, len(result.eigenvalues) + 1)
    for name in (*MODELS, "eigenmap"):
        if name not in geos:
            continue
        fig.add_trace(
            go.Scatter(
                x=rank,
                y=geos[name].spectral_energy,
                mode="lines+markers",
                name=_title(name),
                customdata=result.eigenvalues,
                hovertemplate="rank %{x}<br>eigenvalue %{customdata:.3f}<br>"
                "share %{y:.3f}<extra></extra>",
            )
        )
    fig.add_hline(y=1 / len(rank), line_dash="dot", annotation_text="uniform (random)")
    fig.add_vline(x=result.top_k + 0.5, line_dash="dash", annotation_text=f"top {result.top_k}")
    fig.update_xaxes(title_text="Laplacian eigenvector (smallest non-trivial eigenvalue first)")
    fig.update_yaxes(title_text="share of embedding energy", type="log")
    return style(fig, title="Spectral energy of the node embeddings", width=TWO_COLUMN, height=380)


def similarity(result: GeometricMemoryResult) -> go.Figure:
    """Node-node cosine similarity in graph order, next to the graph's hop distances."""
    geos = result.geometries()
    names = [n for n in ("transformer", "control", "node2vec") if n in geos]
    cosines = {n: cosine_matrix(geos[n].embeddings) for n in names}
    return draw_similarity(shortest_paths(result.graph.adjacency), cosines)


def draw_similarity(distances: np.ndarray, cosines: dict[str, np.ndarray]) -> go.Figure:
    """Draws a computed ``(n, n)`` hop-distance matrix beside each named cosine matrix."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = list(cosines)
    fig = make_subplots(
        rows=1,
        cols=len(names) + 1,
        horizontal_spacing=0.04,
        subplot_titles=["graph distance (hops)", *map(_title, names)],
    )
    fig.add_trace(
        go.Heatmap(
            z=distances,
            colorscale="Viridis",
            reversescale=True,
            showscale=False,
            hovertemplate="%{y} - %{x}: %{z} hops<extra></extra>",
        ),
        row=1,
        col=1,
    )
    for c, name in enumerate(names, 2):
        fig.add_trace(
            go.Heatmap(
                z=cosines[name],
                zmin=-1,
                zmax=1,
                colorscale="RdBu",
                reversescale=True,
                showscale=c == len(names) + 1,
                hovertemplate="%{y} - %{x}: cos %{z:.2f}<extra></extra>",
            ),
            row=1,
            col=c,
        )
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    return style(
        fig, title="Node-node cosine similarity, nodes in graph order", width=TWO_COLUMN, height=300
    )


def training(result: GeometricMemoryResult) -> go.Figure:
    """Top-5 edge recovery and geometric level over edge memorization, transformer and control."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=2, subplot_titles=["memorization (top-5 edge recovery)", "geometric level"]
    )
    for i, (name, run) in enumerate(
        (("transformer", result.transformer), ("control", result.control))
    ):
        color = OKABE_ITO[i]
        curve = run.curve
        fig.add_trace(
            go.Scatter(
                x=curve.steps,
                y=curve.edge_recovery,
                name=_title(name),
                line={"color": color},
                legendgroup=name,
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=curve.steps,
                y=curve.geometric_level,
                name=_title(name),
                line={"color": color},
                legendgroup=name,
                showlegend=False,
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="step (full-batch epoch)")
    fig.update_yaxes(range=[-0.02, 1.02], row=1, col=1)
    return style(fig, title="Edge memorization: memory and geometry", width=TWO_COLUMN, height=330)


def ingredients(result: GeometricMemoryResult) -> go.Figure:
    """The ingredient table: geometry of edge memorization with one setting changed at a time."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = result.ingredients
    names = [r.name for r in rows]
    panels = (
        ("geometric_level", "geometric level"),
        ("spectral_top_energy", "top spectral energy"),
        ("distance_spearman", "distance Spearman"),
        ("edge_recovery", "top-5 recovery"),
    )
    fig = make_subplots(
        rows=1, cols=len(panels), subplot_titles=[t for _, t in panels], horizontal_spacing=0.06
    )
    control = result.control.geometry.scalars()
    for c, (key, _) in enumerate(panels, 1):
        fig.add_trace(
            go.Bar(
                x=names,
                y=[getattr(r, key) for r in rows],
                showlegend=False,
                marker_color=[OKABE_ITO[i % len(OKABE_ITO)] for i in range(len(rows))],
            ),
            row=1,
            col=c,
        )
        if control.get(key) is not None:
            fig.add_hline(y=control[key], line_dash="dot", row=1, col=c)
    fig.add_hline(
        y=result.top_k / len(result.eigenvalues), line_dash="dash", line_color="#999", row=1, col=2
    )
    fig.update_xaxes(tickangle=-35)
    title = "Ingredients: one setting changed from the release's (dotted: frozen-embedding control)"
    return style(fig, title=title, width=TWO_COLUMN + 120, height=380)


BUILDERS: dict[str, Callable[[GeometricMemoryResult], Any]] = {
    "projections": projections,
    "spectral_energy": spectral_energy,
    "similarity": similarity,
    "training": training,
    "ingredients": ingredients,
}
