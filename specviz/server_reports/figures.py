"""The chart of an engine's per-position acceptance against the i.i.d. theory (the "Your engine's numbers" page):
the share of drafts accepted through each position as the engine reported it, alpha^i beside it, and where the curve
falls off a cliff. Pure: no streamlit (tests inspect ``fig.data``)."""

from __future__ import annotations

import plotly.graph_objects as go

from specviz.presentation.boxes import COLORS
from specviz.presentation.figures import TARGET_COLOR
from specviz.server_reports.explain import Explanation

REPORTED, THEORY, CONDITIONAL = "reported by the engine", "i.i.d. theory α^i", "accepted given the ones before"


def per_position_figure(explained: Explanation) -> go.Figure:
    """The engine's per-position curve (a draft counts at position i when its first i tokens were accepted) against
    alpha^i, the same share were every token accepted with probability alpha independently (Leviathan et al. 2023,
    Sec. 3.1); bars: each position's acceptance given the ones before it (alpha, flat, under i.i.d. acceptance)."""
    curve = explained.positions
    at = [p.position for p in curve]
    fig = go.Figure()
    fig.add_bar(
        x=at,
        y=[p.conditional for p in curve],
        name=CONDITIONAL,
        marker_color=COLORS["accepted"][1],
        opacity=0.6,
    )
    fig.add_scatter(
        x=at,
        y=[p.reported for p in curve],
        name=REPORTED,
        mode="lines+markers+text",
        line=dict(color=COLORS["accepted"][0], width=3),
        text=[f"{p.reported:.2f}" for p in curve],
        textposition="top center",
    )
    if explained.alpha is not None:
        fig.add_scatter(
            x=at,
            y=[p.theory for p in curve],
            name=f"{THEORY}, α = {explained.alpha:.2f}",
            mode="lines+markers",
            line=dict(color=TARGET_COLOR, dash="dash"),
        )
    if explained.cliff is not None:
        fig.add_annotation(
            x=explained.cliff.position,
            y=explained.cliff.reported,
            text=f"cliff at position {explained.cliff.position}",
            showarrow=True,
            arrowhead=2,
            ax=40,
            ay=-50,
            bgcolor="rgba(255,255,255,0.85)",
        )
    fig.update_layout(
        xaxis=dict(title="draft position i", dtick=1),
        yaxis=dict(title="share of drafts", range=[0, 1.12]),
        height=340,
        margin=dict(l=10, r=10, t=40, b=10),
        title="acceptance per draft position, against the i.i.d. theory",
        legend=dict(orientation="h", yanchor="bottom", y=-0.45),
    )
    return fig
