"""Losslessness lab: speculative sampling leaves the target's distribution unchanged; a broken rule does not."""

from collections import Counter

import streamlit as st

from specviz import ui
from specviz.analysis import lab
from specviz.analysis.common import BUTTON_BUDGET_S
from specviz.drafters.registry import drafter_entry
from specviz.models.profile import model_profile
from specviz.presentation import figures
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

    computed = ui.shared_result(Work("exact-lab", lab_config, prompt, (n,)))
    if computed is not None:
        result, tokenizer = computed
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
        f"most {lab.SEQUENCE_SAMPLES_MAX} per arm and {lab.SEQUENCE_TOKENS_MAX} tokens). Each position is "
        "compared with plain sampling by a two-sample χ² test."
    )
    lab_pair = ui.page_pair(lab_config)
    step_ms = model_profile(lab_pair.target).step_ms if lab_pair else 0.0
    left, right = st.columns(2)
    tokens = right.slider("Tokens per decode (M)", 2, lab.SEQUENCE_TOKENS_MAX, 2, key=page_key("lab", "tokens"))
    samples = left.slider(
        "Decodes per arm",
        lab.SEQUENCE_SAMPLES_MIN,
        lab.SEQUENCE_SAMPLES_MAX,
        lab.default_sequence_samples(tokens, step_ms) if step_ms else 100,
        step=10,
        key=page_key("lab", "samples"),
        help="more decodes give the tests more power; the default is what this machine decodes in about "
        f"{BUTTON_BUDGET_S:.0f} s",
    )
    table = ui.shared_result(
        Work("lab-sequences", lab_config, prompt, (samples, tokens)),
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
                    "speculative vs plain (χ² p)": lab.two_sample_p(
                        at[at.arm == "speculative sampling"].token_id.tolist(), plain
                    ),
                    "broken vs plain (χ² p)": lab.two_sample_p(at[at.arm == "broken rule"].token_id.tolist(), plain),
                }
            )
        st.dataframe(rows, hide_index=True)
        if computed is not None and computed[0] is not None:
            power = lab.chi_square_power(computed[0].position.target_probs, computed[0].laws["broken rule"], samples)
            st.markdown(
                f"**When the broken rule passes here**: with {samples} decodes per arm, a test of the first "
                f"position against p itself would catch the broken rule with probability **{power:.0%}** "
                f"(computed from its exact law above, against {computed[0].broken_power:.0%} at N = "
                f"{computed[0].n:,}); a two-sample test, as here, needs more. So a broken-rule p above 1% "
                "in this table means these samples were too few to see the difference, not that the rule is "
                "right: raise the decodes per arm, or read part 1, where N is large enough to tell."
            )
        st.download_button("Download samples (CSV)", table.to_csv(index=False), "specviz-samples.csv", "text/csv")
