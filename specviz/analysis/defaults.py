"""Each model pair's default precision and block size on this machine: measured once, kept on disk.

A pair's default is the precision that keeps the lesson true (:func:`~specviz.analysis.replay.measured_defaults`:
float32 where its speculation, predicted at this machine's v(k) and c, pays; else the faster precision, lossless only
up to rounding) at the draft's greedy acceptance, then the draft precision and γ fastest in that precision
(:func:`~specviz.analysis.replay.fastest_drafts`: greedy rounds replayed along the target's own text at this
machine's costs; ``--fastest`` reads the same for any target precision, a confidence exit included). Each draft
precision is read along the target's greedy text of held-out prompts (:func:`draft_replay`). Measuring loads the
pair in each precision in turn (never both at once: the published 1.5B target takes 7 GB in float32), so it runs
where a wait is expected (``specviz fetch``, ``python -m specviz machine``) and the app reads the stored result.

No streamlit.
"""

from __future__ import annotations

import dataclasses
import fcntl
import gc
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from transformers import DynamicCache

from specviz import DATA_DIR
from specviz.analysis.claims import a_target, draft_words, exit_words, loses_words
from specviz.analysis.draft_precision import precisions_on
from specviz.analysis.replay import (
    DraftReplay,
    FastestDraft,
    MeasuredDefaults,
    Profiles,
    RoundOverheads,
    fastest_drafts,
    measured_defaults,
)
from specviz.analysis.roofline import pair_profiles
from specviz.cache import cache_root, write_json_atomically
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair, prompt_ids_for, speculative_decode
from specviz.engine.baseline import autoregressive_decode
from specviz.models.loading import forget_loaded_models
from specviz.models.profile import FORMAT, PassProfile
from specviz.registry.drafters import DRAFT_MODEL
from specviz.registry.rules import GREEDY
from specviz.runtime.cpu.compiled import library_path
from specviz.runtime.draft_forward import draft_forward
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.machine import machine_key, resolve_device
from specviz.settings import check
from specviz.training.draft_model import HELDOUT_FILE
from specviz.training.teacher_text import read_prompt_file

LESSON_PRECISIONS = ("float32", "bfloat16")  # a pair's default precision: exact, or the lesson of rounding
PRECISIONS = (*LESSON_PRECISIONS, "int8", "int4")  # each profiled with every draft precision: --fastest knows them all
ACCEPTANCE_PROMPTS = 3  # held-out prompts of each file (prose and code) the acceptance is measured on
ACCEPTANCE_TOKENS = 48  # of the target's greedy text after each held-out prompt (rounds replayed along it)
OVERHEAD_GAMMA, OVERHEAD_TOKENS = 4, 24  # the engine's run that reads its rounds' own costs (round_overheads)
CHOICES = 9  # bumped when what a pair's defaults choose changes (2: draft precision; 3: int8; 4: int4; 5: α per token;
# 6: rounds replayed, confidence exits; 7: a choice from busy profiles marked so; 8: a lesson never opens on a losing
# draft while one with a confidence exit pays; 9: a busy choice never replaces a quiet one, and states no figure)
MEASURE_BUSY_AGAIN_S = 3600  # defaults chosen from busy profiles are measured again by a start this much later
BUSY_WORDS = (
    "(Chosen from passes measured while other work held the cores: it opens the lesson alike on every replica, no "
    f"figure is stated from it, and a start {MEASURE_BUSY_AGAIN_S / 3600:g} h on measures again.)"
)
PAIR_DEFAULTS = ("dtype", "gamma", "draft_dtype", "confidence_exit")  # the settings a pair's measured defaults set


def defaults_file(target: str, draft: str | None, device: str) -> Path:
    """Where a pair's measured defaults on this machine are kept (keyed like the profiles they come from, the build of
    the C kernels the quantised precisions run included: a changed kernel chooses again; "auto" as the device it picks
    here, so the app's and a server's ``SPECVIZ_DEVICE=cpu`` share one measurement)."""
    where = str(resolve_device(device)) if device == "auto" else device
    kernels = library_path("native").name
    key = "|".join((target, str(draft), where, machine_key(), torch.__version__, str(FORMAT), str(CHOICES), kernels))
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


Continuations = list[tuple[list[int], list[int]]]  # (prompt ids, the target's greedy continuation) per prompt


def heldout_prompt_ids(config: DecodeConfig, pair: ModelPair) -> list[list[int]]:
    """The first ``ACCEPTANCE_PROMPTS`` held-out prompts of the prose and the code files (no shipped draft saw them),
    as token ids (chat template as the config sets it)."""
    prompts = [
        p
        for path in (HELDOUT_FILE, DATA_DIR / "heldout_code_prompts.txt")
        for p in read_prompt_file(path)[:ACCEPTANCE_PROMPTS]
    ]
    return [prompt_ids_for(pair, config, prompt, None) for prompt in prompts]


def target_continuations(config: DecodeConfig, pair: ModelPair) -> Continuations:
    """(prompt ids, the target's own greedy continuation of ``ACCEPTANCE_TOKENS`` tokens) for each held-out prompt."""
    greedy = config.replace(rule=GREEDY, max_new_tokens=ACCEPTANCE_TOKENS)
    return [(ids, autoregressive_decode(greedy, pair, ids)[0]) for ids in heldout_prompt_ids(greedy, pair)]


def draft_replay(config: DecodeConfig, draft: LoadedModel, continuations: Continuations) -> DraftReplay:
    """The draft read along the target's greedy continuations (:class:`~specviz.analysis.replay.DraftReplay`), fed
    the target's tokens, one pass a prompt, through its drafting head (FR-Spec's trimmed one where the config asks):
    at each position whether its greedy token is the target's own next token, and its confidence max q there. Its
    ``alpha`` is the per-token α of Leviathan et al. (2023, Sec. 3.1: for greedy rules P(argmax q = argmax p)):
    every drafted position a greedy round verifies is such a position, for an accepted prefix is the target's own."""
    forward = draft_forward(draft.draft_head_size(config.draft_vocab))
    agreed, confidence = [], []
    for prompt, continuation in continuations:
        if not continuation:
            continue
        fed = prompt + continuation[:-1]
        logits = forward(draft, fed, DynamicCache(), 0, len(continuation), None).float().cpu()  # (len, V)
        agreed.append(tuple((logits.argmax(-1) == torch.tensor(continuation)).tolist()))
        confidence.append(tuple(torch.softmax(logits, -1).amax(-1).tolist()))
    return DraftReplay(tuple(agreed), tuple(confidence))


def round_overheads(config: DecodeConfig, pair: ModelPair, target: PassProfile, draft: PassProfile) -> RoundOverheads:
    """What the engine's greedy rounds cost beyond the passes the profiles time
    (:class:`~specviz.analysis.replay.RoundOverheads`), read from its own trace: ``OVERHEAD_TOKENS`` decoded at
    γ = ``OVERHEAD_GAMMA`` after the last held-out prompt, the first round (the prompt's passes and the run's first
    allocations) left out. A drafted token's share is its draft time past the draft's one-token step; a verified
    position's is the verification's time past the target's pass over that many positions (never below 0)."""
    prompt = heldout_prompt_ids(config, pair)[-1]
    greedy = config.replace(drafter=DRAFT_MODEL, rule=GREEDY, gamma=OVERHEAD_GAMMA, confidence_exit=0.0)
    rounds = speculative_decode(greedy.replace(max_new_tokens=OVERHEAD_TOKENS), prompt_ids=prompt, pair=pair).rounds
    timed = rounds[1:] or rounds
    drafted = sum(r.draft_forward_passes for r in timed)
    positions = sum(r.target_positions for r in timed)
    drafting = sum(r.draft_ms for r in timed) - drafted * draft.step_ms
    verifying = sum(r.verify_ms - target.pass_cost_ms(r.target_positions) for r in timed)
    return RoundOverheads(max(0.0, drafting / max(1, drafted)), max(0.0, verifying / max(1, positions)))


def measure_pair_defaults(
    config: DecodeConfig,
    release: bool = False,
    targets: tuple[str, ...] = PRECISIONS,
    on_step: Callable[[str], None] | None = None,
) -> MeasuredDefaults:
    """Profile the config's pair in each of the ``targets`` precisions (the lesson's two first) with its draft in
    each draft precision, take each draft precision's greedy acceptance against the float32 target's greedy text,
    choose the target's precision (the draft at the target's own precision decides it, as before), then the fastest
    draft precision and γ for each target precision measured, and store them (:func:`keep_defaults`: a choice made
    from a busy profile is marked so, states no figure, never replaces a quiet one, and is measured again by a start an
    hour on, :func:`due_for_remeasure`). ``release``: free each target precision's models before loading the next (a
    command's process; the app keeps what it loaded). ``on_step(words)``: told as each (target, draft) precision
    starts (a command shows its progress: a 1.5B pair takes minutes)."""
    profiles: Profiles = {}
    overheads: dict[str, RoundOverheads] = {}  # by target precision: the engine's work is the same for every draft
    replays: dict[str, DraftReplay] = {}
    continuations: Continuations = []
    drafts = precisions_on(config.device)
    targets_here = precisions_on(config.device, targets)
    for t, dtype in enumerate(targets_here):
        for d, draft_dtype in enumerate(drafts):
            if on_step:
                step, steps = t * len(drafts) + d + 1, len(targets_here) * len(drafts)
                on_step(f"{step} of {steps}: the target in {dtype}, the draft in {draft_dtype}")
            precise = config.replace(dtype=dtype, draft_dtype=draft_dtype)
            pair = load_pair(precise)
            target, draft = pair_profiles(precise, pair)
            assert draft is not None, "a pair's defaults are measured for its draft model, which has a forward"
            profiles[(dtype, draft_dtype)] = (target, draft)
            if dtype not in overheads:  # read beside the first draft precision met
                overheads[dtype] = round_overheads(precise, pair, target, draft)
            if draft_dtype not in replays:  # first met beside the float32 target, whose greedy text decides
                continuations = continuations or target_continuations(precise, pair)
                assert pair.draft is not None, "a pair's defaults are measured for its draft model"
                replays[draft_dtype] = draft_replay(precise, pair.draft, continuations)
            del pair
        if release:
            forget_loaded_models()
            gc.collect()
    own = {dtype: profiles[(dtype, dtype)] for dtype in LESSON_PRECISIONS}  # the draft at the target's own precision
    measured = measured_defaults(own, replays[LESSON_PRECISIONS[0]].alpha)
    fastest = fastest_drafts(profiles, replays, overheads)
    drafting_gamma = fastest_drafts(profiles, replays, overheads, exits=(0.0,))[measured.dtype]  # γ tokens a round
    lesson = lesson_draft(drafting_gamma, fastest[measured.dtype])
    measured = dataclasses.replace(
        measured,
        gamma=lesson.gamma,
        draft_dtype=lesson.draft_dtype,
        confidence_exit=lesson.confidence_exit,
        fastest=fastest,
        reason=f"{measured.reason} The lesson's draft here: {lesson.draft_dtype} at γ = {lesson.gamma}"
        f"{exit_words(lesson.confidence_exit)}, predicted {lesson.speedup:.2f}× from its rounds replayed on held-out "
        f"text (greedy acceptance {', '.join(f'{d} {r.alpha:.2f}' for d, r in replays.items())}; the target decides "
        "every token, so the draft's precision never changes the output).",
    )
    if not all(profile.quiet for pair in profiles.values() for profile in pair):
        measured = dataclasses.replace(measured, busy=True, reason=f"{measured.reason} {BUSY_WORDS}")
    keep_defaults(config, measured)
    return measured


def keep_defaults(config: DecodeConfig, measured: MeasuredDefaults) -> bool:
    """Store a pair's ``measured`` defaults unless they were chosen from busy profiles and a quiet choice is stored (a
    measurement made while a class is served never replaces the machine's quiet one); whether they were stored. A busy
    choice is stored where nothing quiet is: replicas of one app then open a link on the same γ and precision (its
    figures are stated by no page)."""
    stored = stored_defaults(config.target, config.draft, config.device)
    if measured.busy and stored is not None and not stored.busy:
        return False
    store_defaults(config.target, config.draft, config.device, measured)
    return True


def due_for_remeasure(path: Path, stored: MeasuredDefaults) -> bool:
    """Whether ``stored`` (the defaults in ``path``) is to be measured again: chosen from profiles measured busy, at
    least ``MEASURE_BUSY_AGAIN_S`` ago (a later start, not every process of a busy hour: measuring fed the load)."""
    try:
        return stored.busy and time.time() - path.stat().st_mtime >= MEASURE_BUSY_AGAIN_S
    except OSError:
        return False


def defaults_once(
    config: DecodeConfig, release: bool = False, targets: tuple[str, ...] = LESSON_PRECISIONS
) -> MeasuredDefaults:
    """The config's pair's stored defaults, else measured and stored, one process at a time: replicas of one app
    starting together on a machine wait for the first and read its choice, so they agree on the default precision
    and γ, and a class's link means the same trace on each of them. The app asks for the lesson's precisions only
    (what it opens on: a first start measures two target precisions, not four); a stored result that lacks one of
    ``targets`` (``--fastest int8,int4`` after the app's first start) is measured again with them all, and one chosen
    from busy profiles an hour ago or more (:func:`due_for_remeasure`) in the precisions it holds; a quiet choice is
    never replaced by a busy one (:func:`keep_defaults`). ``release``: as :func:`measure_pair_defaults`."""
    path = defaults_file(config.target, config.draft, config.device)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stored = stored_defaults(config.target, config.draft, config.device)
        if stored is None:
            return measure_pair_defaults(config, release, targets)
        if not set(precisions_on(config.device, targets)) <= set(stored.fastest):
            return measure_pair_defaults(config, release, PRECISIONS)
        if due_for_remeasure(path, stored):  # the precisions it holds, no more
            return measure_pair_defaults(config, release, tuple(p for p in PRECISIONS if p in stored.fastest))
        return stored


def lesson_draft(drafting_gamma: FastestDraft, with_exit: FastestDraft) -> FastestDraft:
    """The draft a pair's lesson opens on: ``drafting_gamma``, the fastest that drafts γ tokens a round (no confidence
    exit, as the lesson draws its rounds), unless it loses to the target alone where ``with_exit``, the fastest with a
    confidence exit in the same target precision, pays: then that one (a default never chooses a losing configuration
    while another pays)."""
    return with_exit if with_exit.pays and not drafting_gamma.pays else drafting_gamma


class FastestChoice(NamedTuple):
    """What ``--fastest`` runs: the config, the choice in words, and whether it pays (its replayed rounds beat the
    target alone; where no draft does, the config is the one that comes closest, and only the target alone races)."""

    config: DecodeConfig
    words: str
    pays: bool


def fastest_choice(config: DecodeConfig, measured: MeasuredDefaults, allowed: tuple[str, ...] = ()) -> FastestChoice:
    """``config`` (its drafter the draft model) on its pair's fastest configuration in ``measured`` (the draft
    precision, γ and confidence exit: :func:`~specviz.analysis.replay.fastest_drafts`) for its target precision, or,
    given ``allowed`` target precisions, for the one of them whose replayed tokens a second are highest among those
    that pay (the closest of them all where none does)."""
    known, candidates = ", ".join(measured.fastest), allowed or (config.dtype,)
    for dtype in candidates:
        check(dtype in measured.fastest, f"--fastest knows targets in {known}, not {dtype!r}")
    ranked = {dtype: measured.fastest[dtype] for dtype in candidates}
    dtype = max(ranked, key=lambda d: (ranked[d].pays, ranked[d].tokens_per_s))
    fastest = ranked[dtype]
    chosen = config.replace(
        dtype=dtype, draft_dtype=fastest.draft_dtype, gamma=fastest.gamma, confidence_exit=fastest.confidence_exit
    ).validated()
    among = f" (the fastest of {', '.join(allowed)})" if allowed else ""
    if measured.busy:  # a replay of busy passes chooses, and states nothing as this machine's
        return FastestChoice(
            chosen,
            f"--fastest: {a_target(dtype)}{among}, {draft_words(fastest)}, chosen from passes measured while other "
            "work held the cores: no figure is stated from them (`python -m specviz machine` on a quiet machine "
            "measures them again)."
            + ("" if fastest.pays else " That replay found no draft that pays: only the target alone runs."),
            fastest.pays,
        )
    if not fastest.pays:
        return FastestChoice(chosen, f"--fastest: {loses_words(dtype, fastest)} Only the target alone runs.", False)
    return FastestChoice(
        chosen,
        f"--fastest: {a_target(dtype)}{among}, {draft_words(fastest)} (predicted {fastest.speedup:.2f}× its target "
        f"alone, {fastest.tokens_per_s:.1f} tokens/s, replayed on held-out text at this machine's costs)",
        True,
    )


def fastest_config(config: DecodeConfig, allowed: tuple[str, ...] = ()) -> FastestChoice:
    """:func:`fastest_choice` from the pair's defaults measured on this machine in every precision (measured now where
    they were not)."""
    drafted = config.replace(drafter=DRAFT_MODEL)
    check(
        bool(drafted.draft_spec), "--fastest needs a draft model: name one with --draft (the embedded target has one)"
    )
    return fastest_choice(drafted, defaults_once(drafted, release=True, targets=PRECISIONS), allowed)


def at_precision(own: MeasuredDefaults, dtype: str) -> MeasuredDefaults | None:
    """A pair's measured defaults for a target in ``dtype``: ``own`` where that is its default precision, else the
    draft precision, γ and confidence exit measured fastest for that precision here (None: not measured in it)."""
    if own.dtype == dtype:
        return own
    if dtype not in own.fastest:
        return None
    fastest = own.fastest[dtype]
    return MeasuredDefaults(
        dtype,
        fastest.gamma,
        f"The fastest draft replayed here for {a_target(dtype)}: {fastest.draft_dtype} at γ = {fastest.gamma}"
        f"{exit_words(fastest.confidence_exit)} (predicted {fastest.speedup:.2f}× its target alone, its rounds "
        "replayed on held-out text)." + (f" {BUSY_WORDS}" if own.busy else ""),
        fastest.draft_dtype,
        own.fastest,
        fastest.confidence_exit,
        own.busy,
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
