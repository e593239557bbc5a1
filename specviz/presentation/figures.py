"""The teaching pages' charts of measured outcomes against the theory: the Metrics page's and the losslessness
lab's (the sweeps' are in :mod:`specviz.presentation.sweep_figures`); and the two colours every chart gives the
target and the draft (pure; tests inspect ``fig.data``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import plotly.graph_objects as go

from specviz.presentation.boxes import COLORS

if TYPE_CHECKING:
    import torch

TARGET_COLOR, DRAFT_COLOR = "#37474f", "#9575cd"  # "target p" and "draft q" in every chart


def acceptance_by_position_figure(table: pd.DataFrame) -> go.Figure:
    """Acceptance rate of the i-th drafted token (among rounds that verified it)."""
    fig = go.Figure(
        go.Bar(
            x=table.position,
            y=table.acceptance_rate,
            marker_color=COLORS["accepted"][0],
            text=[f"{a}/{v}" for a, v in zip(table.accepted, table.verified)],
            textposition="outside",
        )
    )
    fig.update_layout(
        xaxis_title="drafted position i",
        yaxis=dict(title="acceptance rate", range=[0, 1.1]),
        height=300,
        margin=dict(l=10, r=10, t=30, b=10),
        title="acceptance per drafted position",
    )
    return fig


def tokens_per_round_figure(table: pd.DataFrame, measured: float, expected: float) -> go.Figure:
    fig = go.Figure(go.Bar(x=table.tokens, y=table.rounds, marker_color=COLORS["bonus"][0], name="rounds"))
    for value, label, dash, where in (
        (measured, "measured mean", "solid", "top right"),  # each label on its own
        (expected, "(1-α^(k+1))/(1-α)", "dash", "top left"),
    ):  # side, above the bars
        fig.add_vline(
            x=value,
            line_dash=dash,
            line_color="#e65100",
            annotation_text=f"{label} {value:.2f}",
            annotation_position=where,
            annotation_bgcolor="rgba(255,255,255,0.8)",
        )
    fig.update_layout(
        xaxis_title="tokens emitted in the round",
        yaxis=dict(title="rounds", range=[0, 1.45 * max(table.rounds.max(), 1)]),
        height=300,
        margin=dict(l=10, r=10, t=30, b=10),
        title="tokens per round",
    )
    return fig


def accepted_lengths_figure(table: pd.DataFrame) -> go.Figure:
    """Histogram of accepted drafted tokens per drafting round (one request)."""
    fig = go.Figure(
        go.Bar(
            x=table.accepted,
            y=table.rounds,
            marker_color=COLORS["accepted"][0],
            text=table.rounds,
            textposition="outside",
            cliponaxis=False,
        )
    )
    fig.update_layout(
        xaxis=dict(title="drafted tokens accepted in the round", dtick=1),
        height=320,  # headroom:
        yaxis=dict(title="rounds", range=[0, 1.25 * max(table.rounds.max(), 1)]),  # counts clear title
        margin=dict(l=10, r=10, t=40, b=10),
        title="accepted length per round (this request)",
    )
    return fig


def lab_histogram_figure(
    counts: dict[str, dict[int, int]],
    exact: dict[int, float],
    labels: dict[int, str],
    n: int,
    broken_law: torch.Tensor | None = None,
) -> go.Figure:
    """Observed frequencies per arm against the exact target probabilities (and the broken rule's exact law)."""
    ids = list(exact)
    fig = go.Figure(
        go.Bar(name="exact target p", x=[labels[i] for i in ids], y=[exact[i] for i in ids], marker_color=TARGET_COLOR)
    )
    palette = {
        "speculative sampling": COLORS["accepted"][0],
        "target sampling": COLORS["bonus"][0],
        "broken rule": COLORS["rejected"][0],
    }
    for arm, arm_counts in counts.items():
        fig.add_trace(
            go.Bar(
                name=arm,
                x=[labels[i] for i in ids],
                y=[arm_counts.get(i, 0) / n for i in ids],
                marker_color=palette.get(arm, DRAFT_COLOR),
            )
        )
    if broken_law is not None:
        fig.add_trace(
            go.Scatter(
                name="broken rule, exact law",
                x=[labels[i] for i in ids],
                y=[float(broken_law[i]) for i in ids],
                mode="markers",
                marker=dict(symbol="line-ew-open", size=28, color=COLORS["rejected"][0]),
            )
        )
    fig.update_layout(
        barmode="group",
        height=340,
        yaxis_title="frequency",
        margin=dict(l=10, r=10, t=30, b=10),
        legend=dict(orientation="h", y=1.08),
    )
    return fig
