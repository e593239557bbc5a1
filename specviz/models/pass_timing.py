"""Timing a model's cached passes, as the machine profile (:mod:`specviz.models.profile`) holds them: a pass over
n = 1..9 new tokens after a realistic cached context, every size timed in alternating rounds, medians kept.

Pure torch; no streamlit.
"""

from __future__ import annotations

import statistics
import time

from specviz.models.forwards import ForwardFn, KVCachedSequence
from specviz.models.loaded import LoadedModel
from specviz.progress import Progress

PROFILE_TOKENS = 9  # passes over k + 1 = 1..9 new tokens: every block size up to gamma 8
CONTEXT_TOKENS = 128  # cached context before every timed pass (a chat prompt and some answer)
PROFILE_ROUNDS = 5  # rounds of the 9 passes; medians


def time_passes(
    loaded: LoadedModel,
    forward: ForwardFn,
    context: list[int],
    rounds: int = PROFILE_ROUNDS,
    on_progress: Progress | None = None,
) -> tuple[tuple[float, ...], float]:
    """Median ms of a cached pass over n = 1..``PROFILE_TOKENS`` new tokens after ``context[:-PROFILE_TOKENS]``, and
    the spread of the rounds (the largest slowest-over-fastest ratio of one size).

    One untimed warm-up of every size, then ``rounds`` rounds that time every size once, in forward order in
    odd rounds and backward in even ones, so a load that comes and goes falls on every size alike."""
    state = KVCachedSequence()
    base = len(context) - PROFILE_TOKENS
    state.feed(forward, loaded, context[:base], 1)
    sizes = list(range(1, PROFILE_TOKENS + 1))
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(rounds + 1):
        for n in sizes if r % 2 else sizes[::-1]:
            state.crop(base)
            started = time.perf_counter()
            state.feed(forward, loaded, context[base : base + n], n)
            if r:  # round 0 is the warm-up
                times[n].append((time.perf_counter() - started) * 1e3)
        if on_progress:
            on_progress(r + 1, rounds + 1)
    spread = max(max(t) / min(t) for t in times.values())
    return tuple(statistics.median(times[n]) for n in sizes), spread


def profile_context(loaded: LoadedModel) -> list[int]:
    """A realistic context: the tokens of a chat prompt, repeated up to ``CONTEXT_TOKENS`` (what the tokens are does
    not change a pass's cost), then the ``PROFILE_TOKENS`` the timed passes feed."""
    text = "Explain, step by step, why the sky is blue and the sunset is red. " * 16
    vocab = int(loaded.model.get_output_embeddings().out_features)
    ids = [i % vocab for i in loaded.tokenizer(text)["input_ids"]] if loaded.tokenizer is not None else []
    ids = ids or list(range(vocab))  # a tokenizer that makes nothing of the text: any ids cost the same
    while len(ids) < CONTEXT_TOKENS + PROFILE_TOKENS:
        ids += ids
    return ids[: CONTEXT_TOKENS + PROFILE_TOKENS]
