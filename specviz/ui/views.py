"""Reusable views: data in, elements out (the trace's summary line, the round a link names)."""

from __future__ import annotations

import streamlit as st

from specviz.analysis.claims import fastest_text
from specviz.analysis.defaults import PRECISIONS, at_precision
from specviz.analysis.draft_precision import precisions_on
from specviz.analysis.llamacpp_passes import llamacpp_sentence, llamacpp_table, stored_llamacpp_passes
from specviz.analysis.race import Race
from specviz.analysis.roofline import (
    cost_coefficient,
    pair_profiles,
    prediction_story,
    profiles_at_hand,
    roofline_table,
    speculation_summary,
    speed_sentence,
)
from specviz.config import DecodeConfig
from specviz.engine.trace import Round, Trace
from specviz.models.pair import ModelPair
from specviz.models.profile import PassProfile, held_profile
from specviz.models.rates import machine_rates
from specviz.presentation.player import lesson_page, opened_at
from specviz.presentation.verification_figures import roofline_figure
from specviz.serving.pairs import app_defaults, pair_defaults
from specviz.serving.pool import shared_work
from specviz.serving.sharedwork import key_digest
from specviz.ui.controls import write_url
from specviz.ui.offers import may_start
from specviz.ui.player_place import keep_players_place
from specviz.ui.racing import shown_race
from specviz.ui.scheduling import painted, stop_page
from specviz.ui.state import page_key, session
from specviz.ui.waiting import get_trace, page_pair

ROOFLINE_COLUMNS = {
    "tokens": "tokens in the pass",
    "k": "k drafted",
    "target_ms": "target, ms",
    "memory_bound_ms": "memory bound, ms",
    "compute_bound_ms": "compute bound, ms",
    "roofline_ms": "roofline, ms",
    "verify_cost": "v(k), steps",
    "draft_ms": "draft, ms",
}


def precision_caption(config: DecodeConfig) -> None:
    """Under a speed page's title: the precision its timings are taken in and what this machine makes of a pass over
    k + 1 tokens, from its measured profile (no guess from the CPU's name)."""
    pair = page_pair(config)
    measured = f" {speed_sentence(held_profile(pair.target))}" if pair else ""
    st.caption(
        f"Timed in **{config.dtype}** (the sidebar's precision; probabilities are float32 either way).{measured}"
    )


def pair_defaults_text(config: DecodeConfig) -> str:
    """The sidebar pair's default precision on this machine and why, or how to measure it where it was not."""
    measured = pair_defaults(config.target, config.draft, config.device)
    if measured is None:
        return (
            "**This pair's default precision has not been measured on this machine yet**, so it opens in the "
            f"app's ({app_defaults().dtype}). `python -m specviz machine --target {config.target} "
            f"--draft {config.draft}` measures it once (a few minutes for a 1.5B pair)."
        )
    own = f"**This pair's default precision here: {measured.dtype}, γ = {measured.gamma}.** {measured.reason}"
    picked = at_precision(measured, config.dtype) if config.dtype != measured.dtype else None
    return f"{own} {picked.reason}" if picked is not None else own


def fastest_note(config: DecodeConfig, prompt: str) -> str | None:
    """Beside the lesson's block and the race: this machine's fastest draft for the pair in the config's precision
    (greedy rounds replayed along held-out text at its quiet costs: :func:`~specviz.analysis.replay.fastest_drafts`),
    against the race this session is shown of the sidebar's settings (:func:`~specviz.analysis.claims.fastest_text`:
    "no draft pays" only where no race contradicts it); that it is not stated where its passes were measured busy;
    None where the sidebar's γ is the fastest and nothing contradicts it, or nothing was measured here."""
    own = pair_defaults(config.target, config.draft, config.device)
    fastest = own.fastest.get(config.dtype) if own is not None else None
    if own is None or fastest is None:
        return None
    if own.busy:
        return (
            f"This machine's fastest draft for this pair in {config.dtype} is not stated: the passes it was chosen "
            "from were measured while other work held the cores. `python -m specviz machine` on a quiet machine (or "
            "a later start of the app) measures it again."
        )
    race = shown_race(config, prompt)
    return fastest_text(config.dtype, config.gamma, fastest, race.headline if race else None)


def prediction_story_text(config: DecodeConfig, pair: ModelPair, predicted: float, alpha: float, c: float) -> str:
    """The theory's speedup for the run, predicted here, in words
    (:func:`~specviz.analysis.roofline.prediction_story`)."""
    return prediction_story(predicted, alpha, config.gamma, c, held_profile(pair.target))


def profiles_here(config: DecodeConfig, pair: ModelPair) -> tuple[PassProfile, PassProfile | None]:
    """The target's and the drafter's profiles as a page reads them, measuring nothing: those at hand
    (:func:`~specviz.analysis.roofline.profiles_at_hand`), else the target's alone (the drafter's not measured yet)."""
    return profiles_at_hand(config, pair) or (held_profile(pair.target), None)


def roofline_profiles(config: DecodeConfig, pair: ModelPair) -> tuple[PassProfile, PassProfile | None]:
    """The target's and the drafter's profiles for the roofline (:func:`profiles_here`), with a button that measures
    the drafter's passes where they were not (a teacher's press; seconds)."""
    target, draft = profiles_here(config, pair)
    label = "Measure the drafter's passes on this machine (once; seconds)"
    if draft is not None or not may_start() or not st.button(label, key=page_key("roofline_draft", config.dtype)):
        return target, draft
    with st.spinner("Measuring the drafter's passes on this machine …"):
        return pair_profiles(config, pair)


def roofline_panel(config: DecodeConfig, alpha: float | None = None) -> None:
    """This machine's roofline for the sidebar's pair, in each precision offered: the target's and the drafter's
    measured pass over k + 1 tokens beside the target's memory and compute bounds, and what that means for
    speculation here (at the trace's alpha, when given); then llama.cpp's pass over k tokens, where a benchmark
    measured it on this machine (:mod:`specviz.analysis.llamacpp_passes`)."""
    st.markdown(
        "A pass over k + 1 tokens reads every weight once and does 2N(k + 1) FLOPs. While reading the "
        "weights takes longer than the arithmetic (the dashed line above the dotted one), a pass over a few "
        "tokens costs about one token's step, so verifying k drafted tokens is nearly free: the measured "
        "curve shows how far that holds on this machine, with these kernels."
    )
    offered = precisions_on(config.device, PRECISIONS)  # those that run here (int4: where its kernel compiles)
    precisions = sorted(offered, key=lambda dtype: dtype != config.dtype)  # the sidebar's first: the tab it opens on
    tabs = st.tabs([f"{dtype}{' (sidebar)' if dtype == config.dtype else ''}" for dtype in precisions])
    for tab, dtype in zip(tabs, precisions):
        with tab:
            if dtype != config.dtype and not st.toggle(
                f"Load the pair in {dtype} and show its roofline", key=page_key("roofline", dtype)
            ):
                continue
            shown = config.replace(dtype=dtype)
            pair = page_pair(shown)
            if pair is None:
                continue
            target, draft = roofline_profiles(shown, pair)
            table = roofline_table(target, draft, machine_rates())
            st.plotly_chart(
                roofline_figure(table, pair.target.name, pair.draft.name if pair.draft else None),
                width="stretch",
                key=page_key("roofline_chart", dtype),
            )
            st.markdown(speed_sentence(target))
            if draft is not None and alpha is not None and target.quiet and draft.quiet:
                st.markdown(speculation_summary(alpha, config.gamma, cost_coefficient(target, draft), target))
            st.dataframe(table.rename(columns=ROOFLINE_COLUMNS).round(2), hide_index=True, width="stretch")
    peer = stored_llamacpp_passes()
    if peer is not None:  # measured with llama-bench on this machine (analysis.llamacpp_passes)
        st.markdown(llamacpp_sentence(peer))
        st.dataframe(llamacpp_table(peer).round(2), hide_index=True)


def linked_round() -> int:
    """The 1-based round the page's link names: the lesson player writes it into the address bar as it
    steps, so a copied link reopens that round (the server itself does not see those steps; the player
    remembers them for its own reruns). A bad value means round 1 (reported once, with the link's other values,
    by the sidebar); none (a page opened from the navigation, whose address streamlit empties) the round the
    session carries, so the player reopens where this tab left it. Read it before ``shared_controls`` rewrites the
    URL; it is kept in the session so the other pages' links carry it."""
    try:
        shown = max(1, int(st.query_params.get("round", str(session.round))))
    except ValueError:
        shown = 1
    session.round = shown
    return shown


def shared_lesson_page(trace: Trace, race: Race | None) -> str:
    """The trace's lesson page (with the race of its settings, when one was measured), built once per process and
    kept with the results (every session of a link shows the same page; only the round and view it opens on
    differ)."""
    key = ("lesson-page", repr(trace.config), tuple(trace.prompt_ids), race.measured_at if race else None)
    work = shared_work()
    page = work.store.get(key)
    if page is None:
        page = lesson_page(trace, race=race)
        work.store.put(key, page)
    return page


def trace_id(trace: Trace) -> str:
    """A short name of ``trace`` (its settings and prompt), under which a session keeps what its quiz answered."""
    return key_digest(("quiz", repr(trace.config), tuple(trace.prompt_ids)))


def asks_nothing(round_: Round) -> bool:
    """Whether the quiz has no question for ``round_``: it drafted nothing (the budget's last token, the target's own
    step), or it is a tree's (shown, not quizzed), as the player's quiz counts it."""
    return round_.tree is not None or not round_.draft


def answered_rounds(trace: Trace) -> int:
    """The rounds of ``trace`` this session may see decided: every one for a teacher's; for a student's
    (``student=1``), those its quiz answered from the first on (each round's outcome is the next round's context),
    with the rounds after them that ask nothing (the player counts them answered before it could tell the server)."""
    if not session.student:
        return len(trace.rounds)
    answered = min(len(trace.rounds), session.quiz_answered.get(trace_id(trace), 0))
    while answered < len(trace.rounds) and asks_nothing(trace.rounds[answered]):
        answered += 1
    return answered


def hold_for_quiz(trace: Trace | None, config: DecodeConfig | None, prompt: str, defaults: DecodeConfig) -> None:
    """A student's page that would show how ``trace``'s rounds ended, before its quiz answered them: the quiz in the
    page's place (at the session's round), and the page stops there (:func:`~specviz.ui.scheduling.stop_page`). Nothing
    for a teacher's session, a page with no trace or config yet, or once every round is answered."""
    if config is None or trace is None or not trace.rounds:
        return
    answered = answered_rounds(trace)
    if answered >= len(trace.rounds):
        return
    st.info(
        f"This page shows how the rounds ended: it opens once your quiz has answered every round ({answered} of "
        f"{len(trace.rounds)} so far). Answer them here."
    )
    show_player(trace, config, prompt, defaults, session.round, "quiz")
    stop_page()


def hold_students_quiz(config: DecodeConfig | None, prompt: str, defaults: DecodeConfig) -> None:
    """On a page that shows no trace of its own yet reads its settings' rounds (a race strikes the rejected drafts, a
    sweep counts the accepted ones): a student's session answers the quiz of its trace first
    (:func:`hold_for_quiz`); nothing for a teacher's."""
    if config is not None and not may_start():
        hold_for_quiz(get_trace(config, prompt), config, prompt, defaults)


def show_player(
    trace: Trace, config: DecodeConfig, prompt: str, defaults: DecodeConfig, linked: int, view: str = "step"
) -> str:
    """The lesson player for a computed trace, opened on the linked round (clipped to the trace) with the
    page's link (``config``: the sidebar's, which may differ from the trace's own) on it; every round is in
    the page, so stepping needs no server. A student's session opens it on the quiz until every round is answered
    (:func:`answered_rounds`), whatever view was asked. Returns the player's HTML, which is also the lesson download."""
    shown, told = min(linked, len(trace.rounds)), session.quiz_answered.get(trace_id(trace), 0)
    held = answered_rounds(trace) < len(trace.rounds)
    view = "quiz" if held else view
    write_url(config, prompt, shown, defaults, extra={"view": view} if view != "step" else None)
    race = shown_race(config, prompt)
    page = opened_at(shared_lesson_page(trace, race), view, shown, told)
    st.html(PROJECTOR_STYLE)
    st.iframe(page, height="content")  # streamlit sizes the frame to the player's content
    painted()  # the page's main view is out: the rest waits while other sessions' first contentful paints do
    keep_players_place(config, prompt, defaults, trace_id(trace), len(trace.rounds), held)
    return page


# The player marks its frame with its view (data-view); in the present view the page gives the screen to the player
# alone, however the view was opened (a link or the player's Present button): the page's other elements (its title,
# caption, summary, buttons) leave, and the player starts just below Streamlit's header (3.75rem), not under it.
PRESENT = '[data-testid="stMainBlockContainer"]:has(iframe[data-view="present"])'
PROJECTOR_STYLE = (
    f"<style>{PRESENT} {{padding-top: 3.75rem; padding-bottom: 0;}} "
    f'{PRESENT} [data-testid="stElementContainer"]:not(:has(iframe[data-view="present"])) {{display: none;}}</style>'
)
