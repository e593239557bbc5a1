"""Metrics and theory: what one trace says about acceptance, tokens per round and speed."""

import pandas as pd
import streamlit as st

from specviz import ui
from specviz.analysis import metrics
from specviz.presentation import figures
from specviz.registry.rules import rule_entry
from specviz.serving.works import Work

config, prompt, defaults = ui.shared_controls()
st.title("Metrics and theory")
if config is not None:
    ui.precision_caption(config)
st.caption(
    "Convention: **target p**, **draft q** (Leviathan et al. 2023). The numbers below come from the trace of "
    "the sidebar's configuration, the same one the round view shows."
)
trace = ui.get_trace(config, prompt) if config else None
ui.hold_for_quiz(trace, config, prompt, defaults)  # a student's quiz comes first
if config is not None and trace is not None and trace.rounds:
    check = metrics.theory_check(trace)
    cols = st.columns(5)
    cols[0].metric(f"α ({config.rule})", f"{check.alpha:.3f}", help=rule_entry(config.rule).alpha)
    cols[1].metric(
        "tokens per round",
        f"{check.measured_tokens_per_round:.2f}",
        help="measured: new tokens over rounds in this trace",
    )
    cols[2].metric(
        "tokens/round, Eq. 1",
        f"{check.expected_tokens_per_round:.2f}",
        help=f"(1 − α^(k+1)) / (1 − α) at each round's realised block size k "
        f"(mean k = {check.mean_block:.2f}, configured γ = {config.gamma})",
    )
    cols[3].metric(
        "acceptance length",
        f"{check.mean_acceptance_length:.2f}",
        help="vLLM's mean acceptance length: 1 + accepted drafted tokens per drafting round",
    )
    cols[4].metric(
        "target passes",
        check.target_passes,
        delta=f"{check.target_passes - check.autoregressive_passes} vs autoregressive",
        delta_color="inverse",
    )
    st.caption(
        f"{rule_entry(config.rule).alpha}. The theory uses it with each round's realised block size: rounds "
        "near max new tokens are clipped, trees draft their depth, drafters on the target's states nothing in "
        f"round 1. {metrics.two_counts_reconciled(trace)}"
    )

    by_position = metrics.acceptance_by_position(trace)
    left, right = st.columns(2)
    left.plotly_chart(figures.acceptance_by_position_figure(by_position), width="stretch")
    left.markdown(
        "The i-th drafted token is only checked when tokens 1..i−1 were accepted, so each bar is a rate "
        "among the rounds that reached it. Under the i.i.d. model every bar equals α; a falling profile "
        "means the draft drifts away from the target the further it guesses ahead."
    )
    per_round = metrics.tokens_per_round(trace)
    right.plotly_chart(
        figures.tokens_per_round_figure(per_round, check.measured_tokens_per_round, check.expected_tokens_per_round),
        width="stretch",
    )
    right.markdown(
        "A round emits its accepted prefix plus one token from the target, so 1 to k+1 tokens for a block "
        "of k. With acceptance rate α the expectation is **(1 − α^(k+1)) / (1 − α)** "
        "(Leviathan et al. 2023, Eq. 1), averaged here over the rounds' realised k. "
        f"{rule_entry(config.rule).alpha}."
    )
    lengths = metrics.accepted_lengths(trace)
    left, right = st.columns(2)
    left.plotly_chart(figures.accepted_lengths_figure(lengths), width="stretch")
    left.markdown(
        "This request's accepted drafted tokens per drafting round (0: the first guess was already wrong). "
        "vLLM reports the same as the mean acceptance length, 1 + the mean of this histogram."
    )
    right.dataframe(
        by_position,
        hide_index=True,
        width="stretch",
        column_config={
            "acceptance_rate": st.column_config.NumberColumn(
                "conditional",
                help="conditional acceptance: accepted among the rounds whose drafts 1..i−1 were all "
                "accepted (the bars above)",
                format="%.3f",
            ),
            "accepted_per_draft": st.column_config.NumberColumn(
                "per round (vLLM)", help="accepted per drafting round that drafted at least i tokens", format="%.3f"
            ),
        },
    )

    st.subheader("Speed: the configuration's one figure, and the checks beside it")
    ui.race_link()
    st.page_link(
        "pages/parallel_verification.py",
        icon=":material/speed:",
        label="Why it pays on this machine: the measured roofline (Parallel verification)",
    )
    pair = ui.page_pair(config)
    speed = ui.show_headline(config, prompt) if pair is not None else None
    if pair is not None:
        if speed is not None:  # predicted from this machine's quiet profile only
            c, predicted = speed
            st.markdown(ui.prediction_story_text(config, pair, predicted, check.alpha, c))
        timing, noisy = ui.measured_again(
            Work("speedup", config, prompt),
            lambda check: bool(metrics.load_signs(check)),
            start="Time both decoders now, in alternating pairs",
        )
        if timing:
            speed_cols = st.columns(6)
            speed_cols[0].metric("speculative, timed", f"{timing.speculative_s:.2f} s")
            speed_cols[1].metric("target alone, timed", f"{timing.autoregressive_s:.2f} s")
            speed_cols[2].metric(
                "timed ratio",
                f"{timing.measured:.2f}×",
                help="the target alone's median time over the speculative median time, timed now in alternating "
                "pairs: a check of the theory under this server's load, not the configuration's speedup (the race's)",
            )
            speed_cols[3].metric(
                "cost ratio c",
                f"{timing.cost_ratio:.3f}",
                help="draft / target cost of a token, from this machine's profile: the drafter's quiet "
                "one-token step over the target's",
            )
            speed_cols[4].metric(
                "theory, v = 1",
                f"{timing.expected:.2f}×",
                help="Σ_r (1 − α^(k_r+1)) / (1 − α) over Σ_r (k_r c + 1): Leviathan et al. Thm. 3.8 at the realised "
                "blocks, this α and c",
            )
            speed_cols[5].metric(
                "theory, v(k) here",
                f"{timing.expected_verify_measured:.2f}×",
                help="Σ_r (1 − α^(k_r+1)) / (1 − α) over Σ_r (k_r c + v(k_r)), v(k) = the target's pass over "
                "k + 1 tokens in one-token steps, from this machine's profile",
            )
            st.markdown(
                f"The timed check decodes {len(trace.output_ids)} tokens of the same prompt with the same target on "
                f"{trace.models['device']}, in three back-to-back pairs (medians); each pair's own ratio: "
                f"{', '.join(f'{r:.2f}×' for r in timing.pair_speedups)}. It checks the theory under whatever load "
                "this server has now; it is not the configuration's speedup (the race measures that). In theory the "
                "speedup is (1 − α^(k+1)) / ((1 − α)(kc + 1)) for blocks of k, where c is the draft/target cost "
                "ratio: a draft that costs nearly as much as the target (a layer-skip draft that skips few layers) "
                "cannot pay, however often it is accepted. Thm. 3.8 predicts the target's pass over k + 1 tokens as "
                "one step (v = 1); *v(k) here* predicts it at the measured v(k)."
            )
            signs = metrics.load_signs(timing)
            if signs:
                st.warning(
                    "This timing measured the server's load, not speculation: "
                    + "; ".join(signs)
                    + "."
                    + ui.measure_again_hint()
                )
            elif noisy is not None:
                st.warning(
                    "The latest timing was noisy (" + "; ".join(metrics.load_signs(noisy)) + "): the "
                    "quiet one before it is shown."
                )
    st.download_button(
        "Download metrics (CSV)",
        pd.concat(
            [
                by_position.assign(table="acceptance_by_position"),
                per_round.assign(table="tokens_per_round"),
                lengths.assign(table="accepted_lengths"),
            ]
        ).to_csv(index=False),
        "specviz-metrics.csv",
        "text/csv",
        on_click="ignore",
    )
