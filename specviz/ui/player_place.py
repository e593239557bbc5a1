"""Where the lesson player is, told to the server: the round and view a student's tab shows, so the next page's link
carries them.

The player steps in the browser with no server round trip and writes its round and view into the page's address
(``history.replaceState``), which streamlit never reads back: a page opened from the navigation starts from the
session's round, so a student who stepped from round 2 to round 7 and opened the Race page got ``round=2`` in its
link (and the lesson player, opened again, round 1). The player also announces each place it shows (a
``specviz:place`` event on the page); this small component, in a fragment of its own, hands the latest one to the
server a moment after the stepping stops (a newly answered round at once: a student may open another page right
after; a place still waiting when the page around the player is pressed, as a link to another page is, at once too;
a player drawn before the keeper listened, as on a reload that restored the tab's answers, is asked once it does):
the fragment alone reruns (the player's frame is left as it is), the session's round follows, and the page's link is
written as the player left it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from specviz.config import DecodeConfig
from specviz.presentation.player import VIEWS
from specviz.ui.controls import write_url
from specviz.ui.state import page_key, session

SETTLE_MS = 300  # a burst of steps (a held arrow key, autoplay) is told once, when it pauses
PLACE_JS = f"""
export default function (component) {{
  let timer = null, pending = null, answered = Number(component.data?.answered ?? 0);
  const tell = () => {{
    clearTimeout(timer);
    if (pending === null) return;
    answered = pending.answered;
    component.setStateValue("place", pending);
    pending = null;
  }};
  const told = (event) => {{
    pending = {{round: Number(event.detail.round), view: String(event.detail.view),
               answered: Number(event.detail.answered)}};
    clearTimeout(timer);
    if (pending.answered !== answered) tell();  // an answer at once: a page opened right after must know it
    else timer = setTimeout(tell, {SETTLE_MS});
  }};
  window.addEventListener("specviz:place", told);
  // a press on the page around the player (a link to another page, a button) tells a place still waiting first
  document.addEventListener("pointerdown", tell, true);
  window.dispatchEvent(new CustomEvent("specviz:ask-place"));  // a player drawn before this listened tells it again
  return () => {{
    clearTimeout(timer);
    window.removeEventListener("specviz:place", told);
    document.removeEventListener("pointerdown", tell, true);
  }};
}}
"""
PLACE = st.components.v2.component("specviz_player_place", js=PLACE_JS)
ROUND_MAX = 1_000_000  # a place a player could show; anything else a client sends is ignored


def _count(value: Any, least: int) -> int | None:
    """``value`` as a whole number in [least, ROUND_MAX], or None."""
    if not isinstance(value, int | float) or not least <= value <= ROUND_MAX or value != int(value):
        return None
    return int(value)


def told_place(place: Any) -> tuple[int, str, int] | None:
    """The round, view and answered quiz rounds in what the browser told, or None where it is not a place the player
    could show."""
    if not isinstance(place, dict):
        return None
    shown, view, answered = _count(place.get("round"), 1), place.get("view"), _count(place.get("answered"), 0)
    if shown is None or view not in VIEWS or answered is None:
        return None
    return shown, str(view), answered


@st.fragment
def keep_players_place(
    config: DecodeConfig, prompt: str, defaults: DecodeConfig, trace: str, rounds: int, held: bool
) -> None:
    """Mount the place keeper of the player showing ``trace`` (its :func:`~specviz.ui.views.trace_id`, ``rounds``
    long); when the player told a new place, the session's round, its quiz's answered rounds and the page's link
    follow. A page ``held`` by a student's quiz (:func:`~specviz.ui.views.answered_rounds` short of ``rounds``) whose
    quiz has just answered every round reruns, and then shows it all; a page not held stays as it is (a rerun would
    draw its player again for nothing: a quiz of rounds that ask nothing is answered as it opens)."""
    opened = {"answered": session.quiz_answered.get(trace, 0)}  # what the player opens with, told already
    told = told_place(PLACE(key=page_key("player", "place"), data=opened, on_place_change=lambda: None).place)
    if told is None:
        return
    session.round, view, answered = told
    session.quiz_answered = {**session.quiz_answered, trace: answered}
    write_url(config, prompt, session.round, defaults, extra={"view": view} if view != "step" else None)
    if held and rounds <= answered:
        st.rerun(scope="app")
