"""What if: the sidebar's run beside a second one that changes γ, the temperature or the rule, on the same prompt."""

import streamlit as st

from specviz import ui
from specviz.analysis import whatif
from specviz.presentation import comparison, render
from specviz.registry.rules import RULES, rule_entry
from specviz.ui.state import page_key

config, prompt, defaults = ui.shared_controls()
st.title("What if? Two settings, one prompt")
st.markdown(
    "The first run is the sidebar's; choose what the second changes. Both decode the same prompt with the same "
    "models and seed, so every difference below comes from the setting you changed."
)
if config is not None:
    left, middle, right = st.columns(3)
    gamma = left.slider("Second run: block size γ", 1, 16, min(16, 2 * config.gamma), key=page_key("what_if", "gamma"))
    rule = right.radio(
        "Second run: rule",
        list(RULES),
        index=list(RULES).index(config.rule),
        horizontal=True,
        format_func=lambda name: RULES[name].label,
        key=page_key("what_if", "rule"),
    )
    temperature = middle.slider(
        "Second run: temperature",
        0.0,
        2.0,
        float(config.temperature),
        0.05,
        key=page_key("what_if", "temperature"),
        disabled="temperature" not in RULES[rule].fields,
        help="read by the sampling rule only",
    )
    second = config.replace(gamma=gamma, temperature=temperature, rule=rule)
    first_trace = ui.get_trace(config, prompt)
    ui.hold_for_quiz(first_trace, config, prompt, defaults)  # a student's quiz comes first
    second_trace = ui.get_trace(second, prompt, button="Decode the second run") if first_trace is not None else None
    if first_trace is not None and second_trace is not None:
        changed = whatif.changed_settings(first_trace, second_trace)
        st.markdown(
            "**Changed:** "
            + (
                ", ".join(f"{name} {a} → {b}" for name, (a, b) in changed.items())
                or "nothing yet: move a control above"
            )
        )
        columns = st.columns(2)
        for column, trace, name in zip(columns, (first_trace, second_trace), ("First run", "Second run")):
            column.markdown(
                f"**{name}** · γ = {trace.config.gamma} · {RULES[trace.config.rule].label}"
                + (
                    f" · T = {trace.config.temperature:g}"
                    if "temperature" in rule_entry(trace.config.rule).fields
                    else ""
                )
            )
            column.markdown(ui.summary_line(trace))
        diff = whatif.run_difference(first_trace, second_trace)
        st.subheader("The outputs")
        st.html(
            render.CSS + comparison.difference_html(diff)
        )  # as HTML: markdown would read an output's indented line as code
        st.subheader("Round by round")
        st.markdown(
            f"{diff.rounds[0]} rounds against {diff.rounds[1]}; {diff.tokens_per_round[0]:.2f} against "
            f"{diff.tokens_per_round[1]:.2f} tokens per round."
        )
        st.bar_chart(
            diff.per_round.set_index("round"),
            color=list(comparison.RUN_COLORS),
            height=220,
            x_label="round",
            y_label="tokens emitted",
            stack=False,
        )
        st.subheader("Against the theory")
        traces = (first_trace, second_trace)
        st.plotly_chart(
            comparison.theory_figure(
                [whatif.theory_curve(t) for t in traces],
                [whatif.measured_point(t) for t in traces],
                ["first run", "second run"],
            ),
            width="stretch",
        )
        st.markdown(
            "Each dotted curve is (1 − α^(γ+1)) / (1 − α) at that run's measured α (Leviathan et al. 2023, "
            "Eq. 1); the diamond is where the run itself landed, at the mean block its rounds really drafted "
            "(the last rounds draft fewer than γ when few tokens are left). A larger γ climbs its curve only "
            "while α is "
            "high; each drafted token also costs c of a target step, which the Metrics page predicts."
        )
