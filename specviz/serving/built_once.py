"""Values built once per key, however many threads ask at once, the newest few kept: how a server holds its model
pairs (:data:`specviz.serving.pairs.LOADED_PAIRS`)."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class BuiltOnce(Generic[V]):
    """Values built once per key however many threads ask at once (one builds, the others wait for it; a key
    another thread builds never blocks a key already built), the newest ``kept`` held, least recently used dropped
    first. A build that raises is not kept: the next ask tries again."""

    def __init__(self, build: Callable[..., V], kept: int) -> None:
        self._build, self._kept = build, kept
        self._values: OrderedDict[tuple[Hashable, ...], V] = OrderedDict()
        self._building: dict[tuple[Hashable, ...], threading.Lock] = {}
        self._lock = threading.Lock()

    def has(self, *key: Hashable) -> bool:
        with self._lock:
            return key in self._values

    def get(self, *key: Hashable) -> V:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                if key in self._values:  # another thread built it while this one waited
                    self._values.move_to_end(key)
                    return self._values[key]
            try:
                value = self._build(*key)
            except BaseException:
                with self._lock:
                    self._building.pop(key, None)
                raise
            with self._lock:  # stored and no longer building in one step: no thread finds it neither
                self._building.pop(key, None)
                self._values[key] = value
                while len(self._values) > self._kept:
                    self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    def values(self) -> list[V]:
        with self._lock:
            return list(self._values.values())

    def evict_until(self, fits: Callable[[], bool], release: Callable[[], None]) -> bool:
        """Drop the least recently used values, one at a time, until ``fits()``; whether it fits then. ``release``
        lets go of what a dropped value held elsewhere (and collects it). A value something else still holds (a
        running computation's pair) is never dropped: it would stay in memory anyway, and a second copy would be
        built for its key."""
        for key in self._oldest_first():
            if fits():
                return True
            with self._lock:
                if key not in self._values:
                    continue
                probe = weakref.ref(self._values.pop(key))
            release()
            value = probe()
            if value is not None:  # in use elsewhere: it stays, where it was in the order
                with self._lock:
                    self._values[key] = value
                    self._values.move_to_end(key, last=False)
                del value
        return fits()

    def _oldest_first(self) -> list[tuple[Hashable, ...]]:
        with self._lock:
            return list(self._values)
