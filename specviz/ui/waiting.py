"""What a page shows while it waits for shared work: the process's one work pool, a waiting page's place in line
or its run's progress, the result once it is there; and the hall's rule that a trace a class waits for is computed
before the newcomers' page runs take the CPU.

Every page's computation (traces, sweeps, comparisons, lab runs) goes through one process-wide
:class:`~specviz.sharedwork.SharedWork`: computed once however many sessions ask, queued fairly, kept in a store
bounded by bytes; with ``SPECVIZ_REDIS_URL`` shared with every replica on that Redis.
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid

import streamlit as st

from specviz.config import DecodeConfig
from specviz.engine import speculative_decode
from specviz.engine.trace import Trace
from specviz.jobs import Job
from specviz.sharedwork import Place, SharedWork
from specviz.ui.work import LOADING_NOTE, describe_failure, pair_for, trace_key

log = logging.getLogger(__name__)
REDIS_URL_VAR = "SPECVIZ_REDIS_URL"
STORE_MAX_BYTES = int(float(os.environ.get("SPECVIZ_STORE_MB", "1024")) * 2**20)  # finished results kept, by size
WORKERS = max(1, int(os.environ.get("SPECVIZ_WORKERS", "1")))  # computations running at once in this process
POLL_SECONDS = 0.25  # how often a waiting page reads its place in the queue, alone
HEARTBEAT_SECONDS = 2.0  # a waiting page redraws at least this often when few share its run
WAKEUPS_PER_SECOND = 100  # all the pages waiting for one run wake about this often in all, however many they are
LONGEST_SLEEP_SECONDS = 10.0  # the most a waiting page sleeps (the longest a setting changed meanwhile waits)


@st.cache_resource(show_spinner=False)
def shared_work() -> SharedWork:
    """The process's one pool of shared computations (see :mod:`specviz.sharedwork`); with ``SPECVIZ_REDIS_URL``
    its results and single-flight locks are shared with every replica using that Redis."""
    return SharedWork(STORE_MAX_BYTES, WORKERS, describe_failure, shared=replica_share(os.environ.get(REDIS_URL_VAR)))


def replica_share(url: str | None):
    """The Redis share at ``url`` (None without one, or when it does not answer: this process then works alone,
    which the log says)."""
    if not url:
        return None
    from specviz.redisshare import RedisShare  # the redis client only where a Redis is configured

    share = RedisShare(url)
    try:
        share.client.ping()
    except Exception as exc:  # noqa: BLE001 - a replica without its Redis still serves its own sessions
        log.error("%s=%s does not answer (%s): this process keeps its results to itself", REDIS_URL_VAR, url, exc)
        return None
    return share


def _session_id() -> str:
    """This browser session's id, kept in its session state (the work queue counts who waits on what)."""
    return st.session_state.setdefault("sv_session_id", uuid.uuid4().hex)


def place_message(place: Place, label: str) -> tuple[str, float | None, str]:
    """What a waiting page shows: ("info", None, its place in line) or ("progress", fraction, text)."""
    if place.state == "queued":
        wait = "estimating the wait" if place.wait_s is None else f"~{5 * math.ceil(place.wait_s / 5):.0f} s"
        runs = "run" if place.ahead == 1 else "runs"
        return "info", None, (f"{label}: waiting in line, {place.ahead} {runs} ahead of yours, {wait}. "
                              "Change a setting to cancel.")
    done, total, text = place.progress
    others = place.sharers - 1
    shared = f" · shared with {others} other session{'s' if others != 1 else ''}" if others > 0 else ""
    left = "" if place.wait_s is None else f" · about {max(1, math.ceil(place.wait_s)):.0f} s left"
    return "progress", min(1.0, done / max(1, total)), f"{text or label}{left}{shared}"


def _draw_message(box, message: tuple[str, float | None, str]) -> None:
    kind, fraction, text = message
    if kind == "info":
        box.info(text, icon="⏳")
    else:
        box.progress(fraction, text=text)


def shared_result(key: tuple, compute, label: str, button: str | None = None, button_key: str | None = None,
                  hint: str | None = None):
    """``compute``'s result for ``key``, computed once and shown to every session that asks; None until it exists.

    A costly computation names a ``button``: it starts when someone presses it (``hint`` says so meanwhile),
    and a page whose result is already stored, or under way for another session, shows it without a press.
    """
    if button is not None and not shared_work().known(key) and not st.button(button, type="primary", key=button_key):
        if hint:
            st.info(hint)
        return None
    return remembered(key, compute, label)


HALL_SHARERS = 8  # a run this many sessions wait for is a class on one link
HALL_WAIT_SECONDS = 10.0  # the longest a newcomer to a busy hall lets the run go first


def let_the_hall_run_first() -> None:
    """A session's first page run, arriving while a class waits for one run (``HALL_SHARERS`` or more), waits for
    that run (GIL-free, at most ``HALL_WAIT_SECONDS``) before building its page: the newcomer most likely wants the
    same trace, and its page run would take the CPU from the model computing it (300 page runs against one trace
    on 2 cores). Any other first run, and every later run, goes on at once."""
    if st.session_state.get("sv_arrived"):
        return
    st.session_state.sv_arrived = True
    hall = hall_run(shared_work())
    if hall is not None:
        hall.finished.wait(HALL_WAIT_SECONDS)


def hall_run(work: SharedWork) -> Job | None:
    """The running job a class waits for (``HALL_SHARERS`` sessions or more), if there is one."""
    with work.lock:
        return next((job for job in work.running if len(job.waiters) >= HALL_SHARERS), None)


def redraw_interval(sharers: int) -> float:
    """How long a waiting page sleeps between looks at its run (it wakes at once when the run ends). Each look may
    redraw the page and is where streamlit stops a run whose user changed a setting; all the pages waiting for one
    run look about ``WAKEUPS_PER_SECOND`` times a second in all, so a hall waiting for one trace leaves the CPU to
    it (300 sessions: every 3 s, not 1,200 looks a second): POLL_SECONDS up to HEARTBEAT_SECONDS while a few share
    the run, then sharers / WAKEUPS_PER_SECOND, at most LONGEST_SLEEP_SECONDS."""
    if sharers <= HEARTBEAT_SECONDS / POLL_SECONDS:
        return POLL_SECONDS
    return min(LONGEST_SLEEP_SECONDS, max(HEARTBEAT_SECONDS, sharers / WAKEUPS_PER_SECOND))


def remembered(key: tuple, compute, label: str):
    """The shared result for ``key``, computed once for every session that asks (None on failure).

    ``compute(on_progress)`` runs on the process's work pool (:class:`SharedWork`): identical requests
    wait for one run, distinct ones queue first come first served, and the page shows its place in
    line or the run's progress until the result (or the failure's message) arrives. A rerun (the user
    changed a setting) or a closed tab leaves the queue.
    """
    work = shared_work()
    cached = work.cached(key)
    if cached is not None:
        return cached
    session, box, shown, sent = _session_id(), st.empty(), None, 0.0
    job = work.submit(key, compute, session, label)
    try:
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


def get_trace(config: DecodeConfig, prompt: str) -> Trace | None:
    """The cached trace, or a fresh run with a progress bar over rounds; failures become messages."""

    def compute(on_progress) -> Trace:
        config.validated()
        on_progress(0, config.max_new_tokens, LOADING_NOTE)
        pair = pair_for(config)
        return speculative_decode(config, prompt=prompt, pair=pair, on_round=lambda record, new: on_progress(
            new, config.max_new_tokens, f"Round {record.index + 1} · {new}/{config.max_new_tokens} tokens"))

    return remembered(trace_key(config, prompt), compute, "Decoding")
