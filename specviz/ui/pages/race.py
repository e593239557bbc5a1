"""The race (live): the target alone and speculative decoding writing the same answer on one clock."""

from urllib.parse import urlencode

import streamlit as st

from specviz import ui
from specviz.analysis.claims import speedup_words
from specviz.analysis.race import lane_choices
from specviz.presentation.race import race_page
from specviz.registry.drafters import drafter_entry
from specviz.registry.rules import rule_for
from specviz.serving.urlstate import STUDENT
from specviz.ui.engine_numbers import export_downloads
from specviz.ui.presets import PAIR_PRESETS, QWEN_CODER_PAIR, availability_mark
from specviz.ui.state import page_key

MEASURE = "Measure the race on this server"  # the server's run; the browser's replay has its own button
SAMPLED_LANES = (
    "Under sampling the two lanes draw different random numbers (the target alone samples each token; speculative "
    "sampling draws a draft, a uniform per check and a correction), so **they write different texts**: that is "
    "expected, and it is the same model. What stays equal is the distribution each token is drawn from "
    "(Leviathan et al. 2023, Thm. 3.5), which the Losslessness lab tests; greedy decoding writes the same text."
)

config, prompt, defaults = ui.shared_controls()
st.title("The race: the target alone against speculative decoding")
st.caption(
    "Autoregressive decoding beside draft-and-verify, both run for real on this server, on the same prompt, settings "
    "and kernels, one after the other (never both at once on shared cores), every token's commit time recorded: "
    f"**{MEASURE}** does that once for the class. Your browser then replays those times on one clock (**Replay the "
    "race**, or space): the target alone writes a token per step, speculative decoding lands a verified block at once "
    "(a rejected draft struck for a moment, the target's correction after it). The speedup at the finish is the ratio "
    "of the two measured wall times, and both clocks hold the same recording work: each lane records every token "
    "its target emits alike (its text, probability and top tokens), and speculative decoding also its drafts."
)
ui.hold_students_quiz(config, prompt, defaults)  # a student's quiz comes first: the race strikes its rejected drafts
widest = PAIR_PRESETS[QWEN_CODER_PAIR]  # the published pair: the race is won by the widest margin there
student = {} if ui.may_start() else {STUDENT: "1"}  # a student's link stays a student's
if config is not None and widest and config.target != widest[0] and availability_mark(*widest) == "✓":
    st.info(
        f"The {QWEN_CODER_PAIR} pair is fetched on this server: a 1.5B target on a CPU is where speculative decoding "
        f"wins by the widest margin. [Race it](race?{urlencode({'target': widest[0], 'draft': widest[1], **student})})"
    )
if config is not None:
    ui.precision_caption(config)
    fastest_place = st.empty()  # this machine's fastest, said against the race below once it is known
    choices = lane_choices(config)
    extra = tuple(
        st.multiselect(
            "More lanes (other drafters against the same target)",
            choices,
            format_func=lambda name: drafter_entry(name).label,
            key=page_key("race", "lanes"),
        )
    )
    for note in dict.fromkeys(drafter_entry(name).note for name in (config.drafter, *extra)):
        if note:
            st.caption(note)
    race, noisy = ui.raced(config, prompt, extra, MEASURE)
    if (fastest := ui.fastest_note(config, prompt)) is not None:
        fastest_place.caption(fastest)
    if rule_for(config).stochastic:
        st.info(SAMPLED_LANES)
    if race is None:
        if ui.may_start():  # a student's session said the race is not prepared yet
            st.info(f"Press **{MEASURE}**: the server measures both decoders once, and every student sees that race.")
    else:
        if noisy is not None:
            st.warning(
                f"The run of {noisy.measured_at.replace('T', ' ')} was noisy ({'; '.join(noisy.load)}); "
                f"the quiet race of {race.measured_at.replace('T', ' ')} is shown."
            )
        elif race.load:
            st.warning(f"Measured under load ({'; '.join(race.load)})." + ui.measure_again_hint())
        page = race_page(race)
        st.iframe(page, height="content")
        columns = st.columns(len(race.lanes))
        for column, lane in zip(columns, race.lanes):
            lost = race.speedup(lane) < 1  # slower than the target alone: a red arrow down, never a green "faster"
            column.metric(
                lane.name,
                f"{lane.total_ms / 1e3:.2f} s",
                delta=None if lane is race.lanes[0] else speedup_words(race.speedup(lane)),
                delta_color="inverse" if lost else "normal",
                delta_arrow="down" if lost else "auto",
                help=f"{len(lane.output_ids)} tokens, {len(lane.output_ids) / lane.total_ms * 1e3:.1f} tokens/s; "
                f"drafting {100 * lane.drafting_share:.0f}% of the time",
            )
        for number, (lane, said) in enumerate(zip(race.lanes[1:], race.agreements)):
            st.markdown(f"**{lane.name}**: {said}")
            if lane.drafting is not None:  # a race stored before lanes kept their drafting rounds has none
                st.caption("What vLLM would report for this lane (read back by *Your engine's numbers*):")
                export_downloads(lane.drafting, f"lane{number}")
        if rule_for(config).stochastic:
            st.page_link(
                "pages/losslessness.py",
                icon=":material/casino:",
                label="Sampling keeps the target's distribution, not its text: the Losslessness lab",
            )
        st.download_button(
            "Download the race (one HTML file, opens offline)",
            page,
            "specviz-race.html",
            "text/html",
            on_click="ignore",
        )
