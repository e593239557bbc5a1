"""The race a configuration has on this server, and the one speed figure every page quotes from it.

A race is a live timing shared like a trace (every session of a link sees the same race), kept per attempt:
"Measure again" adds one, and the pages show the latest quiet one (:func:`~specviz.ui.waiting.measured_again`); every
page of a session shows the same attempt (:func:`~specviz.ui.waiting.shown_to_session`). What a page may say of speed
beside it: :mod:`specviz.analysis.claims`.
"""

from __future__ import annotations

import streamlit as st

from specviz.analysis.claims import headline_text
from specviz.analysis.metrics import machine_speedup
from specviz.analysis.race import Race
from specviz.analysis.roofline import profiles_at_hand
from specviz.config import DecodeConfig
from specviz.models.profile import load_words
from specviz.serving.pairs import pair_for, pair_loaded
from specviz.serving.pool import shared_work
from specviz.serving.works import TRACE, Work
from specviz.ui.waiting import measured_again, shown_to_session

RACE_PAGE = "pages/race.py"


def race_work(config: DecodeConfig, prompt: str, lanes: tuple[str, ...] = ()) -> Work:
    return Work("race", config, prompt, (lanes,))


def shown_race(config: DecodeConfig, prompt: str) -> Race | None:
    """The race every page of this session quotes for this configuration and prompt (the one the Race page shows it:
    the latest quiet one; a session's own where it measured again without owning the class's), None before one
    ran."""
    return shown_to_session(race_work(config, prompt).key, lambda race: race.noisy)[0]


def raced(config: DecodeConfig, prompt: str, lanes: tuple[str, ...], start: str) -> tuple[Race | None, Race | None]:
    """The race of the sidebar's configuration against the target alone (with ``lanes``: other drafters beside it),
    measured once for every session on the work pool when the teacher presses ``start``, measured again on request
    (a student's session shows the class's race: :func:`~specviz.ui.waiting.measured_again`)."""

    return measured_again(race_work(config, prompt, lanes), lambda race: race.noisy, start)


def predicted_here(config: DecodeConfig, prompt: str) -> tuple[tuple[float, float] | None, str]:
    """(c, the speedup predicted for ``config``'s stored trace from this machine's quiet profile), or None, with what
    the headline says of it: nothing to add, why nothing is predicted yet (no trace, or a profile not measured: a page
    measures nothing as it opens), or that the passes were measured busy and what the load was (nothing is predicted
    from them). Arithmetic on stored figures, computed in the page (no work is queued for it)."""
    trace = shared_work().cached(Work(TRACE, config, prompt).key)
    if trace is None or not pair_loaded(config):
        return None, ""
    pair = pair_for(config)
    profiles = profiles_at_hand(config, pair)
    if profiles is None:
        return None, "Nothing is predicted for it before this machine's passes of its drafter are measured."
    busy = [profile for profile in profiles if profile is not None and not profile.quiet]
    if busy:
        return None, (
            f"No speedup is predicted for it: this machine's passes were measured busy ({load_words(busy[0])}), and a "
            "busy machine's cost is not this machine's; they are measured again until a quiet measurement is kept."
        )
    return machine_speedup(trace, pair), ""


def show_headline(config: DecodeConfig, prompt: str) -> tuple[float, float] | None:
    """Draw the configuration's one speed figure (:func:`~specviz.analysis.claims.headline_text`): the session's race,
    and beside or before it the prediction of its trace from this machine's quiet profile (:func:`predicted_here`:
    nothing is computed but arithmetic, and nothing predicted from a busy profile). Returns that prediction,
    (c, the predicted speedup), for the page's own figures; None where there is none."""
    speed, why_not = predicted_here(config, prompt)
    race = shown_race(config, prompt)
    said = headline_text(
        race.headline if race else None, race.measured_at if race else None, speed[1] if speed else None
    )
    st.info(f"{said} {why_not}" if why_not else said)
    return speed


def show_race_figure(config: DecodeConfig, prompt: str) -> None:
    """Where the class raced these settings, the race's figure as every speed page states it
    (:func:`show_headline`); nothing before a race (a lesson page is about its rounds)."""
    if shown_race(config, prompt) is not None:
        show_headline(config, prompt)


def race_link() -> None:
    st.page_link(RACE_PAGE, icon=":material/sprint:", label="Race the two decoders on one clock (Race page)")
