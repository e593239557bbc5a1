"""The cost ratio c of a drafter on this device: draft time per drafted token over one target forward."""

from __future__ import annotations

import statistics
import time

from specviz.analysis.roofline import cost_coefficient, pair_profiles
from specviz.config import DecodeConfig
from specviz.drafters.modules import draft_source, drafter_settings, states_module
from specviz.engine import ModelPair
from specviz.models.profile import model_profile
from specviz.registry.rules import rule_for
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.machine import device_wait
from specviz.runtime.protocol import ForwardFn, KVCachedSequence
from specviz.runtime.reference import full_forward


def timed_feeds(state: KVCachedSequence, forward: ForwardFn, loaded: LoadedModel, chunks: list[list[int]]) -> float:
    """Seconds to feed ``chunks`` to ``loaded`` through ``forward``, one cached forward per chunk, from an idle device
    to the last pass's end on it (:func:`~specviz.runtime.machine.device_wait`: a GPU's, not its launches)."""
    device_wait(loaded.device)
    started = time.perf_counter()
    for chunk in chunks:
        state.feed(forward, loaded, chunk, len(chunk))
    device_wait(loaded.device)
    return time.perf_counter() - started


def primed_state(loaded: LoadedModel, forward: ForwardFn, context: list[int]) -> KVCachedSequence:
    """A cache holding ``context[:-1]`` (one forward, not timed): any pass over the last n tokens of the
    context can then be timed after cropping it to ``context[:-n]`` (``pass_ms``)."""
    state = KVCachedSequence()
    if len(context) > 1:
        state.feed(forward, loaded, context[:-1], 1)
    return state


def pass_ms(
    state: KVCachedSequence,
    loaded: LoadedModel,
    forward: ForwardFn,
    context: list[int],
    repeats: int,
    new_tokens: int = 1,
) -> float:
    """Median milliseconds of one cached forward over the last ``new_tokens`` of ``context``, on a
    ``primed_state`` of that context (cropped back before every pass; the first pass is a warm-up)."""
    times = []
    for _ in range(repeats + 1):
        state.pending(context[: len(context) - new_tokens + 1])  # the cache now holds context[:-new_tokens]
        times.append(timed_feeds(state, forward, loaded, [context[-new_tokens:]]))
    return statistics.median(times[1:]) * 1e3


def cached_pass_ms(
    loaded: LoadedModel, forward: ForwardFn, prefix: list[int], repeats: int, new_tokens: int = 1
) -> float:
    """Median milliseconds of one cached forward over the last ``new_tokens`` of ``prefix``."""
    return pass_ms(primed_state(loaded, forward, prefix), loaded, forward, prefix, repeats, new_tokens)


def verification_costs(
    pair: ModelPair, prefix: list[int], blocks: list[int], repeats: int = 5, pairs: int = 1
) -> dict[int, float]:
    """v(k) for each block size k: the target's cached pass over k + 1 tokens (as a round verifies k
    drafted tokens) over its one-token step, measured after ``prefix`` on this device (theory.py). Each
    k's pass is timed right after a one-token pass, and v(k) is the median over ``pairs`` such pairs: on
    a shared machine whose speed drifts, both sides of a ratio are measured within a second. A prefix
    shorter than the longest pass is repeated (the tokens do not change the time). The prefix is run
    through the target once; every timed pass crops its cache back."""
    context = list(prefix)
    while len(context) < max(blocks, default=0) + 2:
        context += prefix
    state = primed_state(pair.target, full_forward, context)

    def paired_ratio(k: int) -> float:
        one = pass_ms(state, pair.target, full_forward, context, repeats)
        return pass_ms(state, pair.target, full_forward, context, repeats, k + 1) / one

    return {k: statistics.median(paired_ratio(k) for _ in range(pairs)) for k in sorted(set(blocks))}


def cost_ratio(config: DecodeConfig, pair: ModelPair, prefix: list[int], repeats: int = 5) -> float:
    """c = draft time per drafted token / time of one target forward, measured here (0 for n-gram).

    Autoregressive drafts pay one forward per token; a parallel drafter pays one small pass for all
    its k tokens (on states the verification pass already computed), so its c is that pass over k."""
    own = states_module(config.drafter)
    draft = draft_source(config, pair)
    if not own and draft is None:  # nothing to time: an n-gram lookup costs no forward
        return 0.0
    target_ms = cached_pass_ms(pair.target, full_forward, prefix, repeats)
    if own:  # drafters on the target's states time their own pass (the states come from verification)
        return own.ms_per_drafted_token(*drafter_settings(config), pair, prefix, repeats, rule_for(config)) / target_ms
    assert draft is not None, "the drafters without a forward of their own were predicted above"
    return cached_pass_ms(draft[0], draft[1], prefix, repeats) / target_ms


def quiet_cost_ratio(config: DecodeConfig, pair: ModelPair) -> float | None:
    """c from the machine profile: the drafter's quiet one-token step over the target's (measured once per machine,
    the same on every page); None for a drafter without an autoregressive draft of its own (timed live)."""
    target, draft = pair_profiles(config, pair)
    return None if draft is None else cost_coefficient(target, draft)


def quiet_verification_costs(pair: ModelPair, blocks: list[int]) -> dict[int, float]:
    """v(k) for each block size k from the target's machine profile (k past the profile's largest predicted there)."""
    profile = model_profile(pair.target)
    return {k: profile.verify_cost(k) for k in set(blocks)}


def machine_cost_ratio(config: DecodeConfig, pair: ModelPair, prefix: list[int]) -> float:
    """The c every speed page uses: the machine profile's where the drafter has a forward of its own, else timed now."""
    quiet = quiet_cost_ratio(config, pair)
    return quiet if quiet is not None else cost_ratio(config, pair, prefix)
