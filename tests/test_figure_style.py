"""The figure style: one colour and one legend entry per series across a figure's panels."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots
from support import same_series_same_colour

from workbench.figures import OKABE_ITO, style


def test_a_series_keeps_its_colour_across_panels_and_is_listed_once():
    fig = make_subplots(rows=1, cols=2)
    for col, names in ((1, ["probe", "prototype"]), (2, ["prototype", "probe", "text"])):
        for name in names:
            fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], name=name), row=1, col=col)
    # plotly alone colours by trace index: the second panel swaps the two detectors' colours
    fig.add_trace(go.Scatter(x=[0, 1], y=[1, 1], name="chance", line={"color": "gray"}))
    colours = same_series_same_colour(style(fig))
    assert colours == {
        "probe": OKABE_ITO[0],
        "prototype": OKABE_ITO[1],
        "text": OKABE_ITO[2],
        "chance": "gray",  # an explicit colour is kept, and not handed out again
    }
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert sorted(shown) == ["chance", "probe", "prototype", "text"]
    assert {t.legendgroup for t in fig.data if t.name == "probe"} == {"probe"}


def test_an_explicit_colour_wins_for_its_whole_series_and_per_point_colours_are_left_alone():
    fig = make_subplots(rows=1, cols=2)
    fig.add_trace(go.Bar(x=["a"], y=[1], name="steering"), row=1, col=1)
    fig.add_trace(go.Bar(x=["a"], y=[1], name="steering", marker={"color": "#c44e52"}), 1, 2)
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], name="tokens", marker={"color": [0.1, 0.9]}))
    fig.add_trace(go.Heatmap(z=[[0, 1]], name="map"))
    style(fig)
    assert same_series_same_colour(fig) == {"steering": "#c44e52"}
    assert list(fig.data[2].marker.color) == [0.1, 0.9]


def test_a_name_drawn_in_two_explicit_colours_is_left_as_the_builder_drew_it():
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0], y=[0], name="student", line={"color": "#111111"}))
    fig.add_trace(go.Scatter(x=[0], y=[0], name="student", line={"color": "#222222"}))
    style(fig)
    assert [t.line.color for t in fig.data] == ["#111111", "#222222"]
    assert [t.showlegend for t in fig.data] == [None, None]  # both stay in the legend


def test_axes_grow_their_margins_to_fit_long_tick_labels():
    fig = make_subplots(rows=1, cols=2)
    names = ["release (tied, ward)", "h directions, no decay"]
    fig.add_trace(go.Bar(x=names, y=[1, 2]), row=1, col=1)
    style(fig).update_xaxes(tickangle=-35)
    layout = fig.layout.template.layout
    assert layout.xaxis.automargin is True and layout.yaxis.automargin is True
    assert all(fig.layout[a].automargin is not False for a in ("xaxis", "xaxis2", "yaxis"))
