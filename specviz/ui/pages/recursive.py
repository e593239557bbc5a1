"""Recursive Speculative Decoding (Jeon et al. 2024): draft trees, one-pass tree verification, recursive rejection."""

import streamlit as st

from specviz import ui
from specviz.analysis import tree_vs_chain
from specviz.registry.drafters import drafter_entry
from specviz.serving.works import Work

linked_round = ui.linked_round()  # read before the sidebar rewrites the URL
config, prompt, defaults = ui.shared_controls()
st.title("Recursive Speculative Decoding: a tree of drafts")
st.markdown(
    "Jeon et al. 2024. Each **draft iteration** expands the tree one level with one draft forward "
    "pass: RSD-C gives every node the same number of children, drawn **without replacement** from q "
    "(Gumbel-top-k); RSD-S keeps the best paths of a **stochastic beam search** under a node budget. The "
    "target then scores **every node in one forward pass** (a tree attention mask: each node sees the prefix "
    "and its ancestors, at position prefix + depth). **Recursive rejection sampling** walks down: sibling xᵢ "
    "is accepted with min(1, pᵢ(xᵢ)/qᵢ(xᵢ)); after a rejection pᵢ₊₁ = norm(max(0, pᵢ − qᵢ)) and qᵢ₊₁ is q "
    "without the rejected siblings; if every sibling fails the correction is drawn from the last residual. The "
    "output is distributed exactly as the target's. The sidebar's tree settings apply (drafter forced to "
    "*tree*); the drafts come from the pair's draft model, or from the layer-skip self-draft for the embedded "
    "model. With **EAGLE** chosen in the sidebar the tree is **EAGLE-2's dynamic tree** instead: the nodes "
    "where the product of the draft's confidences is highest are expanded and kept. Every round is in the "
    "page: step with the buttons, the slider or the arrow keys (a press decodes the tree's rounds where the "
    "sidebar's drafter is no tree)."
)
if config is not None:
    tree_config = drafter_entry(config.drafter).tree_config(config)
    own = tree_config == config  # the sidebar's drafter is a tree: this is the round's own trace
    trace = ui.get_trace(tree_config, prompt, button=None if own else "Decode with the tree")
    ui.hold_for_quiz(trace, config, prompt, defaults)  # a student's quiz comes first
    if trace is not None and trace.rounds:
        st.markdown(ui.summary_line(trace))
        ui.show_player(trace, config, prompt, defaults, linked_round)  # the link keeps the sidebar's config

        st.subheader("Against standard speculative decoding on the same prompt")
        st.markdown(
            "Same draft source and prompt: a chain with as many draft passes per round as the tree has levels, "
            "and a chain drafting as many tokens per round as the tree has nodes. A tree hedges its budget over "
            "alternatives where a chain of equal budget spends it on one guess; which pays depends on the draft's "
            "confidence and this machine's pass, as the comparison below measures."
        )
        table = ui.shared_result(Work("tree_vs_chain", tree_config, prompt), button="Run the comparison")
        if table is not None:
            st.markdown(tree_vs_chain.verdict(table))
            st.dataframe(tree_vs_chain.readable(table), hide_index=True, width="stretch")
            st.download_button(
                "Download comparison (CSV)",
                table.to_csv(index=False),
                "specviz-tree-vs-chain.csv",
                "text/csv",
                on_click="ignore",
            )
