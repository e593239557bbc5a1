"""Reusable views: data in, elements out (the trace's summary line, the round a link names)."""

from __future__ import annotations

import streamlit as st

from specviz.config import DecodeConfig
from specviz.drafters.registry import rule_entry
from specviz.engine.trace import Trace
from specviz.models.machine import cpu_matrix_units
from specviz.presentation.player import lesson_page, opened_at
from specviz.ui.controls import write_url
from specviz.ui.work import shared_work


def summary_line(trace: Trace) -> str:
    s = trace.stats
    return (f"**{s.rounds}** rounds · **{s.new_tokens}** tokens · "
            f"**{s.accepted_tokens}/{s.drafted_tokens}** drafted tokens accepted · "
            f"**{s.mean_tokens_per_round:.2f}** tokens per round · **{s.target_forward_passes}** target passes "
            f"vs **{s.autoregressive_forward_passes}** autoregressive · stopped by {s.stop_reason.replace('_', ' ')} · "
            f"{trace.models['device']} {trace.models['dtype']}"
            + ("" if rule_entry(trace.config.rule).lossless else
               " · **lossy rule**: the output may differ from the target's own"))


def precision_caption(config: DecodeConfig) -> None:
    """Under a speed page's title: the precision its timings are taken in and what this machine's kernels make of it."""
    units = f" · {cpu_matrix_units()}" if config.device != "cuda" else ""
    st.caption(f"Timed in **{config.dtype}** (the sidebar's precision; probabilities are float32 either way){units}.")


def linked_round() -> int:
    """The 1-based round the page's link names: the lesson player writes it into the address bar as it
    steps, so a copied link reopens that round (the server itself does not see those steps; the player
    remembers them for its own reruns). No or a bad value means round 1 (a bad one is reported once, with
    the link's other values, by the sidebar). Read it before ``shared_controls`` rewrites the URL; it is
    kept in the session so the other pages' links carry it."""
    try:
        shown = max(1, int(st.query_params.get("round", "1")))
    except ValueError:
        shown = 1
    st.session_state.round = shown
    return shown


def shared_lesson_page(trace: Trace) -> str:
    """The trace's lesson page, built once per process and kept with the results (every session of a link shows
    the same page; only the round and view it opens on differ)."""
    work, key = shared_work(), ("lesson-page", repr(trace.config), tuple(trace.prompt_ids))
    page = work.store.get(key)
    if page is None:
        page = lesson_page(trace)
        work.store.put(key, page)
    return page


def show_player(trace: Trace, config: DecodeConfig, prompt: str, defaults: DecodeConfig, linked: int,
                view: str = "step") -> str:
    """The lesson player for a computed trace, opened on the linked round (clipped to the trace) with the
    page's link (``config``: the sidebar's, which may differ from the trace's own) on it; every round is in
    the page, so stepping needs no server. Returns the player's HTML, which is also the lesson download."""
    shown = min(linked, len(trace.rounds))
    write_url(config, prompt, shown, defaults, extra={"view": view} if view != "step" else None)
    page = opened_at(shared_lesson_page(trace), view, shown)
    st.iframe(page, height="content")  # streamlit sizes the frame to the player's content
    return page
