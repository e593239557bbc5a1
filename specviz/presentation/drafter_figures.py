"""The Parallel drafters page's charts: what a parallel drafter attends to, and each drafter's acceptance by drafted
position and by its own confidence, in one colour per drafter across the page (pure; tests inspect ``fig.data``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import NDArray

from specviz.registry.drafters import DRAFTERS


def drafter_attention_figure(weights: NDArray[np.float32], title: str, window: int) -> go.Figure:
    """Rows: drafted slots t+2..; columns: the target states, the pending token, the [MASK] slots. Of the window's
    states every few are named (h[t] always), so their labels never overprint; the colour bar gives the weight."""
    k, every = weights.shape[0], max(1, -(-window // 6))
    columns = (
        [f"h[t-{window - 1 - j}]" if j < window - 1 else "h[t]" for j in range(window)]
        + ["x[t+1]"]
        + [f"[M]{i + 1}" for i in range(k)]
    )
    named = [c for j, c in enumerate(columns) if j >= window - 1 or (window - 1 - j) % every == 0]
    fig = go.Figure(
        go.Heatmap(
            z=weights,
            x=columns,
            y=[f"slot {i + 1} → token t+{i + 2}" for i in range(k)],
            colorscale="Blues",
            zmin=0,
            xgap=1,
            ygap=1,
            colorbar=dict(thickness=10, title="weight"),
        )
    )
    fig.update_layout(
        title=dict(text=title, font=dict(size=13)),
        height=150 + 32 * k,
        yaxis=dict(autorange="reversed"),
        margin=dict(l=10, r=10, t=36, b=10),
        xaxis=dict(tickvals=named, tickangle=-45),
    )
    return fig


SERIES_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def drafter_colors() -> dict[str, str]:
    """One colour per drafter, fixed by the registry's order: each drafter has its colour in every chart."""
    return {entry.label: SERIES_PALETTE[i % len(SERIES_PALETTE)] for i, entry in enumerate(DRAFTERS.values())}


def acceptance_by_drafter_figure(table: pd.DataFrame) -> go.Figure:
    fig, colors = go.Figure(), drafter_colors()
    for drafter, rows in table.groupby("drafter", sort=False):
        fig.add_trace(go.Bar(name=drafter, x=rows.position, y=rows.acceptance_rate, marker_color=colors[drafter]))
    fig.update_layout(
        barmode="group",
        height=320,
        xaxis_title="drafted position",
        yaxis=dict(title="acceptance rate", range=[0, 1]),
        margin=dict(l=10, r=10, t=30, b=10),
        legend=dict(orientation="h", y=1.12),
    )
    return fig


def confidence_calibration_figure(table: pd.DataFrame) -> go.Figure:
    """EAGLE-2's observation: acceptance rate against the draft's confidence q(x), one line per drafter (markers sized
    by the tokens in each bin), with the diagonal a perfectly calibrated draft would follow."""
    fig = go.Figure(
        go.Scatter(
            x=[0, 1],
            y=[0, 1],
            mode="lines",
            name="calibrated (acceptance = confidence)",
            line=dict(dash="dash", color="#9e9e9e"),
        )
    )
    colors = drafter_colors()
    for drafter, rows in table.groupby("drafter", sort=False):
        fig.add_trace(
            go.Scatter(
                x=rows.confidence,
                y=rows.acceptance_rate,
                mode="lines+markers",
                name=drafter,
                line=dict(color=colors[drafter]),
                marker=dict(
                    color=colors[drafter],
                    size=[6 + 14 * (v / max(1, rows.verified.max())) ** 0.5 for v in rows.verified],
                ),
                text=[f"{v} drafted tokens" for v in rows.verified],
            )
        )
    fig.update_layout(
        height=360,
        xaxis=dict(title="draft confidence q(x) of the drafted token", range=[0, 1]),
        yaxis=dict(title="observed acceptance rate", range=[0, 1.05]),
        margin=dict(l=10, r=10, t=30, b=10),
        legend=dict(orientation="h", y=1.15),
    )
    return fig
