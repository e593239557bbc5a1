"""Page runs take turns, first contentful paints first: what keeps a class's first contentful paint within seconds on
one process.

Streamlit builds each session's page in a thread of its own, and one event-loop thread sends what the pages drew.
All of them share the GIL. Let 300 page runs build at once and the event loop gets about 1/300 of it: nothing a page
drew leaves the server until nearly every run is done, so the whole class sees its first contentful paint at the end,
whatever each page draws first (measured: 300 sessions of one link, first messages p50 8.6 s against first contentful
paints p95 9.0 s). Here at most :data:`SLOTS` runs build at once, in the order they came, and a run's first contentful
paint (the page up to its main view) goes before any run's rest (what the page draws after it, and the sidebar's
widgets): the event loop keeps up, each session's paint leaves as soon as it is built, and the rest follows once no
first contentful paint waits.

A run that blocks (waiting for a shared computation, loading a pair) gives its turn back first, so a turn never waits
on a computation; a turn waited for longer than :data:`SLOT_WAIT_S` is taken anyway, so nothing waits forever.

The event loop also starts each session's script thread, and ``Thread.start`` waits until the new thread has run,
which takes the GIL: with the turns' runs holding it, CPython hands it over only when a holder has run for its switch
interval (5 ms by default), so 300 arriving sessions were started one every few intervals, each first message
leaving seconds late. The server process switches every :data:`SWITCH_INTERVAL_S` instead (``sys.setswitchinterval``:
a thread waiting for the GIL gets it that much sooner; torch's kernels release it while they run, so decoding does
not pay for it). docs/benchmarks.md has the classroom (the lecture-hall benchmark) measured both ways.
"""

from __future__ import annotations

import sys
import threading
from collections import deque

SLOTS = 2  # runs building at once (one or two measured alike on 2 cores, three twice as slow: the loop starves)
SLOT_WAIT_S = 30.0  # the longest a run waits for a turn; then it builds anyway
SWITCH_INTERVAL_S = 0.0005  # the GIL's switch interval in the server (CPython's default 0.005)


class Scheduler:
    """At most ``slots`` holders at a time; waiting first contentful paints are served before waiting rests, each in
    order."""

    def __init__(self, slots: int = SLOTS) -> None:
        self._lock = threading.Lock()
        self._free = slots
        self._waiting: tuple[deque[threading.Event], deque[threading.Event]] = (deque(), deque())  # paints, rests

    def take(self, first_contentful_paint: bool, timeout: float = SLOT_WAIT_S) -> None:
        """Wait (without the GIL) for a turn: a first contentful paint's, or a rest's (served once no first contentful
        paint waits). After ``timeout`` the turn is taken anyway, over the bound."""
        queue = self._waiting[0 if first_contentful_paint else 1]
        with self._lock:
            if self._free > 0 and not self._waiting[0] and (first_contentful_paint or not queue):
                self._free -= 1
                return
            handed = threading.Event()
            queue.append(handed)
        if handed.wait(timeout):
            return
        with self._lock:
            if handed in queue:  # not handed over in the meantime: take a turn over the bound
                queue.remove(handed)
                self._free -= 1

    def give_back(self) -> None:
        """End a turn: hand it to the longest-waiting first contentful paint, else to the longest-waiting rest."""
        with self._lock:
            for queue in self._waiting:
                if queue:
                    queue.popleft().set()
                    return
            self._free += 1

    def waiting(self) -> tuple[int, int]:
        """(first contentful paints, rests) waiting for a turn."""
        with self._lock:
            return len(self._waiting[0]), len(self._waiting[1])


SCHEDULER = Scheduler()  # the process's page runs
sys.setswitchinterval(SWITCH_INTERVAL_S)  # this module is imported by the server's page runs alone
