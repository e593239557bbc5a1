"""Reusable views: data in, elements out (round navigation, autoplay, the tree round)."""

from __future__ import annotations

import time

import streamlit as st

from ..trace import Trace



def summary_line(trace: Trace) -> str:
    s = trace.stats
    return (f"**{s.rounds}** rounds · **{s.new_tokens}** tokens · acceptance **{s.acceptance_rate:.0%}** · "
            f"**{s.mean_tokens_per_round:.2f}** tokens per round · **{s.target_forward_passes}** target passes "
            f"vs **{s.autoregressive_forward_passes}** autoregressive · stopped by {s.stop_reason.replace('_', ' ')} · "
            f"{trace.models['device']} {trace.models['dtype']}")


def _go_to(index: int) -> None:
    st.session_state.round = index


def round_navigation(count: int) -> int:
    """First / previous / next / last buttons, a round slider and autoplay; returns the 1-based round."""
    ss = st.session_state
    ss.round = max(1, min(int(ss.get("round", 1)), count))
    cols = st.columns([1, 1, 1, 1, 2, 6])
    cols[0].button("|◀ First", on_click=_go_to, args=(1,), disabled=ss.round == 1, key="nav_first", width="stretch")
    cols[1].button("◀ Prev", on_click=_go_to, args=(ss.round - 1,), disabled=ss.round == 1, key="nav_prev", width="stretch")
    cols[2].button("Next ▶", on_click=_go_to, args=(ss.round + 1,), disabled=ss.round == count, key="nav_next", width="stretch")
    cols[3].button("Last ▶|", on_click=_go_to, args=(count,), disabled=ss.round == count, key="nav_last", width="stretch")
    cols[4].toggle("Autoplay", key="autoplay", disabled=count == 1)
    if count > 1:
        cols[5].slider("Round", 1, count, key="round", label_visibility="collapsed")
    return ss.round


def autoplay_step(count: int, seconds: float = 1.5) -> None:
    """Advance one round per ``seconds`` while autoplay is on; stop at the last round."""
    ss = st.session_state
    if not ss.get("autoplay"):
        return
    now = time.monotonic()
    if now - ss.get("autoplay_at", 0.0) >= seconds * 0.9:
        ss.autoplay_at = now
        if ss.round < count:
            ss.round += 1
        else:
            ss.autoplay = False


def show_tree_round(rnd, key: str) -> None:
    """A tree round as seed 002 draws it: iterations, bars per node, the rejection walk, the tree."""
    from .. import figures, render  # figures import plotly; kept local to the views that draw them

    tree = rnd.tree
    st.markdown("##### Draft iterations (one draft forward pass each)")
    st.markdown(render.tree_bands_html(rnd), unsafe_allow_html=True)
    extra = rnd.correction or rnd.bonus
    kind = "correction" if rnd.correction else "bonus"
    st.markdown("##### The whole draft tree (accepted path in green)")
    st.plotly_chart(figures.tree_figure(tree, extra.text if extra else None, kind if extra else None), width="stretch",
                    key=f"{key}_tree")
    st.markdown(f"##### ONE target pass scored all {len(tree.nodes) - 1} drafted nodes and the root")
    expanded = [n for n in tree.nodes if n.draft_top is not None]
    for start in range(0, len(expanded), 4):
        cols = st.columns(4)
        for col, node in zip(cols, expanded[start : start + 4]):
            children = {tree.nodes[c].token_id: render.COLORS["draft"][0] for c in range(len(tree.nodes)) if tree.nodes[c].parent == node.index}
            col.plotly_chart(figures.distribution_bars(node.draft_top, children, f"draft q after '{render.display_text(node.text)}'",
                                                       "#d1c4e9"), width="stretch", key=f"{key}_q_{node.index}")
            col.plotly_chart(figures.distribution_bars(node.target_top, children, f"target p after '{render.display_text(node.text)}'",
                                                       "#b0bec5"), width="stretch", key=f"{key}_p_{node.index}")
    st.markdown("##### Recursive rejection sampling")
    st.markdown(render.rrs_flow_html(rnd), unsafe_allow_html=True)
    residuals = [(pos, top) for pos, top in zip(rnd.draft, tree.residual_tops) if top is not None]
    if residuals:
        cols = st.columns(min(4, len(residuals)))
        for i, (pos, top) in enumerate(residuals):
            cols[i % len(cols)].plotly_chart(
                figures.distribution_bars(top, {}, f"residual after rejecting '{render.display_text(pos.text)}'",
                                          render.COLORS["correction"][0]), width="stretch", key=f"{key}_res_{i}")
    st.markdown(render.output_chain_html(rnd), unsafe_allow_html=True)
