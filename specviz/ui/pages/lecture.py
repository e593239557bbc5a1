"""Prepare a lecture: record the pages a lecture uses while rehearsing (or load a plan file), then compute every
costly result they show in the background, so nothing is slow in front of the class."""

import time

import streamlit as st

from specviz import ui
from specviz.serving.lecture import PREPARATIONS, LecturePlan, Recording, prepare, stored_keys
from specviz.serving.pool import shared_work
from specviz.serving.sharedwork import SharedWork
from specviz.settings import ConfigError
from specviz.ui.offers import estimated
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
    ui.stop_page()
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


def time_left(seconds: float | None) -> str:
    """The progress line's tail: the time left, in minutes past a minute and a half ("" while unknown)."""
    if seconds is None:
        return ""
    return f" · about {seconds:.0f} s left" if seconds < 90 else f" · about {seconds / 60:.0f} min left"


def prepare_lecture(plan: LecturePlan, pool: SharedWork, recording: Recording | None) -> None:
    """The Prepare button's callback, run before the page: the page it draws shows the recording stopped and the
    preparation begun. Each work is predicted here (:func:`~specviz.ui.offers.estimated`) as its pair loads."""
    prepare(plan, pool, estimated, recording)


@st.fragment(run_every=1.0)
def follow_preparation(plan: LecturePlan, pool: SharedWork) -> None:
    """The plan's table and the server's latest preparation, redrawn every second from one reading of the store: the
    progress counts the results stored (those stored before it began too), and the table is current when it ends
    (whether it has ended is read before the store: once it has, every result it stored is in that reading)."""
    preparation = PREPARATIONS[-1] if PREPARATIONS else None
    finished = preparation is not None and preparation.finished.is_set()
    stored = stored_keys(pool, plan.works + (preparation.plan.works if preparation is not None else ()))
    if plan.works:
        st.dataframe(
            [
                {
                    "computation": w.label,
                    "prompt": w.prompt[:40],
                    "settings": f"{w.config.target} ← {w.config.draft or w.config.drafter}, {w.config.rule}, "
                    f"γ = {w.config.gamma}, {w.config.dtype}",
                    "stored": "✓" if w.first_key in stored else "",
                }
                for w in plan.works
            ],
            hide_index=True,
            width="stretch",
            height="content",  # every row drawn: the whole plan at a glance
        )
    if preparation is None:
        return
    done, total = preparation.progress(stored), preparation.total
    if finished:
        st.success(f"Prepared: {done} of {total} computations are stored.")
    else:
        left = preparation.remaining_s(stored, time.monotonic())
        st.progress(
            done / max(1, total),
            text=f"Preparing: {done} of {total} stored · now {preparation.running or '…'}{time_left(left)}",
        )
    if preparation.stopped is not None and not preparation.stopped.on:
        st.info(
            f"Recording stopped: the lecture is {'prepared' if finished else 'being prepared'}. "
            "Turn it on again to add pages to the plan."
        )
    for failure in preparation.failed:
        st.error(failure)


plan = recording.plan() if recording is not None else LecturePlan((), ())
pool = shared_work()
if not plan.works:
    st.info("No computation recorded yet: turn recording on and open the lecture's pages (with their settings).")
follow_preparation(plan, pool)
if plan.works:
    left, middle, right = st.columns(3)
    left.button(
        f"Prepare the lecture ({len(plan.works)} computations)",
        type="primary",
        on_click=prepare_lecture,
        args=(plan, pool, recording),
    )
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
