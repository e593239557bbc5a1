"""The app's models and defaults: each pair loaded once per process and shared by every session, this machine's
measured defaults, and the message every failure becomes in a page (never a traceback). What a page shows while
shared work runs is :mod:`specviz.ui.waiting`."""

from __future__ import annotations

import logging
import os

import streamlit as st
import torch

from specviz.analysis.defaults import defaults_once, stored_defaults
from specviz.analysis.roofline import MeasuredDefaults
from specviz.config import EMBEDDED, ConfigError, DecodeConfig
from specviz.engine import ModelPair, load_pair, uses_draft_model
from specviz.models.errors import ModelLoadError, VocabularyMismatchError

log = logging.getLogger(__name__)
USER_ERRORS = (ConfigError, ModelLoadError, VocabularyMismatchError)


LESSON_TEMPERATURE = 0.7  # the app's sampling default: a small model's sampled text reads well (at 1.0 it wanders)


def app_defaults() -> DecodeConfig:
    """The app's defaults: the device from $SPECVIZ_DEVICE (auto: the GPU when there is one); the embedded pair's
    precision and block size (:func:`pair_defaults`); sampling at ``LESSON_TEMPERATURE``."""
    config = DecodeConfig(device=os.environ.get("SPECVIZ_DEVICE", "auto"))
    own = pair_defaults(config.target, config.draft, config.device)
    return config.replace(temperature=LESSON_TEMPERATURE, **({"dtype": own.dtype, "gamma": own.gamma} if own else {}))


@st.cache_resource(show_spinner="Measuring this machine once: the embedded pair's passes over 1 to 9 tokens …")
def machine_defaults(device: str) -> MeasuredDefaults | None:
    """The embedded pair's precision and block size on this machine (:mod:`~specviz.analysis.defaults`): stored,
    else measured, once per process; None (the config's own defaults) where the pair cannot be had."""
    try:
        return defaults_once(DecodeConfig(device=device))
    except USER_ERRORS + (OSError, ValueError) as exc:
        log.warning("this machine's defaults not measured: %s", exc)
        return None


def pair_defaults(target: str, draft: str | None, device: str) -> MeasuredDefaults | None:
    """A pair's own precision and block size on this machine: the embedded pair's measured here, another's as
    ``specviz fetch`` or ``python -m specviz machine`` stored them (None: not measured on this machine yet). A
    precision $SPECVIZ_DTYPE names wins for every pair (with the config's γ unless measured in that precision)."""
    embedded = (target, draft) == (EMBEDDED, None)
    measured = machine_defaults(device) if embedded else stored_defaults(target, draft, device)
    wanted = os.environ.get("SPECVIZ_DTYPE")
    if not wanted or (measured is not None and measured.dtype == wanted):
        return measured
    return MeasuredDefaults(wanted, DecodeConfig().gamma, f"$SPECVIZ_DTYPE sets {wanted} on this server.")


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


