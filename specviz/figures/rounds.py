"""Trace records -> plotly figures (pure; tests inspect ``fig.data``).

Bars follow seed 002's per-token probability bars with the Leviathan et al. naming:
"target p" and "draft q". For each drafted token: both distributions over their top tokens, the
drafted token marked, and the acceptance probability min(1, p/q) with the uniform draw u.
On rejection: the residual norm(max(0, p - q)) with the sampled correction marked.
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..render import COLORS, display_text
from ..trace import ACCEPTED, REJECTED, DraftPosition, EmittedToken

TARGET_COLOR, DRAFT_COLOR = "#37474f", "#9575cd"
BARS = 8  # tokens per chart


def _layout(fig: go.Figure, title: str) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=260, margin=dict(l=10, r=10, t=48, b=10),
                      barmode="group", legend=dict(orientation="h", y=1.0, x=1.0, xanchor="right", yanchor="top", bgcolor="rgba(255,255,255,0.7)"),
                      yaxis=dict(title="probability", rangemode="tozero"))
    return fig


def _union(*tops, limit: int = BARS) -> list[tuple[int, str]]:
    seen: dict[int, str] = {}
    for top in tops:
        for token_id, text in zip(top.ids, top.texts):
            if len(seen) >= limit:
                break
            seen.setdefault(token_id, text)
    return list(seen.items())


def _prob(top, token_id: int) -> float:
    """A token's probability from a top-N record (0 if it fell outside the recorded top-N)."""
    return dict(zip(top.ids, top.probs)).get(token_id, 0.0)


def _labels(tokens: list[tuple[int, str]]) -> list[str]:
    return [f"{display_text(text)} ({token_id})" for token_id, text in tokens]


def pq_bars(pos: DraftPosition) -> go.Figure:
    """Target p vs draft q around one drafted token, the token outlined, its verdict in the title."""
    tokens = _union(pos.target_top, pos.draft_top)
    if pos.token_id not in dict(tokens):
        tokens.append((pos.token_id, pos.text))
    labels = _labels(tokens)
    outline = [3 if token_id == pos.token_id else 0 for token_id, _ in tokens]
    mark_color = COLORS["accepted" if pos.status == ACCEPTED else "rejected"][0]
    fig = go.Figure([
        go.Bar(name="target p", x=labels, y=[pos.p if t == pos.token_id else _prob(pos.target_top, t) for t, _ in tokens],
               marker=dict(color=TARGET_COLOR, line=dict(width=outline, color=mark_color))),
        go.Bar(name="draft q", x=labels, y=[pos.q if t == pos.token_id else _prob(pos.draft_top, t) for t, _ in tokens],
               marker=dict(color=DRAFT_COLOR, line=dict(width=outline, color=mark_color))),
    ])
    verdict = {ACCEPTED: "✓ accepted", REJECTED: "✗ rejected"}.get(pos.status, "not verified")
    title = f"#{pos.index + 1} '{display_text(pos.text)}' → {verdict}<br>p = {pos.p:.2f}, q = {pos.q:.2f}, {_criterion(pos)}"
    return _layout(fig, title)


def _criterion(pos: DraftPosition) -> str:
    """What decided this token: min(1, p/q) vs u (sampling), the tau gap (top-beta), or argmax p (greedy)."""
    if pos.uniform is not None:
        return f"min(1, p/q) = {pos.accept_prob:.2f}, u = {pos.uniform:.2f}"
    if pos.tau_gap is not None:
        return f"log p(top1) − log p = {pos.tau_gap:.2f}"
    if pos.status == "not_verified":
        return "after a rejection"
    return f"target argmax '{display_text(pos.target_top.texts[0])}'"


def emitted_bars(token: EmittedToken, kind: str) -> go.Figure:
    """A correction over the residual norm(max(0, p - q)), or a bonus over the target's p; token marked.

    The title says where the token was really taken from: sampled from the residual (speculative
    sampling) or the target's argmax (greedy, top-beta).
    """
    top, name = (token.residual_top, "residual norm(max(0, p − q))") if token.residual_top else (token.target_top, "target p")
    tokens = _union(top)
    if token.token_id not in dict(tokens):
        tokens.append((token.token_id, token.text))
    fg, _ = COLORS[kind]
    fig = go.Figure([go.Bar(
        name=name, x=_labels(tokens), y=[_prob(top, t) for t, _ in tokens],
        marker=dict(color=[fg if t == token.token_id else "#b0bec5" for t, _ in tokens]),
    )])
    fig.update_layout(showlegend=True)
    how = "sampled from the residual" if token.source == "residual" else "the target's choice"
    return _layout(fig, f"{kind} '{display_text(token.text)}'<br>{how}, prob {token.prob:.2f}")


def distribution_bars(top, marked: dict[int, str], title: str, color: str = TARGET_COLOR) -> go.Figure:
    """One distribution's top tokens; ``marked`` token ids get the given colours (drawn children, a sample)."""
    tokens = _union(top)
    fig = go.Figure(go.Bar(x=_labels(tokens), y=[_prob(top, t) for t, _ in tokens],
                           marker_color=[marked.get(t, color) for t, _ in tokens]))
    fig.update_layout(height=220, margin=dict(l=10, r=10, t=36, b=10), title=dict(text=title, font=dict(size=12)),
                      yaxis=dict(rangemode="tozero"))
    return fig


def tree_figure(tree, extra_text: str | None, extra_kind: str | None) -> go.Figure:
    """The whole draft tree, depth left to right; the accepted path green, rejected red, unchecked grey."""
    order: dict[int, list[int]] = {}
    for node in tree.nodes:
        order.setdefault(node.depth, []).append(node.index)
    xy = {}
    for depth, members in order.items():
        for rank, index in enumerate(members):
            xy[index] = (depth, -(rank - (len(members) - 1) / 2))
    fig = go.Figure()
    for node in tree.nodes[1:]:
        (x0, y0), (x1, y1) = xy[node.parent], xy[node.index]
        on_path = node.index in tree.path
        fig.add_trace(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=COLORS["accepted"][0] if on_path else "#bdbdbd", width=4 if on_path else 1)))
    style = {"accepted": "accepted", "rejected": "rejected", "not_verified": "not_verified"}
    colors = [COLORS["prefix"][0] if n.index == 0 else COLORS[style[n.status]][0] for n in tree.nodes]
    fig.add_trace(go.Scatter(
        x=[xy[n.index][0] for n in tree.nodes], y=[xy[n.index][1] for n in tree.nodes], mode="markers+text",
        text=[display_text(n.text) for n in tree.nodes], textposition="top center", showlegend=False,
        marker=dict(size=14, color=colors, line=dict(color="white", width=1)),
        hovertext=[f"node {n.index}: {n.text!r} q={n.q:.3f} ({n.status})" for n in tree.nodes], hoverinfo="text"))
    if extra_text is not None:
        last = tree.path[-1] if tree.path else 0
        x, y = xy[last]
        fig.add_trace(go.Scatter(x=[x + 0.6], y=[y], mode="markers+text", text=[display_text(extra_text)], showlegend=False,
                                 textposition="bottom center", marker=dict(size=16, symbol="star", color=COLORS[extra_kind][0])))
    fig.update_layout(height=120 + 28 * max(len(m) for m in order.values()), margin=dict(l=10, r=10, t=10, b=10),
                      xaxis=dict(title="depth (draft iteration)", dtick=1), yaxis=dict(visible=False))
    return fig
