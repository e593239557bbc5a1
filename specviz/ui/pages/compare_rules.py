"""Compare rules on the same draft: every registered rule (top-β + τ for β = 1..5), as the rule registry lists them."""

import streamlit as st

from specviz import ui
from specviz.analysis import rules
from specviz.presentation import comparison
from specviz.registry.rules import RULE_ENTRIES
from specviz.serving.works import Work
from specviz.ui.state import page_key

config, prompt, defaults = ui.shared_controls()
st.title("Compare verification rules on the same draft")
st.markdown(
    "One block of drafted tokens (taken from a round of the sidebar's trace; a tree round's leading branch, the first "
    "child at each level) is checked by every rule: "
    + "; ".join(f"**{entry.label}**: {entry.help}" for entry in RULE_ENTRIES)
    + ". Each rule stops at its first rejection (· = never checked)."
)
trace = ui.get_trace(config, prompt) if config else None
ui.hold_for_quiz(trace, config, prompt, defaults)  # a student's quiz comes first
rounds = [r for r in trace.rounds if r.draft] if trace else []
if trace is not None and not rounds:
    st.info("No round of this trace drafted any token (the n-gram drafter found no match); pick another drafter.")
elif config is not None and trace is not None and rounds:
    choice = st.select_slider("Round whose draft is compared", [r.index + 1 for r in rounds])
    rnd = trace.rounds[choice - 1]
    table = ui.shared_result(  # the target's pass over the draft, on a press: a page that opens computes its trace only
        Work("rules", config, prompt, (choice,)),
        button="Check this draft with every rule",
        button_key=page_key("rules", "check"),
        hint="Press to run the target's one pass over this round's draft and check it by every rule: every session of "
        "this link then shares the verdicts.",
    )
    if table is not None:
        st.plotly_chart(comparison.rules_grid_figure(table, rules.compared_draft(rnd).texts), width="stretch")
        st.download_button(
            "Download verdicts (CSV)", table.to_csv(index=False), "specviz-rules.csv", "text/csv", on_click="ignore"
        )

    st.subheader("Where the lossy settings depart from the target's own greedy text")
    st.markdown(
        "β = 1 is exactly greedy decoding. β > 1 trades fidelity for longer accepted runs: the whole output is "
        "decoded again for each β and compared token by token with the target's greedy output."
    )
    table = ui.shared_result(Work("departures", config, prompt), button="Decode with β = 1..5")
    if table is not None:
        st.markdown(rules.beta_effect(table))
        st.dataframe(rules.departures_table(table), hide_index=True, width="stretch")
        st.download_button(
            "Download departures (CSV)",
            table.to_csv(index=False),
            "specviz-departures.csv",
            "text/csv",
            on_click="ignore",
        )
