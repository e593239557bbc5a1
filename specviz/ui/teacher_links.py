"""What the teacher's sidebar keeps in the browser: the students' quiz link at the round the lesson player shows, and
the teacher's key, remembered by the browser.

The player steps in the browser and tells the page each place it shows (a ``specviz:place`` event); the sidebar is not
redrawn for a step, so a link drawn by the server would name the round of the page's last run. The link's component
shows the link the server drew with the ``round=`` of the page's address (the player writes its round there: a
component mounted after the steps, or redrawn by a later run, missed their events) and rewrites it from those events,
and copies what it shows.

The key that owns the class's results a teacher measured (:func:`specviz.ui.offers.own_key`) is kept in a cookie of
the app's own (``specviz_teacher``, one year, this site only), so a reload, another tab of the same browser, or the
address bar's link opened there again keep it; a student's browser, given that link, has a key of its own.
"""

from __future__ import annotations

import streamlit as st

from specviz.serving.urlstate import TEACHER_KEY
from specviz.ui.state import page_key

STUDENTS_LINK_HTML = (
    '<div class="box"><code data-testid="students-link"></code>'
    '<button type="button" title="Copy the link to the clipboard">Copy</button></div>'
)
STUDENTS_LINK_CSS = """
.box { display: flex; gap: .4rem; align-items: flex-start; }
code { font-size: .8rem; word-break: break-all; background: rgba(0, 0, 0, .05); padding: .3rem; border-radius: 4px;
       flex: 1; }
button { font-size: .8rem; border: 1px solid #b0bec5; border-radius: 4px; background: white; cursor: pointer; }
"""
STUDENTS_LINK_JS = """
export default function (component) {
  const root = component.parentElement, code = root.querySelector("code"), copy = root.querySelector("button");
  const link = new URL(component.data.link, window.location.href);
  const show = () => { code.textContent = link.href; };
  const told = (event) => { link.searchParams.set("round", String(event.detail.round)); show(); };
  const shown = new URL(window.location.href).searchParams.get("round") ?? "1";  // the player writes its round
  if (/^[0-9]+$/.test(shown)) link.searchParams.set("round", shown);  // there (none: round 1)
  copy.onclick = () => navigator.clipboard?.writeText(link.href).then(() => { copy.textContent = "Copied"; });
  show();
  window.addEventListener("specviz:place", told);
  return () => window.removeEventListener("specviz:place", told);
}
"""
STUDENTS_LINK = st.components.v2.component(
    "specviz_students_link", html=STUDENTS_LINK_HTML, css=STUDENTS_LINK_CSS, js=STUDENTS_LINK_JS
)


def show_students_link(link: str, key: str) -> None:
    """The quiz ``link`` (with its ``round=``), following the round the lesson player shows, with a Copy button."""
    STUDENTS_LINK(data={"link": link}, key=key)


TEACHER_COOKIE = "specviz_teacher"
REMEMBER_KEY_JS = f"""
export default function (component) {{
  const key = String(component.data.key);
  if (/^[0-9a-f]{{32}}$/.test(key))
    document.cookie = `{TEACHER_COOKIE}=${{key}}; path=/; max-age=31536000; SameSite=Strict`;
}}
"""
REMEMBER_KEY = st.components.v2.component("specviz_teacher_key", js=REMEMBER_KEY_JS)


def remember_teacher_key(key: str) -> None:
    """Keep the teacher's ``key`` in this browser's cookie (read back by :func:`remembered_teacher_key`)."""
    REMEMBER_KEY(data={"key": key}, key=page_key("sidebar", "teacher_key"))


def remembered_teacher_key() -> str | None:
    """The teacher's key this browser keeps, or None (no cookie, or not a key the app makes)."""
    kept = st.context.cookies.get(TEACHER_COOKIE)
    return kept if isinstance(kept, str) and TEACHER_KEY.fullmatch(kept) else None
