"""Losslessness lab: speculative sampling leaves the target's distribution unchanged; a broken rule does not."""

from collections import Counter

import streamlit as st

from specviz import ui
from specviz.analysis import lab, lab_sequences
from specviz.presentation import figures
from specviz.registry.drafters import drafter_entry
from specviz.serving.works import Work
from specviz.ui.state import page_key

config, prompt, defaults = ui.shared_controls()
st.title("Losslessness lab")
st.markdown(
    "Speculative sampling emits each token exactly as the target would sample it "
    "(Leviathan et al. 2023, Thm. 3.5): accept x ~ q with probability min(1, p(x)/q(x)), otherwise sample from "
    "norm(max(0, p − q)). Three arms, each with its own random stream: **speculative sampling**, **plain "
    "target sampling**, and a **broken rule** that resamples from p instead of the residual after a rejection. "
    "The sidebar's drafter, temperature, top-k and top-p are used; the rule is always sampling."
)
st.subheader("1 · The first drafted token: exact law, many samples")
st.markdown(
    "At a fixed context p and q are fixed, so each arm's law is exact: "
    "P(x) = min(p, q)(x) + (1 − Σ min(p, q)) c(x), where c is what a rejection resamples from (the residual: "
    "then P = p; the broken rule's p: then P leans toward the draft). The rule itself is run N times on that p "
    "and q, vectorised, with no model call per sample."
)
n = st.select_slider(
    "Samples per arm (N)", [1_000, 5_000, 20_000, 50_000, 100_000], value=20_000, key=page_key("lab", "n")
)
if config is not None:
    lab_config = lab.sampling(config)

    computed = ui.shared_result(  # sampled on a press, never on opening the page
        Work("exact-lab", lab_config, prompt, (n,)),
        button="Sample the first drafted token",
        hint="Press to draw N samples per arm at the first drafted position: every session of this link then shares "
        "them.",
    )
    if computed is not None:
        result, tokenizer, _ = computed
        if result is None:
            st.info(
                "This drafter proposes nothing at this prompt (no n-gram match), so there is no drafted token to test."
            )
        else:
            if drafter_entry(lab_config.drafter).requires_model_outputs:
                st.caption(
                    "A drafter on the target's states drafts from round 2, so this is the token after the "
                    f"prompt and the target's top token {tokenizer.decode(result.position.context[-1:])!r}."
                )
            cols = st.columns(4)
            for col, (arm, p_value) in zip(cols, result.p_values.items()):
                col.metric(
                    f"{arm}: p-value",
                    f"{p_value:.3g}",
                    help="χ² test of the counts against p",
                    delta="consistent" if p_value > 0.01 else "rejected at 1%",
                    delta_color="normal" if p_value > 0.01 else "inverse",
                )
            cols[3].metric(
                "power vs broken rule",
                f"{result.broken_power:.1%}",
                help="the chance this test rejects the broken rule at this N (1% level), from its exact law",
            )
            top = result.position.target_probs.topk(10)
            exact = {int(i): float(v) for v, i in zip(top.values, top.indices)}
            labels = {i: f"{tokenizer.decode([i])!r}" for i in exact}
            st.plotly_chart(
                figures.lab_histogram_figure(
                    {a: Counter(ids) for a, ids in result.samples.items()},
                    exact,
                    labels,
                    result.n,
                    result.laws["broken rule"],
                ),
                width="stretch",
            )
            st.markdown(
                "**What the test can show**: a rule whose law differs from p by more than sampling noise at "
                "this N (the power above says how likely that is for the broken rule). **What it cannot**: a "
                "p-value above 1% does not prove a rule exact, only that no difference this test can see at "
                "this N exists; it checks one position at one context, and rare tokens are pooled into one "
                "bin. Exactness for every context is what the theorem proves; the lab shows it at work, and "
                "shows a bug being caught."
            )

    st.subheader("2 · Later positions: real decoding")
    st.markdown(
        "From the second token on, the context depends on earlier draws, so each sample is a real decode (at "
        f"most {lab_sequences.SEQUENCE_SAMPLES_MAX} per arm and {lab_sequences.SEQUENCE_TOKENS_MAX} tokens; a tree "
        "drafter as its chain). Each position is compared with plain sampling by a two-sample χ² test. These decodes "
        f"draft **confidently** (the draft's logits at {lab_sequences.CONFIDENT_DRAFT:g} of the temperature): "
        "speculative sampling is exact for any q it draws from, and the broken rule's error is largest where the "
        "draft is sure of a token (after rejecting it, the broken rule draws it again from p), so a hundred or two "
        "decodes can catch what the draft as it is would hide for thousands."
    )
    power = lab_sequences.power_by_decodes(computed[2] if computed is not None else None)
    left, right = st.columns(2)
    tokens = right.slider(
        "Tokens per decode (M)", 2, lab_sequences.SEQUENCE_TOKENS_MAX, 2, key=page_key("lab", "tokens")
    )
    samples = left.slider(
        "Decodes per arm",
        lab_sequences.SEQUENCE_SAMPLES_MIN,
        lab_sequences.SEQUENCE_SAMPLES_MAX,
        lab_sequences.default_sequence_samples(power),
        step=10,
        key=page_key("lab", "samples"),
        help="more decodes give the tests more power; the default is the fewest that catch the broken rule at the "
        f"first position with probability {lab_sequences.POWER_TARGET:.0%} (computed below)",
    )
    if power is not None:
        caught = power(samples)
        short = (
            ""
            if caught >= lab_sequences.POWER_TARGET
            else " Short of the target here: the target is nearly certain at this prompt, so a broken correction "
            "changes little; part 1 tells them apart."
        )
        st.markdown(
            f"**Power, before you press**: with {samples} decodes per arm, the test at position 1 catches the broken "
            f"rule with probability **{caught:.0%}** (at the 1% level, from both laws there, exact).{short}"
        )
    # at its default the press runs as many decodes as the power target needs (None: the work reads that number from the
    # first position's exact laws), so a lecture prepared before part 1 was sampled holds the same result
    needed = samples == lab_sequences.default_sequence_samples(power)
    if needed and power is None:
        st.caption(
            "At the slider's default, the press decodes as many samples per arm as catch the broken rule at position 1 "
            f"with probability {lab_sequences.POWER_TARGET:.0%} (computed from the exact laws there, first)."
        )
    table = ui.shared_result(
        Work("lab-sequences", lab_config, prompt, (None if needed else samples, tokens)),
        button="Decode the samples",
        button_key=page_key("lab", "decode"),
    )
    if table is not None:
        rows = []
        for position in range(1, tokens + 1):
            at = table[table.position == position]
            plain = at[at.arm == "target sampling"].token_id.tolist()
            rows.append(
                {
                    "position": position,
                    "speculative vs plain (χ² p)": lab_sequences.two_sample_p(
                        at[at.arm == "speculative sampling"].token_id.tolist(), plain
                    ),
                    "broken vs plain (χ² p)": lab_sequences.two_sample_p(
                        at[at.arm == "broken rule"].token_id.tolist(), plain
                    ),
                }
            )
        st.dataframe(rows, hide_index=True)
        st.markdown(
            "**Reading the table**: a broken-rule p below 1% is the bug caught; one above it at a position means these "
            "samples were too few to see the difference there (the power above says how likely that was at position "
            "1), not that the rule is right. The speculative rule's p-values are spread evenly: below 1% about one "
            "time in a hundred."
        )
        st.download_button(
            "Download samples (CSV)", table.to_csv(index=False), "specviz-samples.csv", "text/csv", on_click="ignore"
        )
