"""Runs and rules side by side: two runs (the What if page) with the departure marked and the theory's curve of each
with the run's measured point on it; the rules' verdicts on one draft (the Compare rules page). Pure: data in, HTML
or a plotly figure out."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from specviz.analysis.whatif import RunDifference
from specviz.presentation.boxes import COLORS, display_text
from specviz.presentation.figures import DRAFT_COLOR, TARGET_COLOR

RUN_COLORS = (TARGET_COLOR, DRAFT_COLOR)  # the first and the second run, in every chart of the page


def difference_html(diff: RunDifference) -> str:
    """The shared output, then each run's continuation from the first token that differs."""
    block = '<div class="sv-out" style="white-space:pre-wrap">{}</div>'
    shared = html.escape(diff.common_text)
    if diff.first_departure is None:
        return block.format(f"{shared} <em>(both runs write exactly this)</em>")
    rest = "".join(
        block.format(
            f'<b style="color:{color}">{name}:</b> <span style="background:#fff3e0">{html.escape(text) or "∅"}</span>'
        )
        for name, text, color in (
            ("first run", diff.first_rest, RUN_COLORS[0]),
            ("second run", diff.second_rest, RUN_COLORS[1]),
        )
    )
    return (
        block.format(f'{shared}<span style="color:#e65100">▍</span>')
        + f'<div style="margin-top:.4rem">From output token {diff.first_departure + 1} on:</div>{rest}'
    )


def theory_figure(curves: list[pd.DataFrame], points: list[tuple[float, float]], names: list[str]) -> go.Figure:
    """Each run's E[tokens per round] against γ at its measured α, and the run's measured point on it."""
    fig = go.Figure()
    for curve, (block, tokens), name, color in zip(curves, points, names, RUN_COLORS):
        fig.add_trace(
            go.Scatter(
                x=curve.gamma.tolist(),
                y=curve.expected_tokens_per_round.tolist(),
                mode="lines",
                name=f"{name}: theory at its α",
                line=dict(color=color, dash="dot"),
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[block],
                y=[tokens],
                mode="markers",
                name=f"{name}: measured",
                marker=dict(color=color, size=14, symbol="diamond"),
            )
        )
    fig.update_layout(
        height=320,
        margin=dict(l=10, r=10, t=10, b=10),
        legend=dict(orientation="h", y=-0.25),
        xaxis=dict(title="block size γ (the run's mean realised block)", dtick=1),
        yaxis=dict(title="tokens per round", rangemode="tozero"),
    )
    return fig


def apart(a: float, b: float) -> tuple[str, str]:
    """Two numbers a test compares, with as many decimals (2..6) as it takes to tell them apart."""
    d = next((d for d in range(2, 7) if f"{a:.{d}f}" != f"{b:.{d}f}"), 6)
    return f"{a:.{d}f}", f"{b:.{d}f}"


def rules_grid_figure(table: pd.DataFrame, token_texts: list[str]) -> go.Figure:
    """Rules (rows) x drafted positions (columns): ✓ accepted, ✗ rejected, · not verified; a draw's test too."""
    rules, positions = list(dict.fromkeys(table.rule)), sorted(set(table.position))
    code = {"accepted": 2, "rejected": 1, "not_verified": 0}
    mark = {"accepted": "✓", "rejected": "✗", "not_verified": "·"}
    lookup = {(r.rule, r.position): r for r in table.itertuples()}
    z = [[code[lookup[(rule, p)].status] for p in positions] for rule in rules]
    text = [
        [
            mark[(r := lookup[(rule, p)]).status]
            + (" {} vs u {}".format(*apart(r.accept_prob, r.uniform)) if pd.notna(r.uniform) else "")
            for p in positions
        ]
        for rule in rules
    ]
    colorscale = [[0, COLORS["not_verified"][1]], [0.5, COLORS["rejected"][1]], [1, COLORS["accepted"][1]]]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"{i}: {display_text(t)}" for i, t in zip(positions, token_texts)],
            y=rules,
            text=text,
            texttemplate="%{text}",
            textfont=dict(size=15),
            colorscale=colorscale,
            zmin=0,
            zmax=2,
            showscale=False,
            xgap=2,
            ygap=2,
        )
    )
    fig.update_layout(
        height=60 + 40 * len(rules), margin=dict(l=10, r=10, t=10, b=10), yaxis=dict(autorange="reversed")
    )
    return fig
