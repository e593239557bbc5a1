"""Parallel drafters (Stern et al. 2018; Xia et al. 2023; Li et al. 2024): Blockwise heads (shared attention)
versus a Spec-Drafter with [MASK] queries, and EAGLE
(one layer drafting on the target's own features)."""

from functools import partial

import pandas as pd
import streamlit as st

from specviz import limits, ui
from specviz.analysis import drafters
from specviz.drafters.modules import shipped_weights
from specviz.engine import prompt_ids_for
from specviz.limits import shipped_weights_fit
from specviz.presentation.drafter_figures import (
    acceptance_by_drafter_figure,
    confidence_calibration_figure,
    drafter_attention_figure,
)
from specviz.registry.drafters import chain_drafter, drafter_entry, state_drafters
from specviz.serving.works import Work
from specviz.ui.state import page_key

SUMMARY_COLUMNS = {
    "tokens_per_round": "tokens per round",
    "acceptance_rate": "acceptance rate",
    "draft_ms_per_round": "draft ms per round",
    "draft_passes_per_round": "draft passes per round",
    "tokens_per_s": "tokens / s",
    "speedup_vs_autoregressive": "× target alone (live)",
}

config, prompt, defaults = ui.shared_controls()
st.title("Drafting on the target's states: Blockwise heads, [MASK] queries, EAGLE")
ui.hold_students_quiz(config, prompt, defaults)  # a student's quiz comes first
left, right = st.columns(2)
left.markdown(
    "**Blockwise Decoding** (Stern et al. 2018). k small heads sit on ONE hidden state of the target, "
    "h[t], and share the target's frozen output embedding; head i predicts token t+1+i. Every head sees "
    "the prefix only through the target's own attention at t: **shared attention**."
)
right.markdown(
    "**Spec-Drafter** (SpecDec, Xia et al. 2023). k learned **[MASK] queries** are appended after the "
    "prefix; a small transformer block lets each query attend to the target's last states, to the pending "
    "token and to the other queries with **its own attention** (distinct attention), then predicts through "
    "the same frozen output embedding."
)
st.caption(
    "Both draft all k tokens in ONE small pass on states the verification pass already computed, and both "
    "plug into every verification rule (so greedy stays exact and sampling stays lossless). Their weights are "
    "shipped small safetensors files made by `python -m specviz train-drafter` (sizes and commands below)."
)
st.markdown(
    "**EAGLE** (Li et al. 2024), what vLLM, SGLang and TensorRT-LLM ship: ONE decoder layer of the target's "
    "shape reads the target's top feature f[t] and the embedding of the next token, predicts the next feature "
    "and drafts through the target's frozen output embedding; then it drafts on **its own predicted "
    "features**, one small pass per token (the recurrence the parallel heads lack). After each round the "
    "accepted tokens' features come exact from the verification pass. **EAGLE-2** grows a dynamic tree where "
    "the draft is confident, because its confidence tracks how often the target accepts (the last chart)."
)
if config is not None and not shipped_weights_fit(True, config.target, config.parallel_weights):
    st.info(
        "These drafters' shipped weights were trained on the embedded SmolLM2-135M target, so they cannot draft for "
        f"{config.target}: pick the embedded pair in the sidebar to compare them (or train weights for this target "
        "with `python -m specviz train-drafter` and `train-eagle`)."
    )
elif config is not None:
    pair = ui.page_pair(config)
    ids = ui.show_user_errors(partial(prompt_ids_for, pair, config, prompt, None)) if pair else None
    if pair is not None and ids:
        st.subheader("The real attention each drafter uses at the end of your prompt")
        cols = st.columns(2)
        drawn = [name for name in state_drafters() if drafter_entry(name).attention_title]
        for col, kind in zip(cols, drawn):
            weights = ui.show_user_errors(partial(drafters.drafter_attention, config, pair, ids, kind))
            if weights is not None:
                window = weights.shape[1] - 1 - weights.shape[0]
                title = drafter_entry(kind).attention_title
                col.plotly_chart(
                    drafter_attention_figure(weights, title, window), width="stretch", key=page_key("attention", kind)
                )
        files = [described for name in state_drafters() if (described := shipped_weights(name))]
        st.dataframe(pd.DataFrame(files), hide_index=True, width="stretch")

        st.subheader("Acceptance by position and draft cost, on the same prompts")
        kinds = [*state_drafters(), chain_drafter(False)] + ([chain_drafter(True)] if pair.draft else [])
        st.markdown(
            f"Each drafter decodes the same {drafters.COMPARE_PROMPTS_MAX} preset prompts (at most "
            f"{limits.SWEEP_TOKENS_MAX} new tokens each, fewer where this machine would take more than "
            f"{limits.BUTTON_BUDGET_S:.0f} s) with the sidebar's rule and γ; the target alone "
            "decodes them too, for the end-to-end speedup. Draft cost is per round that drafted: the parallel "
            "drafters make one small pass, EAGLE γ passes of one layer, the autoregressive drafts γ passes "
            "of a full (or nearly full) model."
        )
        presets = tuple(ui.PROMPT_PRESETS.values())
        result = ui.shared_result(
            Work("drafters", config, "|".join(presets), (tuple(kinds), presets)), button="Compare the drafters"
        )
        if result is not None:
            summary, by_position, calibration = result
            st.plotly_chart(acceptance_by_drafter_figure(by_position), width="stretch")
            st.dataframe(summary.round(2).rename(columns=SUMMARY_COLUMNS), hide_index=True, width="stretch")
            st.markdown(
                "**Confidence against acceptance** (EAGLE-2's key observation): each point is the drafted "
                "tokens whose draft probability q(x) fell in one tenth of [0, 1], placed at their mean q and "
                "the share the target accepted. Near the diagonal, q(x) estimates the chance of acceptance, "
                "so the product of q along a path estimates the chance the whole path is accepted: EAGLE-2 "
                "expands and keeps the tree's nodes where that product is highest."
            )
            st.plotly_chart(confidence_calibration_figure(calibration), width="stretch")
            st.download_button(
                "Download comparison (CSV)",
                pd.concat([summary.assign(table="summary"), by_position.assign(table="by_position")]).to_csv(
                    index=False
                ),
                "specviz-drafters.csv",
                "text/csv",
                on_click="ignore",
            )
