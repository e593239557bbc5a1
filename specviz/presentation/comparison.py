"""Two runs side by side (the What if page): their outputs with the departure marked, and the theory's curve of each
with the run's measured point on it. Pure: data in, HTML or a plotly figure out."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from specviz.analysis.whatif import RunDifference
from specviz.presentation.figures import DRAFT_COLOR, TARGET_COLOR

RUN_COLORS = (TARGET_COLOR, DRAFT_COLOR)  # the first and the second run, in every chart of the page


def difference_html(diff: RunDifference) -> str:
    """The shared output, then each run's continuation from the first token that differs."""
    block = '<div class="sv-out" style="white-space:pre-wrap">{}</div>'
    shared = html.escape(diff.common_text)
    if diff.first_departure is None:
        return block.format(f"{shared} <em>(both runs write exactly this)</em>")
    rest = "".join(
        block.format(f'<b style="color:{color}">{name}:</b> <span style="background:#fff3e0">'
                     f'{html.escape(text) or "∅"}</span>')
        for name, text, color in (("first run", diff.first_rest, RUN_COLORS[0]),
                                  ("second run", diff.second_rest, RUN_COLORS[1])))
    return (block.format(f'{shared}<span style="color:#e65100">▍</span>')
            + f'<div style="margin-top:.4rem">From output token {diff.first_departure + 1} on:</div>{rest}')


def theory_figure(curves: list, points: list[tuple[float, float]], names: list[str]) -> go.Figure:
    """Each run's E[tokens per round] against γ at its measured α, and the run's measured point on it."""
    fig = go.Figure()
    for curve, (block, tokens), name, color in zip(curves, points, names, RUN_COLORS):
        fig.add_trace(go.Scatter(x=curve.gamma.tolist(), y=curve.expected_tokens_per_round.tolist(), mode="lines",
                                 name=f"{name}: theory at its α", line=dict(color=color, dash="dot")))
        fig.add_trace(go.Scatter(x=[block], y=[tokens], mode="markers", name=f"{name}: measured",
                                 marker=dict(color=color, size=14, symbol="diamond")))
    fig.update_layout(height=320, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h", y=-0.25),
                      xaxis=dict(title="block size γ (the run's mean realised block)", dtick=1),
                      yaxis=dict(title="tokens per round", rangemode="tozero"))
    return fig
