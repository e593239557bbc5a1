"""Prepare a lecture: record the pages a lecture uses while rehearsing (or load a plan file), then compute every
costly result they show in the background, so nothing is slow in front of the class."""

import streamlit as st

from specviz import ui
from specviz.serving.lecture import PREPARATIONS, LecturePlan, prepare
from specviz.serving.pool import shared_work
from specviz.settings import ConfigError
from specviz.ui.recorder import keep_recorder_in_browser, own_recording, record_pages, teachers_recording

ui.shared_controls()  # the sidebar's settings are not read here: the recorded pages keep their own
st.title("Prepare a lecture")
st.markdown(
    "Rehearse the lecture with **recording** on: every page you open in this browser, by the sidebar or by a link, "
    "notes the computations it offers (its trace, its baseline, sweep, lab decodes or comparisons, pressed or not) "
    "with the settings it had; turning recording off keeps them. **Prepare** then computes all of them in the "
    "background into the server's shared store; during the lecture every press on those pages shows its result at "
    "once, for you and every student. Save the plan to prepare the same lecture on another day or server."
)
if not ui.may_start():  # a student's link prepares nothing: the lecture is the teacher's
    st.info("This is a student's link: preparing a lecture is for the teacher's own link.")
    st.stop()
recording = teachers_recording()
recording_on = recording is not None and recording.on  # the toggle shows the recording, whichever page started it
st.toggle("Record the pages I open", value=recording_on, on_change=record_pages, args=(not recording_on,))
keep_recorder_in_browser()
uploaded = st.file_uploader("Load a lecture plan (JSON)", type=["json"])
if uploaded is not None:
    try:
        loaded = LecturePlan.from_json(uploaded.getvalue().decode("utf-8", errors="replace"))
    except ConfigError as exc:
        st.error(str(exc))
    else:
        recording = own_recording()
        recording.replace(loaded)
        st.success(f"Loaded {len(loaded.works)} computations from {len(loaded.links)} links.")
plan = recording.plan() if recording is not None else LecturePlan((), ())
if not plan.works:
    st.info("No computation recorded yet: turn recording on and open the lecture's pages (with their settings).")
else:
    pool = shared_work()
    st.dataframe(
        [
            {
                "computation": w.label,
                "prompt": w.prompt[:40],
                "settings": f"{w.config.target} ← {w.config.draft or w.config.drafter}, {w.config.rule}, "
                f"γ = {w.config.gamma}, {w.config.dtype}",
                "stored": "✓" if pool.cached(w.first_key) is not None else "",
            }
            for w in plan.works
        ],
        hide_index=True,
        width="stretch",
    )
    left, middle, right = st.columns(3)
    if left.button(f"Prepare the lecture ({len(plan.works)} computations)", type="primary"):
        prepare(plan, pool)
    middle.download_button(
        "Save the lecture plan (JSON)", plan.to_json(), "specviz-lecture.json", "application/json", on_click="ignore"
    )
    if right.button("Clear the plan"):
        own_recording().replace(LecturePlan((), ()))
        st.rerun()
    if plan.links:
        with st.expander(f"The lecture's links ({len(plan.links)})"):
            for link in plan.links:
                st.code(link, language=None, wrap_lines=True)


@st.fragment(run_every=1.0)
def follow_preparation() -> None:
    """The server's latest preparation, redrawn every second until it ends."""
    if not PREPARATIONS:
        return
    preparation = PREPARATIONS[-1]
    left = preparation.remaining_s()
    if preparation.finished.is_set():
        st.success(f"Prepared: {preparation.done} of {preparation.total} computations are stored.")
    else:
        st.progress(
            preparation.done / max(1, preparation.total),
            text=f"Preparing: {preparation.done} of {preparation.total} done · now {preparation.running or '…'}"
            + (f" · about {left:.0f} s left" if left is not None else ""),
        )
    for failure in preparation.failed:
        st.error(failure)


follow_preparation()
