"""Work shared by every session of one server: single-flight, a fair queue and a byte-bounded store.

A teacher shares one link and a room opens it at once. Three mechanisms keep that room responsive:

* **Single-flight** (the pattern of Go's ``singleflight`` and of request coalescing in caches such
  as Varnish): identical requests, keyed by everything that determines the result, attach to one
  :class:`Job`; it runs once and every waiter receives its result or its error message.
* **A fair queue** for distinct work: at most ``workers`` computations run at a time, first come
  first served; each waiting session can read its place and an estimate of the wait from the mean
  duration of past runs with the same label. A session holds at most one queued run: a new request
  from it withdraws its previous one, and a queued run nobody waits for any more is dropped.
* **A store bounded by bytes**: finished results are kept most-recently-used first while their
  estimated size (:func:`approx_bytes`) stays within ``max_bytes``; traces with top-N lists are
  large, so a count bound alone would let a few long traces exhaust memory.

Computations run on the pool's own threads, so a session that leaves (closes its tab, changes its
settings) never cancels work others are waiting for. A running computation nobody waits for any more (a slider
moved on by keyboard: each step a new request, the last one wanted) stops at its first progress report
``ABANDON_AFTER_S`` later, so the value the user settles on starts at once instead of after every intermediate
one; a page that reruns and asks again within that time keeps it. Nothing here imports streamlit.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from specviz.serving.estimates import expected_run, queue_wait, record_run, remaining_seconds
from specviz.serving.jobs import Abandoned, Job, JobComputation, Place
from specviz.serving.store import ByteBoundedStore

if TYPE_CHECKING:
    from specviz.serving.redisshare import RedisShare

log = logging.getLogger(__name__)
ABANDON_AFTER_S = 1.0  # a running job nobody has waited for this long stops at its next progress report


class SharedWork:
    """Single-flight computations on a bounded pool of threads, results kept in a byte-bounded store."""

    def __init__(
        self,
        max_bytes: int,
        workers: int = 1,
        describe_error: Callable[[BaseException], str] = repr,
        shared: RedisShare | None = None,
    ) -> None:
        self.store = ByteBoundedStore(max_bytes)
        self.shared = shared  # other replicas' results and locks (Redis); None: this process alone
        self.workers, self.describe_error = workers, describe_error
        self.lock = threading.Condition()
        self.queue: deque[Job] = deque()
        self.running: list[Job] = []
        self.jobs: dict[Hashable, Job] = {}  # queued or running, by key
        self.session_job: dict[str, Job] = {}  # the one job each session waits for
        self.durations: dict[str, list[float]] = {}  # label -> recent run times, for estimates
        self.numbers = itertools.count()
        self.threads = [
            threading.Thread(target=self._work, name=f"specviz-work-{i}", daemon=True) for i in range(workers)
        ]
        for thread in self.threads:
            thread.start()

    # -- what sessions call ------------------------------------------------------------------------

    def cached(self, key: Hashable) -> Any | None:
        """``key``'s stored result: this process's, else one another replica stored (then kept here too)."""
        value = self.store.get(key)
        if value is None and self.shared is not None:
            value = self.shared.get(key)
            if value is not None:
                self.store.put(key, value)
        return value

    def claim(self, key: Hashable, value: Any) -> Any:
        """The first claim made on ``key``: ``value`` where nobody claimed it before (here or, with a shared store, on
        any replica), else the earlier claim, which stands (who owns a class's result: :mod:`specviz.ui.waiting`).
        A claim is a small stored result: the store's least recently used entries go first when it is full."""
        with self.lock:
            held = self.cached(key)
            if held is None:
                held = value if self.shared is None else self.shared.claim(key, value)
                self.store.put(key, held)
        return held

    def known(self, key: Hashable) -> bool:
        """Whether ``key``'s result is stored, queued or running (here or, with a shared store, anywhere)."""
        with self.lock:
            if key in self.jobs or self.store.get(key) is not None:
                return True
        return self.shared is not None and (self.shared.busy(key) or self.cached(key) is not None)

    def submit(
        self, key: Hashable, compute: JobComputation, session: str, label: str, estimated_s: float | None = None
    ) -> Job:
        """The job computing ``key``, joined by ``session`` (a new one is queued if none is in flight; ``estimated_s``:
        what it costs, predicted before it runs, where known).

        The session's previous job, if different, is left first: one session, one run in the queue.
        """
        with self.lock:
            previous = self.session_job.get(session)
            if previous is not None and previous.key != key:
                self._leave(previous, session)
            stored = self.store.get(key)
            if stored is not None:  # finished since the caller last looked: never compute it twice
                done = Job(key, label, compute, next(self.numbers), state="done", result=stored)
                done.finished.set()
                return done
            job = self.jobs.get(key)
            if job is None:
                job = Job(key, label, compute, next(self.numbers), estimated_s=estimated_s)
                self.jobs[key] = job
                self.queue.append(job)
                self.lock.notify()
            job.waiters.add(session)
            job.unwanted_since = None
            self.session_job[session] = job
            return job

    def leave(self, job: Job, session: str) -> None:
        """``session`` stops waiting; a queued job nobody waits for is dropped (running ones finish)."""
        with self.lock:
            self._leave(job, session)

    def place(self, job: Job) -> Place:
        with self.lock:
            if job.state == "running":
                return Place("running", 0, self._remaining(job), len(job.waiters), job.progress)
            if job.state != "queued":
                return Place(job.state, 0, 0.0, len(job.waiters), job.progress)
            ahead = [j for j in self.queue if j.number < job.number]
            estimates = [self._remaining(j) for j in self.running] + [expected_run(j, self.durations) for j in ahead]
            known, own = [e for e in estimates if e is not None], expected_run(job, self.durations)
            wait = None if len(known) < len(estimates) or own is None else queue_wait(known, self.workers) + own
            return Place("queued", len(self.running) + len(ahead), wait, len(job.waiters), job.progress)

    # -- internals ---------------------------------------------------------------------------------

    def _remaining(self, job: Job) -> float | None:
        return remaining_seconds(job, expected_run(job, self.durations), time.monotonic())

    def _leave(self, job: Job, session: str) -> None:
        job.waiters.discard(session)
        if self.session_job.get(session) is job:
            del self.session_job[session]
        if job.state == "running" and not job.waiters:
            job.unwanted_since = time.monotonic()
        if job.state == "queued" and not job.waiters:
            self.queue.remove(job)
            del self.jobs[job.key]
            job.state = "dropped"
            job.finished.set()

    def _work(self) -> None:
        while True:
            with self.lock:
                while not self.queue:
                    self.lock.wait()
                job = self.queue.popleft()
                job.state, job.started = "running", time.monotonic()
                self.running.append(job)
            self._run(job)

    def _run(self, job: Job) -> None:
        """Run one job; whatever happens, it ends (done or failed) and every waiter is woken."""

        def on_progress(done: int, total: int, text: str | None = None) -> None:
            with self.lock:  # decided under the lock: a session that joins now starts a new job instead
                left = job.unwanted_since
                abandon = not job.waiters and left is not None and time.monotonic() - left >= ABANDON_AFTER_S
                if abandon:
                    del self.jobs[job.key]
            if abandon:
                raise Abandoned
            job.progress = (done, total, text)
            if done > 0 and job.first_step is None:  # the pace is read from here: the warm-up before it left out
                job.first_step = (time.monotonic(), done)

        def compute() -> Any:
            job.computed_here = True
            log.info("started %s %s for %d session(s)", job.label, key_digest(job.key), len(job.waiters))
            return job.compute(on_progress)

        def waiting_elsewhere() -> None:
            on_progress(0, 1, f"{job.label}: another server computes it; waiting for its result")

        result, abandoned, shared = None, False, self.shared
        error: str | None = "Computation failed"
        try:
            result = compute() if shared is None else shared.compute_once(job.key, compute, waiting_elsewhere)
            error = None
            self.store.put(job.key, result)
        except Abandoned:
            abandoned = True
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it, and the worker must live on
            error = _safe_description(self.describe_error, exc)
        finally:
            self._finish(job, result, error, abandoned)

    def _finish(self, job: Job, result: Any, error: str | None, abandoned: bool = False) -> None:
        assert job.started is not None, "a job ends after the worker started it"
        seconds = time.monotonic() - job.started
        how = "abandoned" if abandoned else "computed" if job.computed_here else "received from another replica"
        digest, failure = key_digest(job.key), "" if error is None or abandoned else f": {error}"
        log.info("%s %s %s in %.2f s for %d session(s)%s", how, job.label, digest, seconds, len(job.waiters), failure)
        with self.lock:
            self.running.remove(job)
            if self.jobs.get(job.key) is job:  # an abandoned job left the table when it stopped
                del self.jobs[job.key]
            if not abandoned:  # a run cut short computed nothing and says nothing of how long one takes
                record_run(self.durations, job.label, seconds)
            job.result, job.error = result, error
            job.state = "dropped" if abandoned else "done" if error is None else "failed"
            for session in [s for s, j in self.session_job.items() if j is job]:
                del self.session_job[session]
        job.finished.set()


def _safe_description(describe: Callable[[BaseException], str], exc: BaseException) -> str:
    try:
        return describe(exc)
    except Exception:  # noqa: BLE001 - a failing description must not kill the worker either
        return f"Computation failed: {type(exc).__name__}"


def key_digest(key: Hashable) -> str:
    """A short stable name for a key, for the log (the load benchmark counts computations by it)."""
    return hashlib.sha256(repr(key).encode()).hexdigest()[:12]
