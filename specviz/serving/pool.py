"""The process's one pool of shared work and the rules a waiting page follows, without the page: every page's
computation (traces, sweeps, comparisons, lab runs) goes through one :class:`~specviz.serving.sharedwork.SharedWork`,
computed once however many sessions ask, queued fairly, kept in a store bounded by bytes; with ``SPECVIZ_REDIS_URL``
shared with every replica on that Redis. What a page draws meanwhile is :mod:`specviz.ui.waiting`."""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

from specviz.config import DecodeConfig
from specviz.engine import speculative_decode
from specviz.engine.trace import Trace
from specviz.limits import TextProgress
from specviz.serving.jobs import Job
from specviz.serving.pairs import LOADING_NOTE, describe_failure, pair_for
from specviz.serving.sharedwork import Place, SharedWork

if TYPE_CHECKING:
    from specviz.serving.redisshare import RedisShare

R = TypeVar("R")
log = logging.getLogger(__name__)
REDIS_URL_VAR = "SPECVIZ_REDIS_URL"
STORE_MAX_BYTES = int(float(os.environ.get("SPECVIZ_STORE_MB", "1024")) * 2**20)  # finished results kept, by size
WORKERS = max(1, int(os.environ.get("SPECVIZ_WORKERS", "1")))  # computations running at once in this process
POLL_SECONDS = 0.25  # how often a waiting page reads its place in the queue, alone
HEARTBEAT_SECONDS = 2.0  # a waiting page redraws at least this often when few share its run
WAKEUPS_PER_SECOND = 100  # all the pages waiting for one run wake about this often in all, however many they are
LONGEST_SLEEP_SECONDS = 10.0  # the most a waiting page sleeps (the longest a setting changed meanwhile waits)
CLASSROOM_SHARERS = 8  # a run this many sessions wait for is a class on one link (a judgement: more than a few
# colleagues sharing a link, far fewer than a lecture's students)
CLASSROOM_WAIT_SECONDS = 10.0  # the longest a newcomer to a busy classroom lets the run go first

_pool: list[SharedWork] = []
_pool_lock = threading.Lock()


def shared_work() -> SharedWork:
    """The process's one pool of shared computations, made on first use; with ``SPECVIZ_REDIS_URL`` its results
    and single-flight locks are shared with every replica using that Redis."""
    with _pool_lock:
        if not _pool:
            share = replica_share(os.environ.get(REDIS_URL_VAR))
            _pool.append(SharedWork(STORE_MAX_BYTES, WORKERS, describe_failure, shared=share))
        return _pool[0]


def replica_share(url: str | None) -> RedisShare | None:
    """The Redis share at ``url`` (None without one, or when it does not answer: this process then works alone,
    which the log says)."""
    if not url:
        return None
    from specviz.serving.redisshare import RedisShare  # the redis client only where a Redis is configured

    share = RedisShare(url)
    try:
        share.client.ping()
    except Exception as exc:  # noqa: BLE001 - a replica without its Redis still serves its own sessions
        log.error("%s=%s does not answer (%s): this process keeps its results to itself", REDIS_URL_VAR, url, exc)
        return None
    return share


def place_message(place: Place, label: str) -> tuple[str, float | None, str]:
    """What a waiting page shows: ("info", None, its place in line) or ("progress", fraction, text)."""
    if place.state == "queued":
        wait = "estimating the wait" if place.wait_s is None else f"~{5 * math.ceil(place.wait_s / 5):.0f} s"
        runs = "run" if place.ahead == 1 else "runs"
        return (
            "info",
            None,
            (f"{label}: waiting in line, {place.ahead} {runs} ahead of yours, {wait}. Change a setting to cancel."),
        )
    done, total, text = place.progress
    others = place.sharers - 1
    shared = f" · shared with {others} other session{'s' if others != 1 else ''}" if others > 0 else ""
    left = "" if place.wait_s is None else f" · about {max(1, math.ceil(place.wait_s)):.0f} s left"
    return "progress", min(1.0, done / max(1, total)), f"{text or label}{left}{shared}"


def stored_attempts(work: SharedWork, key: tuple[Hashable, ...]) -> list[Any]:
    """A live measurement's stored attempts, oldest first: ``key + (0,)``, ``key + (1,)``, ... while they are
    stored (here or, with a shared store, on another replica)."""
    attempts: list[Any] = []
    while (result := work.cached(key + (len(attempts),))) is not None:
        attempts.append(result)
    return attempts


def shown_attempt(attempts: list[R], noisy: Callable[[R], bool]) -> tuple[R | None, R | None]:
    """Of a live measurement's attempts, oldest first: the one pages show (the latest quiet one, else the latest),
    and the latest one when it was ``noisy`` (measured under load) while a quiet one is shown instead (else
    None): a timing taken under load is never what later visitors see while a quiet one exists."""
    if not attempts:
        return None, None
    quiet = [attempt for attempt in attempts if not noisy(attempt)]
    shown = quiet[-1] if quiet else attempts[-1]
    return shown, attempts[-1] if attempts[-1] is not shown else None


def classroom_run(work: SharedWork) -> Job | None:
    """The running job a class waits for (``CLASSROOM_SHARERS`` sessions or more), if there is one."""
    with work.lock:
        return next((job for job in work.running if len(job.waiters) >= CLASSROOM_SHARERS), None)


def redraw_interval(sharers: int) -> float:
    """How long a waiting page sleeps between looks at its run (it wakes at once when the run ends). Each look may
    redraw the page and is where streamlit stops a run whose user changed a setting; all the pages waiting for one
    run look about ``WAKEUPS_PER_SECOND`` times a second in all, so a classroom waiting for one trace leaves the CPU to
    it (300 sessions: every 3 s, not 1,200 looks a second): POLL_SECONDS up to HEARTBEAT_SECONDS while a few share
    the run, then sharers / WAKEUPS_PER_SECOND, at most LONGEST_SLEEP_SECONDS."""
    if sharers <= HEARTBEAT_SECONDS / POLL_SECONDS:
        return POLL_SECONDS
    return min(LONGEST_SLEEP_SECONDS, max(HEARTBEAT_SECONDS, sharers / WAKEUPS_PER_SECOND))


def decoding(config: DecodeConfig, prompt: str) -> Callable[[TextProgress], Trace]:
    """The shared computation of ``config``'s trace on ``prompt``: load the pair (once per process), decode,
    reporting progress over rounds (the config was validated where it was built)."""

    def compute(on_progress: TextProgress) -> Trace:
        on_progress(0, config.max_new_tokens, LOADING_NOTE)
        return speculative_decode(
            config,
            prompt=prompt,
            pair=pair_for(config),
            on_round=lambda record, new: on_progress(
                new, config.max_new_tokens, f"Round {record.index + 1} · {new}/{config.max_new_tokens} tokens"
            ),
        )

    return compute
