"""The Gamma sweep page's charts: the measured speedup of each block size against the theory, and what the draft
head's size does to c, alpha and the predicted speedup (pure; tests inspect ``fig.data``)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from specviz.presentation.boxes import COLORS
from specviz.presentation.figures import DRAFT_COLOR, TARGET_COLOR


def vocab_sweep_figure(table: pd.DataFrame) -> go.Figure:
    """c and alpha against the draft head size K (log axis), with the theory's speedup."""
    fig = go.Figure()
    x = [str(k) for k in table.draft_vocab]
    fig.add_trace(
        go.Scatter(x=x, y=table.cost_ratio, name="cost ratio c", mode="lines+markers", line_color=DRAFT_COLOR)
    )
    fig.add_trace(go.Scatter(x=x, y=table.alpha, name="α", mode="lines+markers", line_color=COLORS["accepted"][0]))
    fig.add_trace(
        go.Bar(x=x, y=table.expected_speedup, name="speedup, theory", marker_color="rgba(230,81,0,0.25)", yaxis="y2")
    )
    fig.update_layout(
        xaxis=dict(title="draft head size K (tokens)", type="category"),
        yaxis=dict(title="c, α", range=[0, 1.05]),
        yaxis2=dict(title="speedup (theory)", overlaying="y", side="right", rangemode="tozero"),
        height=320,
        margin=dict(l=10, r=10, t=30, b=10),
        legend=dict(orientation="h", y=1.12),
        title="head size K",
    )
    return fig


def gamma_sweep_figure(table: pd.DataFrame, best_measured: int | None, loaded: list[int]) -> go.Figure:
    """Measured tokens/round and timed ratio (median, with bars from the slowest to the fastest pair) against the
    closed forms (the speedup's also with the measured cost of verification). The timed line joins the quiet timings
    only, so its peak is the fastest γ the page names (``best_measured``, starred; None: none was quiet); the ``loaded``
    γ's timings, which measured the server's load, stand apart as grey crosses, no result."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("tokens per round", "the target alone's time over each γ's: timed and in theory"),
    )
    spread = dict(
        type="data",
        symmetric=False,
        array=table.speedup_high - table.speedup,
        arrayminus=table.speedup - table.speedup_low,
    )  # the slowest and fastest pair's own speedup
    quiet = ~table.gamma.isin(loaded)
    for col, measured, expected, names in (
        (1, "tokens_per_round", "expected_tokens_per_round", ("measured tokens per round", "theory tokens per round")),
        (2, "speedup", "expected_speedup", ("the sweep's timed ratio", "theory speedup (v = 1)")),
    ):
        fig.add_trace(
            go.Scatter(
                x=table.gamma,
                y=table[measured].where(quiet) if col == 2 else table[measured],  # a load's timing is no point of it
                mode="lines+markers",
                name=names[0],
                line=dict(color=TARGET_COLOR),
                error_y=spread if col == 2 else None,
            ),
            row=1,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                x=table.gamma,
                y=table[expected],
                mode="lines",
                name=names[1],
                line=dict(color="#e65100", dash="dash"),
            ),
            row=1,
            col=col,
        )
    fig.add_trace(
        go.Scatter(
            x=table.gamma,
            y=table.expected_speedup_verify_measured,
            mode="lines",
            name="theory speedup, v(k) measured here",
            line=dict(color="#6a1b9a", dash="dot"),
        ),
        row=1,
        col=2,
    )
    if loaded:
        under_load = table[~quiet]
        fig.add_trace(
            go.Scatter(
                x=under_load.gamma,
                y=under_load.speedup,
                mode="markers",
                marker=dict(size=9, color="#9e9e9e", symbol="x"),
                name="timed under load (no result)",
            ),
            row=1,
            col=2,
        )
    if best_measured is not None:
        best = table[table.gamma == best_measured]
        fig.add_trace(
            go.Scatter(
                x=best.gamma,
                y=best.speedup,
                mode="markers",  # named in the legend: a label over the point is cut at the chart's edge
                marker=dict(size=14, color=COLORS["accepted"][0], symbol="star"),
                name=f"fastest γ in this sweep (γ = {best_measured})",
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="γ (block size)")
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=40, b=10))
    return fig
