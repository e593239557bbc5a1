"""Parallel verification, measured (the Parallel verification page). Pure data in, plain data (pandas) out; no streamlit."""

from __future__ import annotations

import statistics

import numpy as np

from ..forwards import full_forward
from ..engine import ModelPair

from .common import TIMING_REPEATS_MAX
from .cost import primed_state, timed_feeds


def verification_timing(pair: ModelPair, prefix: list[int], block: list[int], repeats: int = 5) -> dict:
    """Median ms of the round's ONE target pass versus the one-token passes that give the same p's.

    As in a round, the pass is over gamma + 1 tokens, the last committed token (not yet in the cache)
    and the gamma drafted ones, and yields p at all gamma + 1 positions: the gamma checks and the bonus
    (Leviathan et al. 2023, Sec. 4: one pass costs about as much as one token while memory-bound).
    Autoregressive decoding needs gamma + 1 one-token passes for the same p's. Both start from the
    same cached prefix, and they are timed in alternation, one of each per repeat, so a load that comes
    and goes (the browser drawing this page) falls on both.
    """
    repeats = min(repeats, TIMING_REPEATS_MAX)
    fed = [prefix[-1], *block]
    state = primed_state(pair.target, full_forward, prefix)
    parallel, sequential = [], []
    for _ in range(repeats + 1):
        parallel.append(timed_feeds(state, full_forward, pair.target, [fed]))
        state.pending(prefix)  # crop back to prefix[:-1]
        sequential.append(timed_feeds(state, full_forward, pair.target, [[token] for token in fed]))
        state.pending(prefix)
    return dict(gamma=len(block), tokens=len(fed), parallel_ms=statistics.median(parallel[1:]) * 1e3,
                sequential_ms=statistics.median(sequential[1:]) * 1e3, repeats=repeats)


def verification_mask(prefix_len: int, gamma: int) -> np.ndarray:
    """The causal mask of the verification pass: gamma+1 queries (last prefix token + drafted tokens)
    against prefix_len + gamma keys; 1 where query i may attend to key j (j <= prefix_len - 1 + i)."""
    keys = np.arange(prefix_len + gamma)
    queries = np.arange(prefix_len - 1, prefix_len + gamma)
    return (keys[None, :] <= queries[:, None]).astype(int)
