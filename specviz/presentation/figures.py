"""The teaching pages' charts: metrics, sweeps, rules, the lab, parallel verification and parallel drafters
(pure; tests inspect ``fig.data``)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from specviz.drafters.registry import DRAFTERS
from specviz.presentation.render import COLORS

TARGET_COLOR, DRAFT_COLOR = "#37474f", "#9575cd"  # "target p" and "draft q" in every chart


def acceptance_by_position_figure(table) -> go.Figure:
    """Acceptance rate of the i-th drafted token (among rounds that verified it)."""
    fig = go.Figure(go.Bar(x=table.position, y=table.acceptance_rate, marker_color=COLORS["accepted"][0],
                           text=[f"{a}/{v}" for a, v in zip(table.accepted, table.verified)], textposition="outside"))
    fig.update_layout(xaxis_title="drafted position i", yaxis=dict(title="acceptance rate", range=[0, 1.1]), height=300,
                      margin=dict(l=10, r=10, t=30, b=10), title="acceptance per drafted position")
    return fig


def tokens_per_round_figure(table, measured: float, expected: float) -> go.Figure:
    fig = go.Figure(go.Bar(x=table.tokens, y=table.rounds, marker_color=COLORS["bonus"][0], name="rounds"))
    for value, label, dash, where in ((measured, "measured mean", "solid", "top right"),  # each label on its own
                                      (expected, "(1-α^(k+1))/(1-α)", "dash", "top left")):  # side, above the bars
        fig.add_vline(x=value, line_dash=dash, line_color="#e65100", annotation_text=f"{label} {value:.2f}",
                      annotation_position=where, annotation_bgcolor="rgba(255,255,255,0.8)")
    fig.update_layout(xaxis_title="tokens emitted in the round", yaxis=dict(title="rounds", range=[0, 1.45 * max(
        table.rounds.max(), 1)]), height=300, margin=dict(l=10, r=10, t=30, b=10), title="tokens per round")
    return fig


def accepted_lengths_figure(table) -> go.Figure:
    """Histogram of accepted drafted tokens per drafting round (one request)."""
    fig = go.Figure(go.Bar(x=table.accepted, y=table.rounds, marker_color=COLORS["accepted"][0], text=table.rounds,
                           textposition="outside", cliponaxis=False))
    fig.update_layout(xaxis=dict(title="drafted tokens accepted in the round", dtick=1), height=320,  # headroom:
                      yaxis=dict(title="rounds", range=[0, 1.25 * max(table.rounds.max(), 1)]),  # counts clear title
                      margin=dict(l=10, r=10, t=40, b=10), title="accepted length per round (this request)")
    return fig


def vocab_sweep_figure(table) -> go.Figure:
    """c and alpha against the draft head size K (log axis), with the theory's speedup."""
    fig = go.Figure()
    x = [str(k) for k in table.draft_vocab]
    fig.add_trace(go.Scatter(x=x, y=table.cost_ratio, name="cost ratio c", mode="lines+markers",
                             line_color=DRAFT_COLOR))
    fig.add_trace(go.Scatter(x=x, y=table.alpha, name="α", mode="lines+markers", line_color=COLORS["accepted"][0]))
    fig.add_trace(go.Bar(x=x, y=table.expected_speedup, name="speedup, theory", marker_color="rgba(230,81,0,0.25)",
                         yaxis="y2"))
    fig.update_layout(xaxis=dict(title="draft head size K (tokens)", type="category"),
                      yaxis=dict(title="c, α", range=[0, 1.05]),
                      yaxis2=dict(title="speedup (theory)", overlaying="y", side="right", rangemode="tozero"),
                      height=320, margin=dict(l=10, r=10, t=30, b=10), legend=dict(orientation="h", y=1.12),
                      title="head size K")
    return fig


def gamma_sweep_figure(table, best_measured: int, best_expected: int) -> go.Figure:
    """Measured tokens/round and speedup (median, with bars from the slowest to the fastest pair) against the
    closed forms (the speedup's also with the measured cost of verification), best gammas marked."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per round", "speedup over autoregressive"))
    spread = dict(type="data", symmetric=False, array=table.speedup_high - table.speedup,
                  arrayminus=table.speedup - table.speedup_low)  # the slowest and fastest pair's own speedup
    for col, measured, expected in ((1, "tokens_per_round", "expected_tokens_per_round"),
                                    (2, "speedup", "expected_speedup")):
        label = measured.replace("_", " ")
        fig.add_trace(go.Scatter(x=table.gamma, y=table[measured], mode="lines+markers", name=f"measured {label}",
                                 line=dict(color=TARGET_COLOR), error_y=spread if col == 2 else None), row=1, col=col)
        fig.add_trace(go.Scatter(x=table.gamma, y=table[expected], mode="lines", name=f"theory {label}",
                                 line=dict(color="#e65100", dash="dash")), row=1, col=col)
    fig.add_trace(go.Scatter(x=table.gamma, y=table.expected_speedup_verify_measured, mode="lines",
                             name="theory speedup, verification cost measured",
                             line=dict(color="#6a1b9a", dash="dot")), row=1, col=2)
    best = table[table.gamma == best_measured]
    fig.add_trace(go.Scatter(x=best.gamma, y=best.speedup, mode="markers+text", text=[f"best γ={best_measured}"],
                             textposition="top center",
                             marker=dict(size=14, color=COLORS["accepted"][0], symbol="star"),
                             name="best measured γ"), row=1, col=2)
    fig.add_vline(x=best_expected, line_dash="dot", line_color="#e65100", row=1, col=2,
                  annotation_text=f"theory's best γ={best_expected}", annotation_position="bottom right")
    fig.update_xaxes(title_text="γ (block size)")
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def lab_histogram_figure(counts: dict[str, dict[int, int]], exact: dict[int, float], labels: dict[int, str], n: int,
                         broken_law=None) -> go.Figure:
    """Observed frequencies per arm against the exact target probabilities (and the broken rule's exact law)."""
    ids = list(exact)
    fig = go.Figure(go.Bar(name="exact target p", x=[labels[i] for i in ids], y=[exact[i] for i in ids],
                           marker_color=TARGET_COLOR))
    palette = {"speculative sampling": COLORS["accepted"][0], "target sampling": COLORS["bonus"][0],
               "broken rule": COLORS["rejected"][0]}
    for arm, arm_counts in counts.items():
        fig.add_trace(go.Bar(name=arm, x=[labels[i] for i in ids], y=[arm_counts.get(i, 0) / n for i in ids],
                             marker_color=palette.get(arm, DRAFT_COLOR)))
    if broken_law is not None:
        fig.add_trace(go.Scatter(name="broken rule, exact law", x=[labels[i] for i in ids],
                                 y=[float(broken_law[i]) for i in ids], mode="markers",
                                 marker=dict(symbol="line-ew-open", size=28, color=COLORS["rejected"][0])))
    fig.update_layout(barmode="group", height=340, yaxis_title="frequency", margin=dict(l=10, r=10, t=30, b=10),
                      legend=dict(orientation="h", y=1.08))
    return fig


def parallel_arrows_figure(tokens: int, parallel_ms: float, sequential_ms: float) -> go.Figure:
    """``tokens`` narrow arrows one after another (one-token forwards) vs one wide arrow (one pass over them all)."""
    fig = go.Figure()
    step = sequential_ms / tokens
    for i in range(tokens):
        fig.add_annotation(x=(i + 1) * step, y=1, ax=i * step, ay=1, xref="x", yref="y", axref="x", ayref="y",
                           showarrow=True, arrowhead=2, arrowwidth=2, arrowcolor=DRAFT_COLOR, text="")
    fig.add_annotation(x=parallel_ms, y=0, ax=0, ay=0, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                       arrowhead=2, arrowwidth=14, arrowcolor=TARGET_COLOR, text="")
    fig.add_trace(go.Scatter(x=[sequential_ms, parallel_ms], y=[1, 0], mode="text", textposition="middle right",
                             text=[f" {tokens} one-token forwards: {sequential_ms:.1f} ms",
                                   f" 1 forward over {tokens} tokens: {parallel_ms:.1f} ms"],
                             showlegend=False))
    fig.update_layout(height=220, xaxis=dict(title="milliseconds", range=[0, max(sequential_ms, parallel_ms) * 1.8]),
                      yaxis=dict(visible=False, range=[-0.6, 1.6]), margin=dict(l=10, r=10, t=10, b=10))
    return fig


def mask_figure(mask, prefix_len: int, shown_prefix: int = 8) -> go.Figure:
    """The verification pass's attention mask (last few prefix keys and the drafted keys)."""
    start = max(0, prefix_len - shown_prefix)
    view = mask[:, start:]
    gamma = mask.shape[0] - 1
    keys = [f"prefix {j}" for j in range(start, prefix_len)] + [f"draft {i + 1}" for i in range(gamma)]
    queries = [f"→ p at draft {i + 1}" if i < gamma else "→ bonus p" for i in range(gamma + 1)]
    fig = go.Figure(go.Heatmap(z=view, x=keys, y=queries, colorscale=[[0, "#ffffff"], [1, TARGET_COLOR]],
                               showscale=False, xgap=1, ygap=1))
    fig.update_layout(height=80 + 30 * (gamma + 1), yaxis=dict(autorange="reversed", title="query (predicts)"),
                      xaxis_title="key (attended token)", margin=dict(l=10, r=10, t=10, b=10))
    return fig


def timeline_figure(draft_ms: list[float], verify_ms: list[float], emitted: list[int],
                    ar_ms_per_token: float) -> go.Figure:
    """Autoregressive (one target call per token) vs draft-then-verify (rounds), on measured times."""
    fig = go.Figure()
    t = 0.0
    for i in range(sum(emitted)):
        fig.add_trace(go.Bar(x=[ar_ms_per_token], base=[t], y=["autoregressive"], orientation="h", showlegend=i == 0,
                             name="target call", marker=dict(color=TARGET_COLOR, line=dict(color="white", width=1))))
        t += ar_ms_per_token
    t = 0.0
    for i, (d, v, k) in enumerate(zip(draft_ms, verify_ms, emitted)):
        fig.add_trace(go.Bar(x=[d], base=[t], y=["draft + verify"], orientation="h", showlegend=i == 0,
                             name="drafting", marker=dict(color=DRAFT_COLOR, line=dict(color="white", width=1))))
        fig.add_trace(go.Bar(x=[v], base=[t + d], y=["draft + verify"], orientation="h", showlegend=i == 0,
                             name="target call (verify)", text=[f"+{k}"], textposition="inside",
                             marker=dict(color=TARGET_COLOR, line=dict(color="white", width=1))))
        t += d + v
    fig.update_layout(barmode="overlay", height=220, xaxis_title="milliseconds", margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", y=1.15))
    return fig


def drafter_attention_figure(weights, title: str, window: int) -> go.Figure:
    """Rows: drafted slots t+2..; columns: the target states, the pending token, the [MASK] slots. Of the window's
    states every few are named (h[t] always), so their labels never overprint; the colour bar gives the weight."""
    k, every = weights.shape[0], max(1, -(-window // 6))
    columns = [f"h[t-{window - 1 - j}]" if j < window - 1 else "h[t]" for j in range(window)] + ["x[t+1]"] + \
              [f"[M]{i + 1}" for i in range(k)]
    named = [c for j, c in enumerate(columns) if j >= window - 1 or (window - 1 - j) % every == 0]
    fig = go.Figure(go.Heatmap(z=weights, x=columns, y=[f"slot {i + 1} → token t+{i + 2}" for i in range(k)],
                               colorscale="Blues", zmin=0, xgap=1, ygap=1, colorbar=dict(thickness=10, title="weight")))
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=150 + 32 * k, yaxis=dict(autorange="reversed"),
                      margin=dict(l=10, r=10, t=36, b=10), xaxis=dict(tickvals=named, tickangle=-45))
    return fig


SERIES_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def drafter_colors() -> dict[str, str]:
    """One colour per drafter, fixed by the registry's order: each drafter has its colour in every chart."""
    return {entry.label: SERIES_PALETTE[i % len(SERIES_PALETTE)] for i, entry in enumerate(DRAFTERS.values())}


def acceptance_by_drafter_figure(table) -> go.Figure:
    fig, colors = go.Figure(), drafter_colors()
    for drafter, rows in table.groupby("drafter", sort=False):
        fig.add_trace(go.Bar(name=drafter, x=rows.position, y=rows.acceptance_rate, marker_color=colors[drafter]))
    fig.update_layout(barmode="group", height=320, xaxis_title="drafted position",
                      yaxis=dict(title="acceptance rate", range=[0, 1]),
                      margin=dict(l=10, r=10, t=30, b=10), legend=dict(orientation="h", y=1.12))
    return fig


def confidence_calibration_figure(table) -> go.Figure:
    """EAGLE-2's observation: acceptance rate against the draft's confidence q(x), one line per drafter (markers sized
    by the tokens in each bin), with the diagonal a perfectly calibrated draft would follow."""
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="calibrated (acceptance = confidence)",
                               line=dict(dash="dash", color="#9e9e9e")))
    colors = drafter_colors()
    for drafter, rows in table.groupby("drafter", sort=False):
        fig.add_trace(go.Scatter(x=rows.confidence, y=rows.acceptance_rate, mode="lines+markers", name=drafter,
                                 line=dict(color=colors[drafter]),
                                 marker=dict(color=colors[drafter], size=[6 + 14 * (v / max(1, rows.verified.max()))
                                                                          ** 0.5 for v in rows.verified]),
                                 text=[f"{v} drafted tokens" for v in rows.verified]))
    fig.update_layout(height=360, xaxis=dict(title="draft confidence q(x) of the drafted token", range=[0, 1]),
                      yaxis=dict(title="observed acceptance rate", range=[0, 1.05]),
                      margin=dict(l=10, r=10, t=30, b=10), legend=dict(orientation="h", y=1.15))
    return fig


def roofline_figure(table: pd.DataFrame, target_name: str, draft_name: str | None) -> go.Figure:
    """This machine's measured pass cost against the pass size k + 1 for the target (and the draft), beside the
    target's memory bound (weight bytes / bandwidth, flat) and compute bound (2 N (k + 1) FLOPs / rate, rising)."""
    fig, tokens = go.Figure(), table.tokens.tolist()
    fig.add_trace(go.Scatter(x=tokens, y=table.target_ms.tolist(), mode="lines+markers", name="target, measured",
                             line=dict(color=TARGET_COLOR, width=3), hovertemplate="%{y:.1f} ms<extra>target</extra>"))
    if draft_name is not None and table.draft_ms.notna().all():
        fig.add_trace(go.Scatter(x=tokens, y=table.draft_ms.tolist(), mode="lines+markers", name="draft, measured",
                                 line=dict(color=DRAFT_COLOR, width=3),
                                 hovertemplate="%{y:.1f} ms<extra>draft</extra>"))
    fig.add_trace(go.Scatter(x=tokens, y=table.memory_bound_ms.tolist(), mode="lines", name="target's memory bound",
                             line=dict(color=TARGET_COLOR, dash="dash")))
    fig.add_trace(go.Scatter(x=tokens, y=table.compute_bound_ms.tolist(), mode="lines", name="target's compute bound",
                             line=dict(color="#888888", dash="dot")))
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=30, b=10), legend=dict(orientation="h", y=-0.25),
                      title=dict(text=f"{target_name}: one pass over k + 1 new tokens", font=dict(size=14)),
                      xaxis=dict(title="tokens in the pass (k drafted + 1)", dtick=1),
                      yaxis=dict(title="milliseconds", rangemode="tozero"))
    return fig
