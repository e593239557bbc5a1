"""The round view: every decoding round drawn as the papers draw it (SpecDec's draft-then-verify rows, Xia et al.
2023; RSD's trees, Jeon et al. 2024), with p-vs-q bars,
stepped in the browser (the lesson player in its step view: no server round trip per step)."""

import streamlit as st

from specviz import ui
from specviz.presentation import render, tables
from specviz.server_reports.export import drafting_run
from specviz.ui.engine_numbers import export_downloads

linked_round = ui.linked_round()  # read before the sidebar rewrites the URL
config, prompt, defaults = ui.shared_controls()
st.title("Speculative decoding, round by round")
st.caption(
    "Convention (Leviathan et al. 2023): **target p** is the large model whose output is preserved, "
    "**draft q** the cheap proposer. Each round drafts γ tokens, the target scores all of them in ONE "
    "forward pass, a prefix is accepted, and the target adds a correction (after a rejection) or a bonus token. "
    "Step with the buttons, the slider, ← / → / Home / End, or space for autoplay: every round is already in "
    "the page."
)
trace = ui.get_trace(config, prompt) if config else None
ui.hold_for_quiz(trace, config, prompt, defaults)  # a student's quiz comes first
if trace is not None and not trace.rounds:
    st.info("Nothing was generated (the model ended at once).")
elif config is not None and trace is not None:
    st.markdown(ui.summary_line(trace))
    ui.show_race_figure(config, prompt)
    if (fastest := ui.fastest_note(config, prompt)) is not None:
        st.caption(fastest)
    player = ui.show_player(trace, config, prompt, defaults, linked_round)
    st.markdown("##### Output (colour: how each token was produced; underline alternates per round)")
    st.markdown(render.CSS + render.output_html(trace), unsafe_allow_html=True)
    left, middle, right = st.columns(3)
    # built when clicked, not for every session that opens the link
    shown = trace  # bound here: the callbacks do not see the global's narrowing to a Trace
    left.download_button(
        "Download trace (JSON)",
        lambda: shown.to_json(indent=1),
        "specviz-trace.json",
        "application/json",
        on_click="ignore",
    )
    middle.download_button(
        "Download tokens (CSV)",
        lambda: tables.token_table(shown).to_csv(index=False),
        "specviz-tokens.csv",
        "text/csv",
        on_click="ignore",
    )
    right.download_button(
        "Download the lesson (HTML)",
        lambda: player,
        "specviz-lesson.html",
        "text/html",
        on_click="ignore",
    )
    right.caption("One file that opens offline: no server needed.")
    st.caption(
        "What vLLM would report for this run (its metric names; the page *Your engine's numbers* reads them back):"
    )
    export_downloads(drafting_run(trace), "trace")
