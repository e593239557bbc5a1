"""Parallel verification, measured (the Parallel verification page).

Pure data in, plain data (pandas) out; no streamlit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specviz.analysis.cost import primed_state, timed_feeds
from specviz.analysis.paired import disagree, timed_in_alternating_pairs
from specviz.engine import ModelPair
from specviz.limits import TIMING_REPEATS_MAX
from specviz.models.pass_timing import other_cores, thread_clock
from specviz.models.profile import measured_load
from specviz.runtime.reference import full_forward


def verification_timing(pair: ModelPair, prefix: list[int], block: list[int], repeats: int = 5) -> dict:
    """Median ms of the round's ONE target pass versus the one-token passes that give the same p's.

    As in a round, the pass is over gamma + 1 tokens, the last committed token (not yet in the cache)
    and the gamma drafted ones, and yields p at all gamma + 1 positions: the gamma checks and the bonus
    (Leviathan et al. 2023, Sec. 4: one pass costs about as much as one token while memory-bound).
    Autoregressive decoding needs gamma + 1 one-token passes for the same p's. Both start from the
    same cached prefix; after one untimed warm-up each, they are timed in ``repeats`` back-to-back pairs
    whose order alternates (:func:`timed_in_alternating_pairs`), so a load that comes and goes (the
    browser drawing this page) falls on both.
    """
    fed = [prefix[-1], *block]
    state = primed_state(pair.target, full_forward, prefix)

    def timed(chunks: list[list[int]]) -> Callable[[], tuple[None, float]]:
        def run() -> tuple[None, float]:
            seconds = timed_feeds(state, full_forward, pair.target, chunks)
            state.pending(prefix)  # crop back to prefix[:-1]
            return None, seconds

        return run

    parallel, sequential = timed([fed]), timed([[token] for token in fed])
    parallel(), sequential()  # warm-up
    started = thread_clock()
    times = timed_in_alternating_pairs(parallel, sequential, min(repeats, TIMING_REPEATS_MAX))
    return dict(
        gamma=len(block),
        tokens=len(fed),
        parallel_ms=times.first_median * 1e3,
        sequential_ms=times.second_median * 1e3,
        repeats=len(times.first_seconds),
        ratios=[1 / ratio for ratio in times.ratios],  # each repeat's sequential / parallel
        other_cores=other_cores(started),  # the cores other processes kept busy meanwhile (None: not read)
    )


def load_words(timed: dict) -> list[str]:
    """What a :func:`verification_timing` measured of the machine's load, in words (empty: nothing): other processes'
    cores, and repeats (each a back-to-back pair) that disagree (:func:`~specviz.analysis.paired.disagree`; one
    repeat cannot tell)."""
    signs = list(measured_load(other_cores=timed.get("other_cores")))
    if disagree(timed["ratios"]):
        signs.append(f"the repeats' ratios disagree ({', '.join(f'{r:.2f}×' for r in timed['ratios'])})")
    return signs


def timed_under_load(timed: dict) -> bool:
    """Whether a :func:`verification_timing` measured the machine's load (:func:`load_words`)."""
    return bool(load_words(timed))


def verification_mask(prefix_len: int, gamma: int) -> np.ndarray:
    """The causal mask of the verification pass: gamma+1 queries (last prefix token + drafted tokens)
    against prefix_len + gamma keys; 1 where query i may attend to key j (j <= prefix_len - 1 + i)."""
    keys = np.arange(prefix_len + gamma)
    queries = np.arange(prefix_len - 1, prefix_len + gamma)
    return (keys[None, :] <= queries[:, None]).astype(int)
