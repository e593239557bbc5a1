"""The process's shared work: models loaded once, every page's computation run once for all sessions.

Models are loaded once per process with ``st.cache_resource`` and shared by every session; every
page's computation (traces, sweeps, comparisons, lab runs) goes through one process-wide
:class:`~specviz.sharedwork.SharedWork`: computed once however many sessions ask, queued fairly,
kept in a store bounded by bytes. Every failure becomes a message in the page, never a traceback.
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid

import streamlit as st
import torch

from specviz.analysis.defaults import measure_pair_defaults, stored_defaults
from specviz.analysis.roofline import MeasuredDefaults
from specviz.config import EMBEDDED, ConfigError, DecodeConfig
from specviz.engine import ModelPair, load_pair, speculative_decode, uses_draft_model
from specviz.engine.trace import Trace
from specviz.models.errors import ModelLoadError, VocabularyMismatchError
from specviz.sharedwork import Place, SharedWork

log = logging.getLogger(__name__)
REDIS_URL_VAR = "SPECVIZ_REDIS_URL"

USER_ERRORS = (ConfigError, ModelLoadError, VocabularyMismatchError)
STORE_MAX_BYTES = int(float(os.environ.get("SPECVIZ_STORE_MB", "1024")) * 2**20)  # finished results kept, by size
WORKERS = max(1, int(os.environ.get("SPECVIZ_WORKERS", "1")))  # computations running at once in this process
POLL_SECONDS = 0.25  # how often a waiting page reads its place in the queue
HEARTBEAT_SECONDS = 2.0  # a waiting page redraws at least this often, even when nothing changed


LESSON_TEMPERATURE = 0.7  # the app's sampling default: a small model's sampled text reads well (at 1.0 it wanders)


def app_defaults() -> DecodeConfig:
    """The app's defaults: the device from $SPECVIZ_DEVICE (auto: the GPU when there is one); the weights'
    precision from $SPECVIZ_DTYPE, else this machine's choice (:func:`machine_defaults`); the best block size
    there; sampling at ``LESSON_TEMPERATURE``."""
    config = DecodeConfig(device=os.environ.get("SPECVIZ_DEVICE", "auto"))
    measured = machine_defaults(config.device)
    dtype = os.environ.get("SPECVIZ_DTYPE") or (measured.dtype if measured else config.dtype)
    gamma = measured.gamma if measured and measured.dtype == dtype else config.gamma
    return config.replace(dtype=dtype, gamma=gamma, temperature=LESSON_TEMPERATURE)


@st.cache_resource(show_spinner="Measuring this machine once: the embedded pair's passes over 1 to 9 tokens …")
def machine_defaults(device: str) -> MeasuredDefaults | None:
    """The embedded pair's precision and block size on this machine (:mod:`~specviz.analysis.defaults`): stored,
    else measured, once per process; None (the config's own defaults) where the pair cannot be had."""
    try:
        return stored_defaults(EMBEDDED, None, device) or measure_pair_defaults(DecodeConfig(device=device))
    except USER_ERRORS + (OSError, ValueError) as exc:
        log.warning("this machine's defaults not measured: %s", exc)
        return None


def pair_defaults(target: str, draft: str | None, device: str) -> MeasuredDefaults | None:
    """A pair's own precision and block size on this machine: the embedded pair's measured here, another's as
    ``specviz fetch`` or ``python -m specviz machine`` stored them (None: not measured on this machine yet)."""
    if (target, draft) == (EMBEDDED, None):
        return machine_defaults(device)
    return stored_defaults(target, draft, device)


@st.cache_resource(show_spinner=False, max_entries=6)
def cached_pair(target: str, draft: str | None, drafter: str, device: str, dtype: str) -> ModelPair:
    return load_pair(DecodeConfig(target=target, draft=draft, drafter=drafter, device=device, dtype=dtype))


def _draft_spec(config: DecodeConfig) -> str | None:
    return config.draft_spec if uses_draft_model(config) else None


def describe_failure(exc: BaseException) -> str:
    """The message a page shows for a failed computation (user errors verbatim, the rest summarised)."""
    if isinstance(exc, USER_ERRORS):
        return str(exc)
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return ("Out of memory: this model pair, prompt or max new tokens is too large for this machine. "
                "Pick smaller models or fewer tokens.")
    log.error("computation failed", exc_info=exc)
    return f"Computation failed: {type(exc).__name__}: {str(exc)[:300]}"


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


def trace_key(config: DecodeConfig, prompt: str, *extra) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in config.to_dict().items())) + (("prompt", prompt),) + extra


def show_user_errors(fn):
    """Run ``fn()``; turn any failure into a message in the page (the app keeps serving). None on failure."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the page must keep serving; the log keeps the traceback
        st.error(describe_failure(exc))
    return None


def pair_for(config: DecodeConfig) -> ModelPair:
    """The process's shared model pair for ``config`` (what a shared computation, on a worker, decodes with)."""
    return cached_pair(config.target, _draft_spec(config), config.drafter, config.device, config.dtype)


LOADING_NOTE = ("Loading the models (once per server; the first load on a machine also measures its matrix kernels and "
                "each pass over 1 to 9 tokens: seconds for the embedded pair, about a minute for a 1.5B model) …")


def page_pair(config: DecodeConfig) -> ModelPair | None:
    """The shared pair for a page that reads the models itself: a spinner while loading, a message on failure."""
    loading = f"Loading {config.target}" + (f" and {config.draft}" if _draft_spec(config) else "") + (
        " (the first load on a machine also measures its kernels: seconds) …")
    with st.spinner(loading):
        return show_user_errors(lambda: pair_for(config))


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
        while not job.finished.wait(POLL_SECONDS):
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
