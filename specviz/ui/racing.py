"""The race a configuration has on this server, and the one speed figure every page quotes from it.

A race is a live timing shared like a trace (every session of a link sees the same race), kept per attempt:
"Measure again" adds one, and the pages show the latest quiet one (:func:`~specviz.ui.waiting.measured_again`).
"""

from __future__ import annotations

import streamlit as st

from specviz.analysis.race import Race, speedup_words
from specviz.config import DecodeConfig
from specviz.serving.pool import shared_work, shown_attempt, stored_attempts
from specviz.serving.works import PREDICTED_SPEEDUP, TRACE, Work
from specviz.ui.waiting import measured_again, shared_result

RACE_PAGE = "pages/race.py"


def race_work(config: DecodeConfig, prompt: str, lanes: tuple[str, ...] = ()) -> Work:
    return Work("race", config, prompt, (lanes,))


def shown_race(config: DecodeConfig, prompt: str) -> Race | None:
    """The race the pages quote for this configuration and prompt (the latest quiet one), None before one ran."""
    attempts = stored_attempts(shared_work(), race_work(config, prompt).key)
    return shown_attempt(attempts, lambda race: race.noisy)[0]


def raced(config: DecodeConfig, prompt: str, lanes: tuple[str, ...], start: str) -> tuple[Race | None, Race | None]:
    """The race of the sidebar's configuration against the target alone (with ``lanes``: other drafters beside it),
    measured once for every session on the work pool when the teacher presses ``start``, measured again on request
    (a student's session shows the class's race: :func:`~specviz.ui.waiting.measured_again`)."""

    return measured_again(race_work(config, prompt, lanes), lambda race: race.noisy, start)


def headline_text(race: Race | None, predicted: float | None) -> str:
    """The configuration's one speed figure, the same on every page: the ``race``'s measured speedup, or before a
    race was run the profile-predicted figure (``predicted``: the theory at the trace's α, predicted with this
    machine's c and v(k); None where it is not known), labelled as such. A page's other figures are named for what they
    are."""
    beside = f" (predicted from this machine's profile: {speedup_words(predicted)})" if predicted is not None else ""
    if race is not None:
        return (
            f"**Speedup of this configuration: {speedup_words(race.headline)}, measured** in the race of "
            f"{race.measured_at.replace('T', ' ')}{beside}. The figures below are read against it."
        )
    if predicted is None:
        return "**Speedup of this configuration: not measured yet.** The Race page runs the two decoders on one clock."
    return (
        f"**Speedup of this configuration: {speedup_words(predicted)}, predicted** from this machine's profile at this "
        "trace's α; no race measured yet (the Race page runs the two decoders on one clock). The figures below are "
        "read against it."
    )


def show_headline(config: DecodeConfig, prompt: str) -> tuple[float, float] | None:
    """Draw the configuration's one speed figure (:func:`headline_text`), predicted from one source on every page: the
    shared prediction of its trace (a profile lookup, and c timed where a drafter has no profile; asked only once the
    trace is stored or under way, so this starts no decode). Returns that prediction, (c, the predicted speedup), for
    the page's own figures (None where there is none)."""
    traced = shared_work().known(Work(TRACE, config, prompt).key)
    speed = shared_result(Work(PREDICTED_SPEEDUP, config, prompt)) if traced else None
    st.info(headline_text(shown_race(config, prompt), speed[1] if speed else None))
    return speed


def race_link() -> None:
    st.page_link(RACE_PAGE, icon=":material/sprint:", label="Race the two decoders on one clock (Race page)")
