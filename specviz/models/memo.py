"""Results computed once from a shared object (a model) and held only while that object lives."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar

R = TypeVar("R")


def memoised_while_alive(function: Callable[..., R]) -> Callable[..., R]:
    """Memoise ``function(owner, *args)`` per live ``owner`` (a weak key) and hashable ``args``.

    Unlike ``functools.lru_cache``, which holds its keys, this drops an owner's results with the owner, so a
    model the process's model cache lets go is not kept alive by what was derived from it. The results must
    not refer back to their owner (tensors that share its weights' storage are fine). Two threads may both
    compute a missing result; both get an equal one.
    """
    results: weakref.WeakKeyDictionary[object, dict[tuple[Hashable, ...], R]] = weakref.WeakKeyDictionary()

    @functools.wraps(function)
    def memoised(owner: object, *args: Hashable) -> R:
        owned = results.setdefault(owner, {})
        if args not in owned:
            owned[args] = function(owner, *args)
        return owned[args]

    return memoised
