"""Each model pair's default precision and block size on this machine: measured once, kept on disk.

A pair's default is the precision that keeps the lesson true (:func:`~specviz.analysis.roofline.measured_defaults`:
float32 where its speculation, priced at this machine's v(k) and c, pays; else the faster precision, lossless only
up to rounding) at the draft's greedy acceptance, then the draft precision and γ fastest in that precision
(:func:`~specviz.analysis.roofline.fastest_drafts`; ``--fastest`` reads the same for any target precision). Each
draft precision's acceptance is measured here on held-out prompts. Measuring loads the pair in each precision in
turn (never both at once: the published 1.5B target takes 7 GB in float32), so it runs where a wait is expected
(``specviz fetch``, ``python -m specviz machine``) and the app reads the stored result.

No streamlit.
"""

from __future__ import annotations

import dataclasses
import fcntl
import gc
import hashlib
import json
from pathlib import Path

import torch

from specviz import DATA_DIR
from specviz.analysis.draft_precision import precisions_on
from specviz.analysis.roofline import MeasuredDefaults, fastest_drafts, measured_defaults, pair_profiles
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair
from specviz.models.cache import cache_root, write_json_atomically
from specviz.models.loading import forget_loaded_models
from specviz.models.machine import machine_key
from specviz.models.profile import FORMAT, NOISY, PassProfile
from specviz.registry.drafters import DRAFT_MODEL
from specviz.settings import check
from specviz.training.draft_model import HELDOUT_FILE, heldout_acceptance
from specviz.training.teacher_text import read_prompt_file

LESSON_PRECISIONS = ("float32", "bfloat16")  # a pair's default precision: exact, or the lesson of rounding
PRECISIONS = (*LESSON_PRECISIONS, "int8", "int4")  # each profiled with every draft precision: --fastest knows them all
ACCEPTANCE_PROMPTS = 3  # held-out prompts of each file (prose and code) the acceptance is measured on
ACCEPTANCE_GAMMA, ACCEPTANCE_TOKENS = 4, 32
CHOICES = 4  # bumped when what a pair's defaults choose changes (2: the draft's precision; 3: int8 targets; 4: int4)
PAIR_DEFAULTS = ("dtype", "gamma", "draft_dtype")  # the settings a pair's measured defaults set


def defaults_file(target: str, draft: str | None, device: str) -> Path:
    """Where a pair's measured defaults on this machine are kept (keyed like the profiles they come from)."""
    key = "|".join((target, str(draft), device, machine_key(), torch.__version__, str(FORMAT), str(CHOICES)))
    return cache_root() / "machine" / f"defaults-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def stored_defaults(target: str, draft: str | None, device: str) -> MeasuredDefaults | None:
    """A pair's defaults as measured before on this machine, or None (not measured yet, or an unreadable file)."""
    try:
        with open(defaults_file(target, draft, device), encoding="utf-8") as f:
            return MeasuredDefaults(**json.load(f))
    except (OSError, ValueError, TypeError):
        return None


def store_defaults(target: str, draft: str | None, device: str, measured: MeasuredDefaults) -> None:
    """Write a pair's defaults atomically (a concurrent reader sees all of them or none)."""
    write_json_atomically(defaults_file(target, draft, device), dataclasses.asdict(measured))


def greedy_acceptance(config: DecodeConfig, pair: ModelPair) -> float:
    """The draft's greedy acceptance at γ = ``ACCEPTANCE_GAMMA`` (:func:`~specviz.training.draft_model.
    heldout_acceptance`) on the first held-out prompts of the prose and the code files (no shipped draft saw them)."""
    prompts = [
        p
        for path in (HELDOUT_FILE, DATA_DIR / "heldout_code_prompts.txt")
        for p in read_prompt_file(path)[:ACCEPTANCE_PROMPTS]
    ]
    assert pair.draft is not None, "a pair's defaults are measured for its draft model"
    return heldout_acceptance(
        pair.target,
        pair.draft,
        prompts,
        max_new_tokens=ACCEPTANCE_TOKENS,
        gamma=ACCEPTANCE_GAMMA,
        draft_vocab=config.draft_vocab,
    )


def measure_pair_defaults(config: DecodeConfig, release: bool = False) -> MeasuredDefaults:
    """Profile the config's pair in each precision with its draft in each draft precision, take each draft
    precision's greedy acceptance (measured with the float32 target), choose the target's precision (the draft at
    the target's own precision decides it, as before), then the fastest draft precision and γ for each target
    precision, and store them when every profile was measured on a quiet machine. ``release``: free each target
    precision's models before loading the next (a command's process; the app keeps what it loaded)."""
    profiles: dict[tuple[str, str], tuple[PassProfile, PassProfile]] = {}
    alphas: dict[str, float] = {}
    for dtype in precisions_on(config.device, PRECISIONS):
        for draft_dtype in precisions_on(config.device):
            precise = config.replace(dtype=dtype, draft_dtype=draft_dtype)
            pair = load_pair(precise)
            target, draft = pair_profiles(precise, pair)
            assert draft is not None, "a pair's defaults are measured for its draft model, which has a forward"
            profiles[(dtype, draft_dtype)] = (target, draft)
            if draft_dtype not in alphas:
                alphas[draft_dtype] = greedy_acceptance(precise, pair)
            del pair
        if release:
            forget_loaded_models()
            gc.collect()
    own = {dtype: profiles[(dtype, dtype)] for dtype in LESSON_PRECISIONS}  # the draft at the target's own precision
    measured = measured_defaults(own, alphas[LESSON_PRECISIONS[0]])
    fastest = fastest_drafts(profiles, alphas)
    draft_dtype, gamma, speedup, _ = fastest[measured.dtype]
    measured = dataclasses.replace(
        measured,
        gamma=gamma,
        draft_dtype=draft_dtype,
        fastest=fastest,
        reason=f"{measured.reason} Fastest draft here: {draft_dtype} at γ = {gamma}, {speedup:.2f}× priced "
        f"(greedy acceptance {', '.join(f'{d} {a:.2f}' for d, a in alphas.items())}; the target decides every "
        "token, so the draft's precision never changes the output).",
    )
    if all(profile.spread < NOISY for pair in profiles.values() for profile in pair):
        store_defaults(config.target, config.draft, config.device, measured)
    return measured


def defaults_once(config: DecodeConfig, release: bool = False) -> MeasuredDefaults:
    """The config's pair's stored defaults, else measured and stored, one process at a time: replicas of one app
    starting together on a machine wait for the first and read its choice, so they agree on the default precision
    and γ, and a class's link means the same trace on each of them. ``release``: as :func:`measure_pair_defaults`."""
    path = defaults_file(config.target, config.draft, config.device)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return stored_defaults(config.target, config.draft, config.device) or measure_pair_defaults(config, release)


def fastest_config(config: DecodeConfig, allowed: tuple[str, ...] = ()) -> tuple[DecodeConfig, str]:
    """``config`` on its pair's fastest exact configuration measured on this machine (the draft model, its precision
    and γ: :func:`~specviz.analysis.roofline.fastest_drafts`) for its target precision, or, given ``allowed`` target
    precisions, for the one of them whose priced tokens a second are highest; and the choice in words."""
    drafted = config.replace(drafter=DRAFT_MODEL)
    check(
        bool(drafted.draft_spec), "--fastest needs a draft model: name one with --draft (the embedded target has one)"
    )
    measured = defaults_once(drafted, release=True)
    known = ", ".join(measured.fastest)
    for dtype in allowed or (config.dtype,):
        check(dtype in measured.fastest, f"--fastest knows targets in {known}, not {dtype!r}")
    dtype = max(allowed, key=lambda d: measured.fastest[d][3]) if allowed else config.dtype
    draft_dtype, gamma, speedup, tokens_per_s = measured.fastest[dtype]
    chosen = drafted.replace(dtype=dtype, draft_dtype=draft_dtype, gamma=gamma).validated()
    among = f" (the fastest of {', '.join(allowed)})" if allowed else ""
    return chosen, (
        f"--fastest: a {dtype} target{among}, the draft model in {draft_dtype} at γ = {gamma} ({speedup:.2f}× its "
        f"target alone, {tokens_per_s:.1f} tokens/s, priced on this machine)"
    )


def follow_pair(values: dict, applied: dict, own: MeasuredDefaults | None) -> tuple[dict, dict]:
    """(the settings, the defaults now applied) when the pair changes: each of ``PAIR_DEFAULTS`` that still holds the
    default ``applied`` before takes the new pair's measured one (``own``; None: not measured, nothing changes); one
    the user changed, or the link set (absent from ``applied``), is kept."""
    if own is None:
        return values, applied
    follows = [name for name in PAIR_DEFAULTS if name in applied and values.get(name) == applied[name]]
    return (
        {**values, **{name: getattr(own, name) for name in follows}},
        {**applied, **{name: getattr(own, name) for name in follows}},
    )
