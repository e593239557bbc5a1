"""Where two token lists part: the one home of that small idea (no torch). A KV cache keeps the rows of the prefix
it shares with a new context (:class:`~specviz.models.forwards.KVCachedSequence`), a race counts how many tokens
the speculative lane shares with the target alone, and the numerics and top-β pages show where two outputs first
differ."""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens the two lists share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token lists differ (a shorter list differs where it ends), else None."""
    shared = common_prefix(a, b)
    return None if shared == len(a) == len(b) else shared
