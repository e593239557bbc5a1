"""The round view: every decoding round drawn as seed 000 / seed 001 draw it, with p-vs-q bars."""

import streamlit as st

from specviz import figures, render, tables, ui
from specviz.player import lesson_html

config, prompt, defaults = ui.shared_controls()
st.title("Speculative decoding, round by round")
st.caption("Convention (Leviathan et al. 2023): **target p** is the large model whose output is preserved, "
           "**draft q** the cheap proposer. Each round drafts γ tokens, the target scores all of them in ONE "
           "forward pass, a prefix is accepted, and the target adds a correction (after a rejection) or a bonus token.")
trace = ui.get_trace(config, prompt) if config else None
if trace is not None and not trace.rounds:
    st.info("Nothing was generated (the model ended at once).")
elif trace is not None:
    st.markdown(ui.summary_line(trace))
    st.markdown(render.legend_html(), unsafe_allow_html=True)

    @st.fragment(run_every=1.5 if st.session_state.get("autoplay") else None)
    def round_view() -> None:
        count = len(trace.rounds)
        ui.autoplay_step(count)
        shown = ui.round_navigation(count)
        ui.write_url(config, prompt, shown, defaults)
        rnd = trace.rounds[shown - 1]
        st.subheader(f"Round {shown} of {count}: {rnd.accepted_count} of {rnd.drafted_count} drafted tokens accepted, "
                     f"{len(rnd.emitted_ids)} emitted")
        if rnd.tree is not None:
            ui.show_tree_round(rnd, key=f"tree_{shown}")
            return
        st.markdown(render.round_rows_html(trace, rnd), unsafe_allow_html=True)
        st.caption(f"draft {rnd.draft_ms:.0f} ms ({rnd.draft_forward_passes} draft passes) · "
                   f"verify {rnd.verify_ms:.0f} ms (1 target pass over {rnd.target_positions} positions)")
        st.markdown("##### Target p vs draft q at each drafted position")
        charts = [figures.pq_bars(pos) for pos in rnd.draft]
        if rnd.correction:
            charts.append(figures.emitted_bars(rnd.correction, "correction"))
        if rnd.bonus:
            charts.append(figures.emitted_bars(rnd.bonus, "bonus"))
        for start in range(0, len(charts), 3):
            for col, (i, fig) in zip(st.columns(3), enumerate(charts[start : start + 3], start)):
                col.plotly_chart(fig, width="stretch", key=f"bars_{shown}_{i}")

    round_view()
    st.markdown("##### Output (colour: how each token was produced; underline alternates per round)")
    st.markdown(render.output_html(trace), unsafe_allow_html=True)
    left, middle, right = st.columns(3)
    left.download_button("Download trace (JSON)", trace.to_json(indent=1), "specviz-trace.json", "application/json")
    middle.download_button("Download tokens (CSV)", tables.token_table(trace).to_csv(index=False), "specviz-tokens.csv", "text/csv")
    right.download_button("Download the lesson (HTML, no server needed)", lesson_html(trace), "specviz-lesson.html", "text/html")
