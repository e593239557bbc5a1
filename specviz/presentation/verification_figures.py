"""The Parallel verification page's charts: why the target checks k drafted tokens for about the cost of one step.
One pass over k + 1 tokens against k + 1 one-token passes, the causal mask that makes it one pass, the rounds on a
timeline, and this machine's roofline (pure; tests inspect ``fig.data``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import NDArray

from specviz.presentation.figures import DRAFT_COLOR, TARGET_COLOR


def _arrow(fig: go.Figure, start: float, end: float, row: float, width: float, colour: str) -> None:
    """An arrow from ``start`` to ``end`` ms on row ``row``."""
    fig.add_annotation(
        x=end,
        y=row,
        ax=start,
        ay=row,
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        showarrow=True,
        arrowhead=2,
        arrowwidth=width,
        arrowcolor=colour,
        text="",
    )


def parallel_arrows_figure(tokens: int, parallel_ms: float, sequential_ms: float) -> go.Figure:
    """``tokens`` narrow arrows one after another (one-token forwards) vs one wide arrow (one pass over them all)."""
    fig = go.Figure()
    step = sequential_ms / tokens
    for i in range(tokens):
        _arrow(fig, i * step, (i + 1) * step, 1, 2, DRAFT_COLOR)
    _arrow(fig, 0, parallel_ms, 0, 14, TARGET_COLOR)
    fig.add_trace(
        go.Scatter(
            x=[sequential_ms, parallel_ms],
            y=[1, 0],
            mode="text",
            textposition="middle right",
            text=[
                f" {tokens} one-token forwards: {sequential_ms:.1f} ms",
                f" 1 forward over {tokens} tokens: {parallel_ms:.1f} ms",
            ],
            showlegend=False,
        )
    )
    fig.update_layout(
        height=220,
        xaxis=dict(title="milliseconds", range=[0, max(sequential_ms, parallel_ms) * 1.8]),
        yaxis=dict(visible=False, range=[-0.6, 1.6]),
        margin=dict(l=10, r=10, t=10, b=10),
    )
    return fig


def mask_figure(mask: NDArray[np.int_], prefix_len: int, shown_prefix: int = 8) -> go.Figure:
    """The verification pass's attention mask (last few prefix keys and the drafted keys)."""
    start = max(0, prefix_len - shown_prefix)
    view = mask[:, start:]
    gamma = mask.shape[0] - 1
    keys = [f"prefix {j}" for j in range(start, prefix_len)] + [f"draft {i + 1}" for i in range(gamma)]
    queries = [f"→ p at draft {i + 1}" if i < gamma else "→ bonus p" for i in range(gamma + 1)]
    fig = go.Figure(
        go.Heatmap(
            z=view, x=keys, y=queries, colorscale=[[0, "#ffffff"], [1, TARGET_COLOR]], showscale=False, xgap=1, ygap=1
        )
    )
    fig.update_layout(
        height=80 + 30 * (gamma + 1),
        yaxis=dict(autorange="reversed", title="query (predicts)"),
        xaxis_title="key (attended token)",
        margin=dict(l=10, r=10, t=10, b=10),
    )
    return fig


def _segment(
    fig: go.Figure, row: str, start: float, ms: float, name: str, colour: str, legend: bool, text: str | None = None
) -> None:
    """One call on a timeline row: ``ms`` long from ``start`` (``text`` written inside it)."""
    fig.add_trace(
        go.Bar(
            x=[ms],
            base=[start],
            y=[row],
            orientation="h",
            showlegend=legend,
            name=name,
            text=[text] if text else None,
            textposition="inside" if text else None,
            marker=dict(color=colour, line=dict(color="white", width=1)),
        )
    )


def timeline_figure(
    draft_ms: list[float], verify_ms: list[float], emitted: list[int], ar_ms_per_token: float
) -> go.Figure:
    """Autoregressive (one target call per token) vs draft-then-verify (rounds), on measured times."""
    fig = go.Figure()
    for i in range(sum(emitted)):
        _segment(fig, "autoregressive", i * ar_ms_per_token, ar_ms_per_token, "target call", TARGET_COLOR, i == 0)
    t = 0.0
    for i, (d, v, k) in enumerate(zip(draft_ms, verify_ms, emitted)):
        _segment(fig, "draft + verify", t, d, "drafting", DRAFT_COLOR, i == 0)
        _segment(fig, "draft + verify", t + d, v, "target call (verify)", TARGET_COLOR, i == 0, f"+{k}")
        t += d + v
    fig.update_layout(
        barmode="overlay",
        height=220,
        xaxis_title="milliseconds",
        margin=dict(l=10, r=10, t=10, b=10),
        legend=dict(orientation="h", y=1.15),
    )
    return fig


def roofline_figure(table: pd.DataFrame, target_name: str, draft_name: str | None) -> go.Figure:
    """This machine's measured pass cost against the pass size k + 1 for the target (and the draft), beside the
    target's memory bound (weight bytes / bandwidth, flat) and compute bound (2 N (k + 1) FLOPs / rate, rising)."""
    fig, tokens = go.Figure(), table.tokens.tolist()
    fig.add_trace(
        go.Scatter(
            x=tokens,
            y=table.target_ms.tolist(),
            mode="lines+markers",
            name="target, measured",
            line=dict(color=TARGET_COLOR, width=3),
            hovertemplate="%{y:.1f} ms<extra>target</extra>",
        )
    )
    if draft_name is not None and table.draft_ms.notna().all():
        fig.add_trace(
            go.Scatter(
                x=tokens,
                y=table.draft_ms.tolist(),
                mode="lines+markers",
                name="draft, measured",
                line=dict(color=DRAFT_COLOR, width=3),
                hovertemplate="%{y:.1f} ms<extra>draft</extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=tokens,
            y=table.memory_bound_ms.tolist(),
            mode="lines",
            name="target's memory bound",
            line=dict(color=TARGET_COLOR, dash="dash"),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=tokens,
            y=table.compute_bound_ms.tolist(),
            mode="lines",
            name="target's compute bound",
            line=dict(color="#888888", dash="dot"),
        )
    )
    fig.update_layout(
        height=340,
        margin=dict(l=10, r=10, t=30, b=10),
        legend=dict(orientation="h", y=-0.25),
        title=dict(text=f"{target_name}: one pass over k + 1 new tokens", font=dict(size=14)),
        xaxis=dict(title="tokens in the pass (k drafted + 1)", dtick=1),
        yaxis=dict(title="milliseconds", rangemode="tozero"),
    )
    return fig
