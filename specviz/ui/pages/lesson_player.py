"""The lesson player: the whole trace stepped in the browser, with a presenter view and a quiz."""

import streamlit as st

from specviz import ui
from specviz.presentation.player import VIEWS
from specviz.server_reports.export import drafting_run
from specviz.ui.engine_numbers import export_downloads

requested_view = st.query_params.get("view", "step")  # read before the sidebar rewrites the URL
linked_round = ui.linked_round()
config, prompt, defaults = ui.shared_controls()
st.title("Lesson player")  # the present view gives the screen to the round: ui.show_player hides the rest
st.caption(
    "Every round of the trace is sent to the page once and drawn there: First/Prev/Next/Last, the slider, "
    "the arrow keys, Home/End and space (autoplay) need no server round trip. The player's View buttons switch "
    "views: **Present** shows one round in large type, fitted to the screen, with the rule's formula and each "
    "acceptance test spelled out; **Quiz** asks for each drafted token whether the target will accept it, reject it "
    "or never check it before revealing the verdicts, and keeps a score. A teacher's link with `view=quiz` or "
    "`view=present` (on any page) opens straight into that view; a quiz link keeps its tab in the quiz until every "
    "question is answered. **Race** replays the race of these settings once the Race page measured one."
)
# another value is said with the link's other messages; the player's own buttons switch views and write the view into
# this page's link
view = requested_view if requested_view in VIEWS else "step"
if view == "present":  # a projector shows the round, not the settings (the player's Present button folds them)
    st.html("<style>[data-testid='stSidebar'], [data-testid='stSidebarCollapsedControl'] {display: none;}</style>")
trace = ui.get_trace(config, prompt) if config else None
if trace is not None and not trace.rounds:
    st.info("Nothing was generated (the model ended at once).")
elif config is not None and trace is not None:
    page = ui.show_player(trace, config, prompt, defaults, linked_round, view)
    if ui.answered_rounds(trace) < len(trace.rounds):  # a student's quiz: its files would hold every verdict
        ui.stop_page()
    st.download_button(
        "Download this lesson (one HTML file, opens with no server)",
        lambda: page,
        "specviz-lesson.html",
        "text/html",
        on_click="ignore",
    )
    export_downloads(drafting_run(trace), "trace")
