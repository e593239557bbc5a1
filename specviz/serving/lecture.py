"""A lecture prepared in advance: every costly result its pages show, computed before the class arrives.

A :class:`LecturePlan` is the links the lecture uses and the works their pages offer (:mod:`specviz.serving.works`),
recorded while the teacher rehearses or loaded from a plan file. :func:`prepare` computes the works one after the
other on the process's work pool, in the background, into the shared store (and, with Redis, every replica's): in
front of the class every press on those pages finds its result stored and shows it at once, for every student.
How far it is is read from that store, and the time left is the works' estimates here (:meth:`Work.estimated_seconds`)
scaled by what the machine took for those it computed (:mod:`specviz.serving.estimates`). Preparing stops the
teacher's recording: a page opened meanwhile would add a work the preparation does not hold.

A plan is recorded server-side, by the teacher's :class:`Recording`: every session of the teacher's browser (a page
opened by a sidebar click or by a typed link, which is a new session) finds it by the recorder id its cookie carries
(:func:`recording`), so the plan gathers the works of all of them and outlives any one page's widgets.

A plan file is JSON (never pickle): each work by its name, its config's settings by their flat names, its prompt
and its parameters. Reading one checks every name and setting, so a hand-edited or foreign file becomes a message.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from specviz.config import DecodeConfig
from specviz.serving.estimates import plan_left
from specviz.serving.sharedwork import SharedWork
from specviz.serving.works import WORKS, Work
from specviz.settings import ConfigError

PLAN_FORMAT = "specviz lecture plan 1"
MAX_RECORDINGS = 64  # the recordings a server keeps, the least recently used dropped first (each is a few works)
SESSION = "lecture"  # the waiter a preparation's jobs are computed for (a queued job nobody waits for is dropped)


@dataclass(frozen=True)
class LecturePlan:
    links: tuple[str, ...]  # the pages with their settings, as the teacher opened them (path and query)
    works: tuple[Work, ...]  # every costly result those pages offer

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": PLAN_FORMAT,
                "links": list(self.links),
                "works": [
                    {"name": w.name, "config": w.config.to_dict(), "prompt": w.prompt, "params": list(w.params)}
                    for w in self.works
                ],
            },
            ensure_ascii=False,
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> LecturePlan:
        """The plan a file holds, every work checked (unknown names, bad settings and malformed entries refused)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"This is not a lecture plan (not JSON: {exc.msg})") from None
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise ConfigError(f"This is not a lecture plan (its format is not {PLAN_FORMAT!r})")
        return cls(tuple(str(link) for link in data.get("links", [])), tuple(map(planned_work, data["works"])))


def plain(value: Any) -> Any:
    """A JSON value as a work's parameter: lists become tuples (hashable, as in the page's key)."""
    if isinstance(value, list):
        return tuple(plain(v) for v in value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    raise ConfigError(f"A lecture plan's parameter must be plain data, not {type(value).__name__}")


def planned_work(entry: Any) -> Work:
    if not isinstance(entry, dict) or entry.get("name") not in WORKS:
        raise ConfigError(f"A lecture plan names an unknown computation: {str(entry)[:80]}")
    try:
        config = DecodeConfig.from_dict(dict(entry["config"])).validated()
        return Work(entry["name"], config, str(entry["prompt"]), plain(entry.get("params", [])))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"A lecture plan's {entry['name']!r} entry is malformed: {exc}") from None


def is_stored(pool: SharedWork, work: Work) -> bool:
    """Whether ``work``'s result is in ``pool``'s store (here or another replica's): what a press on its page finds."""
    return pool.cached(work.first_key) is not None


def stored_keys(pool: SharedWork, works: tuple[Work, ...]) -> set[tuple[Hashable, ...]]:
    """Where the results of those of ``works`` that are stored now are kept (their first keys): one reading of the
    store, from which a page draws both its table and its progress, so the two agree."""
    return {work.first_key for work in works if is_stored(pool, work)}


@dataclass
class Preparation:
    """A plan being prepared: the work it is on and since when, what each work is estimated at here, what the works
    computed so far took against their estimates, what failed, and the recording it stopped. How far it is is read
    from the store (:meth:`progress`), not counted by the preparation: a work stored before it began counts at once."""

    plan: LecturePlan
    estimate: Callable[[Work], float | None]  # a work's estimate here; None while its pair is not loaded
    estimates: list[float | None] = field(default_factory=list)  # each work's, by position, predicted once known
    current: tuple[int, float] = (0, 0.0)  # the work running (its position; the plan's length once done) and since
    # (one value, replaced whole: a page reading it never sees one work's position with another's start)
    paced: list[tuple[float, float]] = field(default_factory=list)  # (estimate, took) of each work computed here
    failed: list[str] = field(default_factory=list)
    stopped: Recording | None = None  # the recording that was on when it began, turned off then
    finished: threading.Event = field(default_factory=threading.Event)

    @property
    def total(self) -> int:
        return len(self.plan.works)

    @property
    def running(self) -> str:
        """The running work's label ("" once done)."""
        position = self.current[0]
        return self.plan.works[position].label if position < self.total else ""

    def estimate_again(self) -> None:
        """Estimate every work not predicted yet whose pair is loaded now (a plan loaded from a file after a restart is
        predicted pair by pair, as the preparation loads them)."""
        self.estimates += [None] * (self.total - len(self.estimates))
        for position, work in enumerate(self.plan.works):
            if self.estimates[position] is None:
                self.estimates[position] = self.estimate(work)

    def progress(self, stored: set[tuple[Hashable, ...]]) -> int:
        """How many of the plan's works are ``stored`` (:func:`stored_keys`)."""
        return sum(work.first_key in stored for work in self.plan.works)

    def remaining_s(self, stored: set[tuple[Hashable, ...]], now: float) -> float | None:
        """Seconds until the preparation ends (:func:`~specviz.serving.estimates.plan_left`): the running work, then
        every later one not ``stored`` yet, at their estimates scaled by the pace measured so far. A work not predicted
        yet counts at the mean of those predicted (one lecture's works are alike); None while none is."""
        known = [p for p in self.estimates if p is not None]
        if not known:
            return None
        mean = sum(known) / len(known)
        estimates = [p if p is not None else mean for p in self.estimates]
        position, since = self.current
        running = (estimates[position], now - since) if position < self.total else None
        waiting = [estimates[i] for i in range(position + 1, self.total) if self.plan.works[i].first_key not in stored]
        return plan_left(running, waiting, self.paced)


def prepare(
    plan: LecturePlan, pool: SharedWork, estimate: Callable[[Work], float | None], recording: Recording | None = None
) -> Preparation:
    """Compute ``plan``'s works one after the other on ``pool`` (each once for every session; a result already stored
    is kept), in a background thread; returns the :class:`Preparation` to follow. ``recording`` stops: the pages
    opened while the lecture is prepared would add works its plan does not hold. ``estimate``: a work's estimate
    here."""
    on = recording if recording is not None and recording.on else None
    preparation = Preparation(plan, estimate, current=(0, time.monotonic()), stopped=on)
    if recording is not None:
        recording.on = False
    preparation.estimate_again()

    def run() -> None:
        for position, work in enumerate(plan.works):
            preparation.estimate_again()
            preparation.current = (position, time.monotonic())
            if not is_stored(pool, work):
                estimate = preparation.estimates[position]
                job = pool.submit(work.first_key, work.compute, SESSION, work.label, estimate)
                job.finished.wait()
                pool.leave(job, SESSION)
                if job.error is not None:
                    preparation.failed.append(f"{work.label}: {job.error}")
                elif job.started is not None and estimate is not None:  # computed, not found stored meanwhile
                    preparation.paced.append((estimate, time.monotonic() - job.started))
        preparation.current = (preparation.total, time.monotonic())
        preparation.finished.set()

    threading.Thread(target=run, name="specviz-lecture", daemon=True).start()
    PREPARATIONS.append(preparation)
    del PREPARATIONS[:-1]
    return preparation


PREPARATIONS: list[Preparation] = []  # the server's latest preparation, which every session's Lecture page follows


class Recording:
    """One teacher's lecture being recorded: whether recording is on, the works the pages offered and the links they
    were opened at, in order, each once. Every session of the teacher's browser notes into it, from its own thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.on = False
        self.works: dict[tuple[Hashable, ...], Work] = {}  # by where each work's first result is stored
        self.links: list[str] = []

    def note(self, work: Work, link: str) -> None:
        """``work``, offered by the page at ``link``, joins the plan while recording is on."""
        with self.lock:
            if self.on:
                self.works.setdefault(work.first_key, work)
                if link not in self.links:
                    self.links.append(link)

    def plan(self) -> LecturePlan:
        with self.lock:
            return LecturePlan(tuple(self.links), tuple(self.works.values()))

    def replace(self, plan: LecturePlan) -> None:
        """The plan becomes ``plan`` (a loaded file; an empty plan clears it). Recording stays as it was."""
        with self.lock:
            self.works = {w.first_key: w for w in plan.works}
            self.links = list(plan.links)


RECORDINGS: OrderedDict[str, Recording] = OrderedDict()  # the server's recordings, by recorder id
RECORDINGS_LOCK = threading.Lock()


def recording(recorder: str | None) -> Recording | None:
    """The recording of ``recorder`` (an id a browser's cookie carries: anything), None when the server has none."""
    if not recorder:
        return None
    with RECORDINGS_LOCK:
        found = RECORDINGS.get(recorder)
        if found is not None:
            RECORDINGS.move_to_end(recorder)
        return found


def new_recording() -> tuple[str, Recording]:
    """A new recording and its recorder id (random, unguessable: it is the teacher's key to the plan)."""
    recorder, made = secrets.token_urlsafe(16), Recording()
    with RECORDINGS_LOCK:
        RECORDINGS[recorder] = made
        while len(RECORDINGS) > MAX_RECORDINGS:
            RECORDINGS.popitem(last=False)
    return recorder, made
