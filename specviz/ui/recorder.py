"""The teacher's recording of a lecture (:class:`specviz.serving.lecture.Recording`), found from any of their sessions.

A recording lives on the server, not in a page's widget nor in one session's state: streamlit drops a widget's state
on every page run that does not draw it (a sidebar click to another page), and a typed link opens a new session. The
session that starts a recording keeps its recorder id, and the lecture page hands the id to the browser as a cookie;
every later session of that browser (a link typed, a tab opened) reads it from its first request.
"""

from __future__ import annotations

import streamlit as st

from specviz.serving.lecture import Recording, new_recording, recording
from specviz.ui.state import session

COOKIE = "specviz_recorder"
COOKIE_DAYS = 30  # long enough to rehearse one day and lecture on another (the server keeps the plan meanwhile)


def teachers_recording() -> Recording | None:
    """The recording this session's browser keeps (the id this session started, else its cookie's), if any."""
    return recording(session.recorder or st.context.cookies.get(COOKIE))


def own_recording() -> Recording:
    """The teacher's recording, a new one (off, empty) when the browser has none."""
    found = teachers_recording()
    if found is None:
        session.recorder, found = new_recording()
    return found


def record_pages(on: bool) -> None:
    """Turn the teacher's recording on or off; the works recorded so far stay in its plan either way."""
    own_recording().on = on


def keep_recorder_in_browser() -> None:
    """Hand the recorder id this session started to the browser as a cookie, so that its other sessions (typed
    links, new tabs) note into the same recording. The id is the server's own random token, never a visitor's text."""
    if session.recorder:
        cookie = f"{COOKIE}={session.recorder}; path=/; max-age={COOKIE_DAYS * 86400}; samesite=strict"
        st.html(f"<script>document.cookie = '{cookie}';</script>", unsafe_allow_javascript=True)
