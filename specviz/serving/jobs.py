"""What the shared work pool (:mod:`specviz.serving.sharedwork`) hands around: a job, a waiting session's place in the
queue, and the signal that stops a computation nobody waits for. No streamlit."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Hashable
from typing import Any

from specviz.limits import JobProgress

JobComputation = Callable[[JobProgress], Any]  # a job's computation, all its inputs bound


@dataclasses.dataclass
class Job:
    """One computation and everyone waiting for it."""

    key: Hashable
    label: str
    compute: JobComputation
    number: int  # arrival order: the queue is first come, first served
    estimated_s: float | None = None  # its cost estimated before it runs (serving.estimates); None: none
    waiters: set[str] = dataclasses.field(default_factory=set)
    unwanted_since: float | None = None  # when its last waiter left while it ran (None: someone waits)
    state: str = "queued"  # queued -> running -> done | failed; or dropped while queued
    started: float | None = None
    progress: tuple[int, int, str | None] = (0, 1, None)
    first_step: tuple[float, int] | None = None  # (monotonic time, steps done) at its first progress past step 0
    result: Any = None
    error: str | None = None
    computed_here: bool = False  # False when another replica's result arrived (a shared store)
    finished: threading.Event = dataclasses.field(default_factory=threading.Event)


class Abandoned(Exception):
    """Raised at a running computation's next progress report once no session waits for it."""


@dataclasses.dataclass(frozen=True)
class Place:
    """What a waiting session is told: its job's state, the runs ahead of it and the expected wait."""

    state: str
    ahead: int  # runs that will start or finish before this one starts (0 when running)
    wait_s: float | None  # expected seconds until the result; None before any run of this label ended
    sharers: int  # sessions waiting for this very job
    progress: tuple[int, int, str | None]
