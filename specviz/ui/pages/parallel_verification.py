"""Parallel verification, measured: the round's one target pass over gamma + 1 tokens vs gamma + 1 one-token passes."""

import pandas as pd
import streamlit as st

from specviz import limits, ui
from specviz.analysis import metrics, timing
from specviz.presentation.verification_figures import mask_figure, parallel_arrows_figure, timeline_figure
from specviz.serving.works import Work

config, prompt, defaults = ui.shared_controls()
st.title("Parallel verification, measured")
if config is not None:
    ui.precision_caption(config)
st.markdown(
    "The target checks all γ drafted tokens in ONE forward pass (Leviathan et al. 2023; Chen et al. 2023) "
    "over γ + 1 tokens, the last accepted token and the γ drafts: with a causal mask, position i only sees the "
    "prefix and drafted tokens before it, so one pass yields p at every drafted position and for the "
    "bonus token at once. Autoregressive decoding needs γ + 1 passes for the same p's. The times below are "
    "measured live on this device, when you press the button."
)
trace = ui.get_trace(config, prompt) if config else None
ui.hold_for_quiz(trace, config, prompt, defaults)  # a student's quiz comes first
if config is not None and trace is not None and trace.output_ids:
    assert trace.stats is not None, "a decoded trace has its stats"
    repeats = st.slider("Timing repeats (median)", 1, limits.TIMING_REPEATS_MAX, 5)
    measured, noisy = ui.measured_again(
        Work("timing", config, prompt, (repeats,)),
        timing.timed_under_load,
        start="Time the passes now",
    )
    if measured is not None:
        cols = st.columns(3)
        cols[0].metric(f"1 forward over {measured['tokens']} tokens", f"{measured['parallel_ms']:.1f} ms")
        cols[1].metric(f"{measured['tokens']} one-token forwards", f"{measured['sequential_ms']:.1f} ms")
        cols[2].metric("sequential / parallel", f"{measured['sequential_ms'] / measured['parallel_ms']:.2f}×")
        if timing.timed_under_load(measured):
            st.warning(
                f"These timings measured the server's load: {'; '.join(timing.load_words(measured))}."
                + ui.measure_again_hint()
            )
        elif noisy is not None:
            st.warning("The latest timing was noisy by other work on the server: the quiet one before it is shown.")
        arrows = parallel_arrows_figure(measured["tokens"], measured["parallel_ms"], measured["sequential_ms"])
        st.plotly_chart(arrows, width="stretch")
        st.markdown(
            "Where decoding is memory-bound, one pass over γ + 1 tokens costs about as much as one token; "
            "whether it is here, and up to which γ, the roofline below measures."
        )
        st.download_button(
            "Download timings (CSV)",
            pd.DataFrame([measured]).to_csv(index=False),
            "specviz-timing.csv",
            "text/csv",
            on_click="ignore",
        )

    st.subheader("This machine's roofline: why verification is (nearly) free here, or not", anchor="roofline")
    ui.roofline_panel(config, trace.stats.alpha_estimate)

    st.subheader("The attention mask of the verification pass")
    prefix_len = len(trace.prompt_ids)
    st.plotly_chart(mask_figure(timing.verification_mask(prefix_len, trace.config.gamma), prefix_len), width="stretch")
    st.markdown(
        "Rows are the γ+1 query positions of the pass (the last prefix token and the γ drafted tokens); the "
        "row for draft i yields p for draft i+1, the last row the bonus token's p. Filled cells are the keys "
        "each may attend to: the whole prefix (from the KV cache) and the drafted tokens before it."
    )

    st.subheader("Target calls for the same output")
    pair = ui.page_pair(config)
    if pair is not None:
        target, draft = ui.profiles_here(config, pair)  # measured before, never on opening
        draft_ms, verify_ms = metrics.profile_timeline(trace, target, draft)
        speed = ui.show_headline(config, prompt)
        if (fastest := ui.fastest_note(config, prompt)) is not None:
            st.caption(fastest)
        if speed is not None:
            c, predicted = speed
            st.markdown(ui.prediction_story_text(config, pair, predicted, trace.stats.alpha_estimate, c))
        st.plotly_chart(
            timeline_figure(draft_ms, verify_ms, [len(r.emitted_ids) for r in trace.rounds], target.step_ms),
            width="stretch",
        )
        st.markdown(
            f"Autoregressive decoding calls the target once per token: **{trace.stats.new_tokens}** calls of "
            f"{target.step_ms:.1f} ms. Draft-then-verify called it **{trace.stats.target_forward_passes}** "
            "times (one per round; the number in each verify block is the tokens that round emitted); the "
            "purple blocks are the draft's work. Every block is predicted by this machine's profile (the "
            "target's pass over k + 1 tokens, the drafter's step), the same figures on every page, not the "
            "times of whatever load the trace was computed under."
        )
