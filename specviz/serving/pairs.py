"""The app's models and defaults, once per process for every session: each pair loaded once and shared (the newest
``PAIRS_KEPT`` kept), this machine's measured defaults, and the message every failure becomes in a page (never a
traceback)."""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable

import torch

from specviz.analysis.defaults import (
    LESSON_PRECISIONS,
    PAIR_DEFAULTS,
    at_precision,
    defaults_file,
    defaults_once,
    due_for_remeasure,
    follow_pair,
    stored_defaults,
)
from specviz.analysis.draft_precision import precisions_on
from specviz.analysis.replay import MeasuredDefaults
from specviz.analysis.roofline import pair_profiles
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair
from specviz.limits import EMBEDDED
from specviz.models.loading import bytes_to_load, forget_loaded_models
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.machine import give_back_freed_heap, memory_budget_bytes, resident_bytes, resolve_device
from specviz.serving.built_once import BuiltOnce
from specviz.settings import ConfigError, ModelLoadError, VocabularyMismatchError

log = logging.getLogger(__name__)
USER_ERRORS = (ConfigError, ModelLoadError, VocabularyMismatchError)
LESSON_TEMPERATURE = 0.7  # the app's sampling default: a small model's sampled text reads well (at 1.0 it wanders)
PAIRS_KEPT = 6  # model pairs held in memory at once, least recently used dropped first
LOAD_HEADROOM = 1.1  # a load's peak over its estimate (bytes_to_load): the interpreter's own allocations on top
# (a margin set with the memory budget; benchmarks/bench_memory.py prints each load's peak against the budget)
LOADING_NOTE = (
    "Loading the models (once per server; the first load on a machine also measures its matrix kernels and "
    "each pass over 1 to 9 tokens: seconds for the embedded pair, one to three minutes for a 1.5B model, longer "
    "while the machine is busy) …"
)


def _measure_machine_defaults(device: str) -> MeasuredDefaults | None:
    try:
        return defaults_once(DecodeConfig(device=device))
    except USER_ERRORS + (OSError, ValueError) as exc:
        log.warning("this machine's defaults not measured: %s", exc)
        return None


MACHINE_DEFAULTS = BuiltOnce(_measure_machine_defaults, kept=4)
"""The embedded pair's precision and block size per device (:mod:`~specviz.analysis.defaults`): stored, else
measured, once per process; None (the config's own defaults) where the pair cannot be had."""
IDLE_POLL_S = 1.0  # how often a measurement waiting for the sessions' work looks again
_measuring: dict[str, threading.Thread] = {}
_measuring_lock = threading.Lock()


def defaults_known(device: str) -> bool:
    """Whether the embedded pair's defaults on ``device`` are at hand: measured in this process, or stored by an
    earlier one (then read now: a file) and not chosen from busy profiles an hour or more ago (those are measured again
    in the background, :func:`~specviz.analysis.defaults.due_for_remeasure`)."""
    if MACHINE_DEFAULTS.has(device):
        return True
    stored = stored_defaults(EMBEDDED, None, device)
    if stored is None or not set(precisions_on(device, LESSON_PRECISIONS)) <= set(stored.fastest):
        return False
    if due_for_remeasure(defaults_file(EMBEDDED, None, device), stored):  # measured busy long ago: measured again
        return False
    MACHINE_DEFAULTS.get(device)
    return True


def measure_in_background(device: str, busy: Callable[[], bool]) -> None:
    """Measure the embedded pair's defaults on ``device`` on a thread of its own (once per process and device), once
    ``busy()`` (the work sessions wait for) is false: a fresh start shows its first round first, and the pages take
    the machine's measured defaults and figures when they are there (:func:`pair_defaults` says None meanwhile)."""

    def measure() -> None:
        while busy():
            time.sleep(IDLE_POLL_S)
        MACHINE_DEFAULTS.get(device)

    with _measuring_lock:
        if device not in _measuring:
            _measuring[device] = threading.Thread(target=measure, name="specviz-machine-defaults", daemon=True)
            _measuring[device].start()


def app_device() -> str:
    """The app's device: $SPECVIZ_DEVICE (auto: the GPU when there is one)."""
    return os.environ.get("SPECVIZ_DEVICE", "auto")


def app_defaults() -> DecodeConfig:
    """The app's defaults: on :func:`app_device`, the embedded pair's precision, block size and draft precision
    (:func:`pair_defaults`); sampling at ``LESSON_TEMPERATURE``."""
    config = DecodeConfig(device=app_device())
    own = pair_defaults(config.target, config.draft, config.device)
    measured = {name: getattr(own, name) for name in PAIR_DEFAULTS} if own else {}
    return config.replace(temperature=LESSON_TEMPERATURE, **measured)


def with_pair_defaults(config: DecodeConfig) -> DecodeConfig:
    """``config`` with its pair's measured precision, block size and draft precision (as the app opens the pair)
    wherever it still holds the settings' own default (a value the user gave is kept)."""
    start = {name: DecodeConfig().value(name) for name in PAIR_DEFAULTS}
    own = pair_defaults(config.target, config.draft, config.device)
    values, _ = follow_pair({name: config.value(name) for name in PAIR_DEFAULTS}, start, own)
    return config.replace(**values)


LESSON_GAMMA_MIN = 3  # the smallest block a lesson opens on: a round of one or two drafted tokens has barely a block
# to verify in one pass (Leviathan et al. 2023, Fig. 1), whatever this machine measures fastest (said beside it)


def lesson_block(own: MeasuredDefaults | None) -> MeasuredDefaults | None:
    """``own`` with γ at least :data:`LESSON_GAMMA_MIN` (the fastest measured stays in ``own.fastest``, and the pages
    name it beside the lesson's block: :func:`specviz.ui.views.fastest_note`)."""
    if own is None or own.gamma >= LESSON_GAMMA_MIN:
        return own
    return dataclasses.replace(own, gamma=LESSON_GAMMA_MIN)


def pair_defaults(target: str, draft: str | None, device: str) -> MeasuredDefaults | None:
    """A pair's own precision and block size on this machine: the embedded pair's measured here (None until then:
    :func:`measure_in_background`), another's as ``specviz fetch`` or ``python -m specviz machine`` stored them
    (None: not measured on this machine yet). A
    precision $SPECVIZ_DTYPE names wins for every pair, on the draft precision, γ and confidence exit measured
    fastest for it here (the config's own where that precision was not measured)."""
    if (target, draft) == (EMBEDDED, None):
        measured = MACHINE_DEFAULTS.get(device) if defaults_known(device) else None  # else: measured in the background
    else:
        measured = stored_defaults(target, draft, device)
    wanted = os.environ.get("SPECVIZ_DTYPE")
    if not wanted:
        return lesson_block(measured)
    at = at_precision(measured, wanted) if measured is not None else None
    said = f"$SPECVIZ_DTYPE sets {wanted} on this server."
    return lesson_block(at) or MeasuredDefaults(wanted, max(LESSON_GAMMA_MIN, DecodeConfig().gamma), said)


def _load(config: DecodeConfig) -> ModelPair:
    """The pair a :func:`loading_config` names, loaded (after :func:`make_room`), with its drafter's passes profiled as
    its target's are (:func:`~specviz.analysis.roofline.pair_profiles`: once per machine, part of the load), so the
    pages that open on it predict from what was measured and measure nothing themselves."""
    with _loading:  # one load at a time: two loads passing the budget's check together would overshoot it
        make_room(config)
        pair = load_pair(config)
        pair_profiles(config, pair)
    gc.freeze()  # the models' objects live as long as the pair: the full collection after each page run skips them
    return pair


_loading = threading.Lock()
LOADED_PAIRS = BuiltOnce(_load, kept=PAIRS_KEPT)


def make_room(config: DecodeConfig) -> None:
    """Before loading ``config``'s models: let go of the models no kept pair uses, then drop the least recently used
    pairs nobody is using until the server's memory plus what the new models need (:func:`bytes_to_load`, counted
    anew as models go) fits its budget (:func:`memory_budget_bytes`); refuse with a message when even that is not
    enough (the pairs in use hold the rest)."""
    budget = memory_budget_bytes()
    if budget is None or resolve_device(config.device).type != "cpu":  # the budget is the CPU's memory
        return
    models = [(config.target, config.dtype), (config.draft_spec, config.draft_precision)]

    def needed() -> int:  # the target loads first, then the draft beside what the target keeps
        (target_peak, target_kept), (draft_peak, _) = (
            bytes_to_load(s, config.device, d) if s else (0, 0) for s, d in models
        )
        return max(target_peak, target_kept + draft_peak)

    def release() -> None:  # the models only dropped pairs held (frozen at their load: thawed to be collected)
        forget_loaded_models(keep=[m for pair in LOADED_PAIRS.values() for m in (pair.target, pair.draft) if m])
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        give_back_freed_heap()

    release()
    if not LOADED_PAIRS.evict_until(lambda: resident_bytes() + LOAD_HEADROOM * needed() <= budget, release):
        raise ModelLoadError(
            f"Not enough memory for this pair now: it needs about {needed() / 1e9:.1f} GB, and this server already "
            f"holds {resident_bytes() / 1e9:.1f} GB of its {budget / 1e9:.1f} GB budget in pairs that running "
            "computations use. Try again when they finish, or pick a lower precision or a smaller pair."
        )


def pair_for(config: DecodeConfig) -> ModelPair:
    """The process's shared model pair for ``config`` (loaded on first use; what every session decodes with)."""
    return LOADED_PAIRS.get(loading_config(config))


def pair_loaded(config: DecodeConfig) -> bool:
    """Whether :func:`pair_for` returns ``config``'s pair at once (loaded already)."""
    return LOADED_PAIRS.has(loading_config(config))


def loading_config(config: DecodeConfig) -> DecodeConfig:
    """The config ``config``'s pair is loaded from and kept under: the settings loading reads (the target, the draft
    model the drafter loads, the drafter, the device, the precisions: the draft's only where there is a draft), every
    other setting at its default, so configs that differ in how they decode share one pair."""
    draft = config.draft_spec
    return DecodeConfig(
        target=config.target,
        draft=draft,
        drafter=config.drafter,
        device=config.device,
        dtype=config.dtype,
        draft_dtype=config.draft_precision if draft else None,
    )


def loaded_target(config: DecodeConfig) -> LoadedModel | None:
    """The target ``config`` names, if a loaded pair holds it (in ``config``'s precision where one does; nothing is
    loaded here): its profile predicts a work before it runs."""
    held = [pair.target for pair in LOADED_PAIRS.values() if pair.target.spec == config.target]
    return next((t for t in held if t.precision == config.dtype), held[0] if held else None)


def describe_failure(exc: BaseException) -> str:
    """The message a page shows for a failed computation (user errors verbatim, the rest summarised)."""
    if isinstance(exc, USER_ERRORS):
        return str(exc)
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return (
            "Out of memory: this model pair, prompt or max new tokens is too large for this machine. "
            "Pick smaller models or fewer tokens."
        )
    log.error("computation failed", exc_info=exc)
    return f"Computation failed: {type(exc).__name__}: {str(exc)[:300]}"


def trace_key(config: DecodeConfig, prompt: str, *extra: Hashable) -> tuple[Hashable, ...]:
    """The key a computation on ``config`` and ``prompt`` is shared under (``extra``: what else it depends on)."""
    return tuple(sorted((k, str(v)) for k, v in config.to_dict().items())) + (("prompt", prompt),) + extra
