"""Metrics and theory: what one trace says about acceptance, tokens per round and speed."""

import pandas as pd
import streamlit as st

from specviz import analysis, figures, ui

config, prompt, defaults = ui.shared_controls()
st.title("Metrics and theory")
st.caption("Convention: **target p**, **draft q** (Leviathan et al. 2023). The numbers below come from the trace of the "
           "sidebar's configuration, the same one the round view shows.")
trace = ui.get_trace(config, prompt) if config else None
if trace is not None and trace.rounds:
    check = analysis.theory_check(trace)
    cols = st.columns(4)
    cols[0].metric("α (mean Σ min(p, q))", f"{check.alpha:.3f}")
    cols[1].metric("tokens per round, measured", f"{check.measured_tokens_per_round:.2f}")
    cols[2].metric("(1 − α^(γ+1)) / (1 − α)", f"{check.expected_tokens_per_round:.2f}")
    cols[3].metric("target passes", check.target_passes, delta=f"{check.target_passes - check.autoregressive_passes} vs autoregressive",
                   delta_color="inverse")

    by_position = analysis.acceptance_by_position(trace)
    left, right = st.columns(2)
    left.plotly_chart(figures.acceptance_by_position_figure(by_position), width="stretch")
    left.markdown("The i-th drafted token is only checked when tokens 1..i−1 were accepted, so each bar is a rate among "
                  "the rounds that reached it. Under the i.i.d. model every bar equals α; a falling profile means the "
                  "draft drifts away from the target the further it guesses ahead.")
    per_round = analysis.tokens_per_round(trace)
    right.plotly_chart(figures.tokens_per_round_figure(per_round, check.measured_tokens_per_round,
                                                       check.expected_tokens_per_round), width="stretch")
    right.markdown("A round emits its accepted prefix plus one token from the target, so 1 to γ+1 tokens. With acceptance "
                   "rate α the expectation is **(1 − α^(γ+1)) / (1 − α)** (Leviathan et al. 2023, Eq. 1); α is "
                   "estimated as the mean over verified positions of Σₓ min(p(x), q(x)), the chance a fresh draft is accepted.")

    st.subheader("Wall-clock speedup, measured in this process")
    pair = ui.show_user_errors(lambda: ui.pair_for(config))
    timing = ui.remembered(ui.trace_key(config, prompt, "speedup"),
                           lambda on_progress: analysis.measured_speedup(trace, pair), "Autoregressive baseline") if pair else None
    if timing:
        spec_s, ar_s = timing
        cols = st.columns(3)
        cols[0].metric("speculative (with recording)", f"{spec_s:.2f} s")
        cols[1].metric("target alone, autoregressive", f"{ar_s:.2f} s")
        cols[2].metric("speedup", f"{ar_s / spec_s:.2f}×")
        st.markdown(f"Both runs decode {len(trace.output_ids)} tokens of the same prompt with the same target on "
                    f"{trace.models['device']}. The speedup is (1 − α^(γ+1)) / ((1 − α)(γc + 1)) in theory, where c is the "
                    "draft/target cost ratio: a draft that costs nearly as much as the target (a layer-skip draft that "
                    "skips few layers) cannot pay, however often it is accepted.")
    st.download_button("Download metrics (CSV)", pd.concat(
        [by_position.assign(table="acceptance_by_position"), per_round.assign(table="tokens_per_round")]).to_csv(index=False),
        "specviz-metrics.csv", "text/csv")
