"""Timing a model's cached passes, as the machine profile (:mod:`specviz.models.profile`) holds them: a pass over
n = 1..9 new tokens after a realistic cached context, every size timed in alternating rounds, medians kept, and the
share of the cores the timing thread had while it ran (:func:`cpu_share`), which tells a loaded machine from a quiet
one even when the load is constant.

Pure torch; no streamlit.
"""

from __future__ import annotations

import statistics
import time
from typing import NamedTuple

from specviz.limits import Progress
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.protocol import ForwardFn, KVCachedSequence

PROFILE_TOKENS = 9  # passes over k + 1 = 1..9 new tokens: every block size up to gamma 8
CONTEXT_TOKENS = 128  # cached context before every timed pass (a chat prompt and some answer)
PROFILE_ROUNDS = 5  # rounds of the 9 passes; medians

Clock = tuple[float, float]  # (wall, this thread's CPU) seconds at one moment


def thread_clock() -> Clock:
    """(wall, this thread's CPU) seconds now: the two clocks :func:`cpu_share` compares."""
    return time.perf_counter(), time.thread_time()


def cpu_share(since: Clock) -> float:
    """The calling thread's CPU seconds over the wall seconds since ``since`` (:func:`thread_clock`), s = CPU / wall.

    A thread that computes (a pass's Python, and its share of each parallel product, whose other threads it waits for
    spinning) has a core all the time on a quiet machine: s ~ 1. Where other work wants the cores (another process,
    or another thread of this one: a page measured while the worker decodes), the scheduler shares them, and the
    thread waits 1 - s of the time. Unlike the spread of repeated timings, this sees a load that stays constant."""
    wall, cpu = thread_clock()
    return (cpu - since[1]) / max(wall - since[0], 1e-9)


class Timed(NamedTuple):
    """One measurement of a model's passes (:func:`time_passes`)."""

    pass_ms: tuple[float, ...]  # the median ms of the pass over n = 1..PROFILE_TOKENS new tokens
    spread: float  # the largest slowest-over-fastest ratio of one size's rounds
    cpu_share: float  # the timing thread's share of a core over the timed rounds (:func:`cpu_share`)


def time_passes(
    loaded: LoadedModel,
    forward: ForwardFn,
    context: list[int],
    rounds: int = PROFILE_ROUNDS,
    on_progress: Progress | None = None,
) -> Timed:
    """Median ms of a cached pass over n = 1..``PROFILE_TOKENS`` new tokens after ``context[:-PROFILE_TOKENS]``, the
    spread of the rounds and the timing thread's share of a core while they ran (:class:`Timed`).

    One untimed warm-up of every size, then ``rounds`` rounds that time every size once, in forward order in
    odd rounds and backward in even ones, so a load that comes and goes falls on every size alike."""
    state = KVCachedSequence()
    base = len(context) - PROFILE_TOKENS
    state.feed(forward, loaded, context[:base], 1)
    sizes = list(range(1, PROFILE_TOKENS + 1))
    times: dict[int, list[float]] = {n: [] for n in sizes}
    timed_from = thread_clock()
    for r in range(rounds + 1):
        if r == 1:  # the warm-up done
            timed_from = thread_clock()
        for n in sizes if r % 2 else sizes[::-1]:
            state.crop(base)
            started = time.perf_counter()
            state.feed(forward, loaded, context[base : base + n], n)
            if r:  # round 0 is the warm-up
                times[n].append((time.perf_counter() - started) * 1e3)
        if on_progress:
            on_progress(r + 1, rounds + 1)
    share = cpu_share(timed_from)
    spread = max(max(t) / min(t) for t in times.values())
    return Timed(tuple(statistics.median(times[n]) for n in sizes), spread, share)


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
