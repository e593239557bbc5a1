"""Where the lesson player is, told to the server: the round and view a student's tab shows, so the next page's link
carries them.

The player steps in the browser with no server round trip and writes its round and view into the page's address
(``history.replaceState``), which streamlit never reads back: a page opened from the navigation starts from the
session's round, so a student who stepped from round 2 to round 7 and opened the Race page got ``round=2`` in its
link (and the lesson player, opened again, round 1). The player also announces each place it shows (a
``specviz:place`` event on the page); this small component, in a fragment of its own, hands the latest one to the
server a moment after the stepping stops: the fragment alone reruns (the player's frame is left as it is), the
session's round follows, and the page's link is written as the player left it.
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
  let timer = null;
  const told = (event) => {{
    const place = {{round: Number(event.detail.round), view: String(event.detail.view)}};
    clearTimeout(timer);
    timer = setTimeout(() => component.setStateValue("place", place), {SETTLE_MS});
  }};
  window.addEventListener("specviz:place", told);
  return () => {{ clearTimeout(timer); window.removeEventListener("specviz:place", told); }};
}}
"""
PLACE = st.components.v2.component("specviz_player_place", js=PLACE_JS)
ROUND_MAX = 1_000_000  # a place a player could show; anything else a client sends is ignored


def told_place(place: Any) -> tuple[int, str] | None:
    """The round and view in what the browser told, or None where it is not a place the player could show."""
    if not isinstance(place, dict):
        return None
    shown, view = place.get("round"), place.get("view")
    if not isinstance(shown, int | float) or not 1 <= shown <= ROUND_MAX or shown != int(shown) or view not in VIEWS:
        return None
    return int(shown), str(view)


@st.fragment
def keep_players_place(config: DecodeConfig, prompt: str, defaults: DecodeConfig) -> None:
    """Mount the place keeper; when the player told a new place, the session's round and the page's link follow."""
    told = told_place(PLACE(key=page_key("player", "place"), on_place_change=lambda: None).place)
    if told is None:
        return
    session.round, view = told
    write_url(config, prompt, session.round, defaults, extra={"view": view} if view != "step" else None)
