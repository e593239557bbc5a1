"""What a page shows while it waits for shared work (:mod:`specviz.serving.pool`): its place in line or its run's
progress, the result once it is there, a message instead of a traceback; and the classroom's rule that a trace a class
waits for is computed before the newcomers' page runs take the CPU."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Hashable
from typing import Any, TypeVar
from urllib.parse import urlencode

import streamlit as st

from specviz.config import DecodeConfig
from specviz.engine import ModelPair
from specviz.engine.trace import Trace
from specviz.serving.pairs import describe_failure, loaded_target, pair_for, pair_loaded
from specviz.serving.pool import (
    CLASSROOM_WAIT_SECONDS,
    HEARTBEAT_SECONDS,
    classroom_run,
    place_message,
    redraw_interval,
    shared_work,
    shown_attempt,
    stored_attempts,
)
from specviz.serving.sharedwork import key_digest
from specviz.serving.works import TRACE, WORKS, Work
from specviz.ui import scheduling
from specviz.ui.offers import NOT_PREPARED, estimate_label, estimated, may_start, own_key
from specviz.ui.recorder import teachers_recording
from specviz.ui.state import Session, page_key, session

R = TypeVar("R")
# a page's own trace (the page is that trace) starts on opening while estimated within a minute here, about as long as a
# class waits for its lesson without anyone choosing to; past that (a long prompt on a large pair, many tokens on a
# slow machine) the teacher presses, knowing the estimate, and a link cannot make the server spend it for a class
TRACE_ON_OPEN_S = 60.0


def _session_id() -> str:
    """This browser session's id, kept in its session state (the work queue counts who waits on what)."""
    if not Session.session_id.is_set():
        session.session_id = uuid.uuid4().hex
    return session.session_id


def _draw_message(box: Any, message: tuple[str, float | None, str]) -> None:
    kind, fraction, text = message
    if kind == "info":
        box.info(text, icon="⏳")
    else:
        box.progress(fraction, text=text)


def shared_result(work: Work, button: str | None = None, button_key: str | None = None, hint: str | None = None) -> Any:
    """``work``'s result, computed once and shown to every session that asks; None until it exists.

    A costly computation names a ``button``: it starts when someone presses it (``hint`` says so meanwhile), and a
    page whose result is already stored, or under way for another session, shows it without a press. A student's
    session has no such button: it shows what the teacher prepared, or says it is not there yet.
    A lecture being recorded notes every work a page offers, pressed or not.
    """
    record(work)
    slot = None
    if button is not None and not shared_work().known(work.key):
        if not may_start():
            st.info(NOT_PREPARED)
            return None
        label, slot = estimate_label(button, work, estimated(work)), st.empty()
        if not slot.button(label, type="primary", key=button_key or page_key("run", work.name)):
            if hint:
                st.info(hint)
            return None
    result = submit_and_wait(work.key, work.compute, work.label, lambda: estimated(work))
    if slot is not None:
        slot.empty()  # the result is here: the button that started it goes
    return result


def owner_key(key: tuple[Hashable, ...]) -> tuple[Hashable, ...]:
    """Where the key that owns a class's live measurement ``key`` is stored (:meth:`SharedWork.claim`)."""
    return key + ("owner",)


def own_series(key: tuple[Hashable, ...], owner: str) -> tuple[Hashable, ...]:
    """The attempts a session that does not own ``key`` measured itself: stored apart, read by that key alone."""
    return key + ("own", owner)


def session_attempts(key: tuple[Hashable, ...], me: str | None) -> tuple[list[Any], bool, list[Any]]:
    """A live measurement's attempts as the session owning key ``me`` (None: a student's session) sees them: (the
    class's attempts, whether ``me`` owns them, ``me``'s own attempts: the class's where it owns them, else those it
    measured itself, :func:`own_series`)."""
    pool = shared_work()
    attempts = stored_attempts(pool, key)
    owned = me is not None and pool.cached(owner_key(key)) in (None, me)
    own = attempts if owned else [] if me is None else stored_attempts(pool, own_series(key, me))
    return attempts, owned, own


def shown_to_session(key: tuple[Hashable, ...], noisy: Callable[[Any], bool]) -> tuple[Any, Any]:
    """The attempt of a live measurement this session is shown, on every page alike (:func:`measured_again` draws
    it with its button): its own where it measured again without owning the class's, else the class's
    (:func:`~specviz.serving.pool.shown_attempt`: the latest quiet one, and the latest when that was noisy)."""
    attempts, owned, own = session_attempts(key, own_key() if may_start() else None)
    return shown_attempt(own if own and not owned else attempts, noisy)


def measured_again(work: Work, noisy: Callable[[Any], bool], start: str) -> tuple[Any, Any]:
    """A live timing every session shares, with a "Measure again" button: (the attempt to show, the latest attempt
    when it was ``noisy`` and a quiet one is shown instead) (:func:`~specviz.serving.pool.shown_attempt`).

    The first attempt starts when someone presses ``start`` (with its estimate); one under way for another session is
    waited for without a press. Each attempt is its own shared result (``work.key + (n,)``), so the quiet one a class
    saw is kept when a later one meets a busy machine. The class's attempts belong to the session that measured the
    first (its :func:`~specviz.ui.offers.own_key`; a lecture's preparation claims those it prepares): only that key
    adds one. Any other teacher's session (a student who opened the address bar's link, say) measures again for
    itself: its attempts are stored apart (:func:`own_series`), shown to it alone, and the class's race stays the
    teacher's. A student's session neither starts nor repeats one: it shows the class's attempts, or says none was
    measured yet.
    """
    record(work)
    pool, label, estimate = shared_work(), work.label, estimated(work)
    teacher, slot = may_start(), st.empty()  # one button's place: the start, then Measure again
    me = own_key() if teacher else None

    def measured() -> tuple[list[Any], bool, list[Any]]:
        return session_attempts(work.key, me)

    def again() -> bool:
        return teacher and slot.button(
            estimate_label(f"Measure again: {label.lower()}", work, estimate), key=page_key("again", label)
        )

    attempts, owned, own = measured()
    class_next = work.key + (len(attempts),)  # the class's next attempt: waited for when another session started it
    if attempts or own:
        pressed = again()
    elif teacher:
        pressed = slot.button(estimate_label(start, work, estimate), type="primary", key=page_key("start", label))
    else:
        pressed = False
        if not pool.known(class_next):
            st.info(NOT_PREPARED)
    if pressed or pool.known(class_next):
        first = not attempts and not own
        following = class_next
        if me is not None and pressed:
            owned = owned and pool.claim(owner_key(work.key), me) == me  # two first presses at once: one key wins
            series = work.key if owned else own_series(work.key, me)
            following = series + (len(stored_attempts(pool, series)),)
        submit_and_wait(following, work.compute, label, lambda: estimate)
        attempts, owned, own = measured()
        if first and (attempts or own):  # the first result is here: Measure again takes the start button's place
            again()
    if own and not owned:
        st.caption(
            "**Your own measurement, shown to you alone.** The class's results belong to the session that measured "
            "or prepared them first (the teacher's): a Measure again from any other session changes nothing the "
            "class sees."
        )
    return shown_to_session(work.key, noisy)


def claim(work: Work) -> None:
    """Make ``work``'s class result this session's where nobody owns it yet (a live timing: :func:`measured_again`;
    a lecture's preparation claims what it prepares, so the teacher who prepared it may measure it again)."""
    if WORKS[work.name].measured and may_start():
        shared_work().claim(owner_key(work.key), own_key())


def record(work: Work) -> None:
    """While the teacher rehearses a lecture (:mod:`specviz.ui.recorder`), every work a page offers joins its plan,
    with the page's address, and its live timings become the teacher's (:func:`claim`)."""
    recording = teachers_recording()
    if recording is not None and recording.on:
        recording.note(work, f"{st.context.url or '/'}?{urlencode(st.query_params.to_dict())}")
        claim(work)


def let_the_classroom_run_first() -> None:
    """A session's first page run, finding a class waiting for one run when its turn comes, waits for that run
    (GIL-free, without its turn, at most ``CLASSROOM_WAIT_SECONDS``) before building its page: the newcomer most likely
    wants the same trace, and its page run would take the CPU from the model computing it (300 page runs against one
    trace on 2 cores). Any other first run, and every later run, goes on at once."""
    if session.arrived:
        return
    session.arrived = True
    running = classroom_run(shared_work())
    if running is not None:
        with scheduling.waiting():
            running.finished.wait(CLASSROOM_WAIT_SECONDS)


def submit_and_wait(
    key: tuple[Hashable, ...], compute: Callable[..., Any], label: str, estimated_s: Callable[[], float | None]
) -> Any:
    """Submit ``key``'s computation to the shared pool, wait for it while drawing its progress, and return the
    shared result, computed once for every session that asks (None on failure; ``estimated_s()``:
    what it costs, estimated before it runs, where known: the wait's first estimate, asked only when it must run).

    ``compute(on_progress)`` runs on the process's work pool: identical requests wait for one run, distinct ones
    queue first come first served, and the page shows its place in line or the run's progress until the result (or
    the failure's message) arrives. A rerun (the user changed a setting) or a closed tab leaves the queue.
    """
    work = shared_work()
    cached = work.cached(key)
    if cached is not None:
        return cached
    session, box, shown, sent = _session_id(), st.empty(), None, 0.0
    job = work.submit(key, compute, session, label, estimated_s())
    try:
        with scheduling.waiting():  # the sidebar is drawn first, and the run holds no turn while it waits
            while not job.finished.wait(redraw_interval(len(job.waiters))):
                # redraw when the message changes, and now and then regardless: each redraw is also where
                # streamlit stops this run if the user changed a setting (which leaves the queue, below)
                message = place_message(work.place(job), label)
                if message != shown or time.monotonic() - sent > HEARTBEAT_SECONDS:
                    _draw_message(box, message)
                    shown, sent = message, time.monotonic()
    finally:
        work.leave(job, session)
    box.empty()
    if job.error is not None:
        st.error(job.error)
        return None
    return job.result


def get_trace(config: DecodeConfig, prompt: str, button: str | None = None) -> Trace | None:
    """The shared trace of ``config`` on ``prompt``, with a progress bar over rounds; failures become messages.

    A page's own trace starts as the page opens, unless it is estimated above :data:`TRACE_ON_OPEN_S` here (a long
    prompt, a large pair, many tokens: its pair is loaded first to estimate it); then it waits for a press, as does
    every other trace a page shows beside its own (``button``)."""
    work = Work(TRACE, config, prompt)
    if button is None and not shared_work().known(work.key):
        if loaded_target(config) is None and page_pair(config) is None:
            return None  # the pair could not be loaded: page_pair said why
        estimate = estimated(work)
        if estimate is not None and estimate > TRACE_ON_OPEN_S:
            button = "Decode this trace"
    hint = "Press to decode it: every session of this link then shares it." if button else None
    return shared_result(work, button=button, button_key=page_key("decode", key_digest(work.key)), hint=hint)


def show_user_errors(fn: Callable[[], R]) -> R | None:
    """Run ``fn()``; turn any failure into a message in the page (the app keeps serving). None on failure."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the page must keep serving; the log keeps the traceback
        st.error(describe_failure(exc))
    return None


def page_pair(config: DecodeConfig) -> ModelPair | None:
    """The shared pair for a page that reads the models itself: a spinner while loading, a message on failure."""
    loading = (
        f"Loading {config.target}"
        + (f" and {config.draft_spec}" if config.draft_spec else "")
        + (" (the first load on a machine also measures its kernels: seconds) …")
    )
    with contextlib.nullcontext() if pair_loaded(config) else scheduling.waiting(), st.spinner(loading):
        return show_user_errors(lambda: pair_for(config))
