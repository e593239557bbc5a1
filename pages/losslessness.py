"""Losslessness lab: speculative sampling leaves the target's distribution unchanged; a broken rule does not."""

from collections import Counter

import streamlit as st

from specviz import analysis, figures, ui
from specviz.engine import prompt_ids_for

config, prompt, defaults = ui.shared_controls()
st.title("Losslessness lab")
st.markdown("Speculative sampling emits each token exactly as the target would sample it (Leviathan et al. 2023, Thm. 3.5): "
            "accept x ~ q with probability min(1, p(x)/q(x)), otherwise sample from norm(max(0, p − q)). Here the first "
            "tokens are sampled many times three ways: **speculative sampling**, **plain target sampling**, and a "
            "**broken rule** that resamples from p instead of the residual after a rejection. A chi-square test compares "
            "each with the target's exact probabilities (first token) and with plain sampling (every position). "
            f"Limits: at most {analysis.LAB_SAMPLES_MAX} samples and {analysis.LAB_TOKENS_MAX} tokens. "
            "The sidebar's temperature, top-k, top-p and drafter are used; the rule is always sampling.")
left, right = st.columns(2)
samples = left.slider("Samples per arm (N)", 20, analysis.LAB_SAMPLES_MAX, 100, step=10)
tokens = right.slider("Tokens per sample (M)", 1, analysis.LAB_TOKENS_MAX, 1)
if config is not None:
    lab_config = config.replace(rule="sample")
    key = ui.trace_key(lab_config, prompt, "lab", samples, tokens)
    if ui.result_store().get(key) is None and not st.button("Draw the samples", type="primary"):
        st.info("Press the button to sample (each sample runs a short speculative decode, a plain one and a broken one).")
        st.stop()

    def compute(on_progress):
        pair = ui.pair_for(lab_config)
        ids = prompt_ids_for(pair, lab_config, prompt, None)
        table = analysis.sample_first_tokens(lab_config, pair, ids, samples, tokens, on_progress)
        return table, analysis.first_token_probs(lab_config, pair, ids), pair.target.tokenizer

    result = ui.remembered(key, compute, "Sampling")
    if result is not None:
        table, probs, tokenizer = result
        first = table[table.position == 1]
        arms = {arm: first[first.arm == arm].token_id.tolist() for arm in analysis.ARMS}
        cols = st.columns(3)
        for col, (arm, ids) in zip(cols, arms.items()):
            p_value = analysis.goodness_of_fit(ids, probs)
            col.metric(f"{arm}: χ² p-value vs exact p", f"{p_value:.3g}",
                       delta="consistent" if p_value > 0.01 else "rejected at 1%", delta_color="normal" if p_value > 0.01 else "inverse")
        top = probs.topk(10)
        exact = {int(i): float(v) for v, i in zip(top.values, top.indices)}
        labels = {i: f"{tokenizer.decode([i])!r}" for i in exact}
        st.plotly_chart(figures.lab_histogram_figure({a: Counter(ids) for a, ids in arms.items()}, exact, labels, samples),
                        width="stretch")
        st.markdown("A p-value is the chance of a deviation at least this large if the sampler were exact. Speculative "
                    "and plain sampling should give p-values spread uniformly (rarely below 0.01); the broken rule's "
                    "p-value collapses once N is large enough to see its bias toward tokens the draft favours.")
        rows = []
        for position in range(1, tokens + 1):
            at = table[table.position == position]
            plain = at[at.arm == "target sampling"].token_id.tolist()
            rows.append({"position": position,
                         "speculative vs plain (χ² p)": analysis.two_sample_p(at[at.arm == "speculative sampling"].token_id.tolist(), plain),
                         "broken vs plain (χ² p)": analysis.two_sample_p(at[at.arm == "broken rule"].token_id.tolist(), plain)})
        st.dataframe(rows, hide_index=True)
        st.download_button("Download samples (CSV)", table.to_csv(index=False), "specviz-samples.csv", "text/csv")
