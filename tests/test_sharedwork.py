"""The shared work pool: one computation per key, a fair first-come queue, failures reach every waiter."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from specviz.serving.estimates import expected_run, remaining_seconds
from specviz.serving.jobs import Job
from specviz.serving.pool import place_message
from specviz.serving.sharedwork import SharedWork
from specviz.serving.store import ByteBoundedStore, approx_bytes

NO_HANG = 600  # a guard against a hang, never reached by a working pool however slow the machine


def gated(gate: threading.Event, value, calls: list | None = None):
    """A computation that blocks until ``gate`` opens, then returns ``value``."""

    def compute(on_progress):
        if calls is not None:
            calls.append(value)
        on_progress(0, 1, "waiting for the gate")
        assert gate.wait(NO_HANG)
        return value

    return compute


def wait_until(predicate) -> None:
    """Poll ``predicate`` until it holds; a pool that never gets there fails the test after NO_HANG seconds (a broken
    pool must fail the suite, not hang it)."""
    deadline = time.monotonic() + NO_HANG
    while not predicate():
        assert time.monotonic() < deadline, f"not reached within {NO_HANG} s"
        threading.Event().wait(0.01)


def test_many_concurrent_requests_for_one_key_compute_once_and_all_get_the_result():
    work, calls, gate = SharedWork(max_bytes=2**20), [], threading.Event()
    start, results = threading.Barrier(25), {}

    def session(i: int) -> None:
        start.wait()
        job = work.submit("trace", gated(gate, "the trace", calls), f"s{i}", "Decoding")
        assert job.finished.wait(NO_HANG)
        results[i] = job.result

    threads = [threading.Thread(target=session, args=(i,)) for i in range(25)]
    for t in threads:
        t.start()
    wait_until(lambda: "trace" in work.jobs and len(work.jobs["trace"].waiters) == 25)
    assert work.place(work.jobs["trace"]).sharers == 25
    gate.set()
    for t in threads:
        t.join(NO_HANG)
    assert results == {i: "the trace" for i in range(25)}
    assert calls == ["the trace"]
    assert work.cached("trace") == "the trace"  # later sessions read the store


def test_a_failure_reaches_every_waiter_as_a_message_and_is_not_stored():
    work, gate = SharedWork(max_bytes=2**20, describe_error=lambda exc: f"failed: {exc}"), threading.Event()

    def broken(on_progress):
        assert gate.wait(NO_HANG)
        raise ValueError("the model is gone")

    jobs = [work.submit("trace", broken, f"s{i}", "Decoding") for i in range(5)]
    assert all(job is jobs[0] for job in jobs)
    gate.set()
    assert jobs[0].finished.wait(NO_HANG)
    assert jobs[0].state == "failed" and jobs[0].error == "failed: the model is gone"
    assert work.cached("trace") is None and not work.known("trace")
    again = work.submit("trace", lambda on_progress: "recovered", "s0", "Decoding")  # a retry computes anew
    assert again.finished.wait(NO_HANG) and again.result == "recovered"


def test_a_worker_survives_anything_a_computation_raises():
    work = SharedWork(max_bytes=2**20, workers=1, describe_error=lambda exc: 1 / 0)  # even a broken description

    def leaves(on_progress):
        raise SystemExit("not an Exception")

    failed = work.submit("a", leaves, "s1", "Decoding")
    assert failed.finished.wait(NO_HANG) and failed.state == "failed" and failed.error.startswith("Computation failed")
    after = work.submit("b", lambda on_progress: "still working", "s1", "Decoding")
    assert after.finished.wait(NO_HANG) and after.result == "still working"


def test_distinct_work_queues_first_come_first_served_with_places():
    work, gate, order = SharedWork(max_bytes=2**20, workers=1), threading.Event(), []
    first = work.submit("a", gated(gate, "a", order), "s1", "Decoding")
    wait_until(lambda: first.state == "running")
    second = work.submit("b", gated(gate, "b", order), "s2", "Decoding")
    third = work.submit("c", gated(gate, "c", order), "s3", "Decoding")
    assert (work.place(first).state, work.place(first).ahead) == ("running", 0)
    assert (work.place(second).state, work.place(second).ahead) == ("queued", 1)
    assert work.place(third).ahead == 2
    assert work.place(third).wait_s is None  # no run of this label has finished: no estimate yet
    gate.set()
    assert third.finished.wait(NO_HANG)
    assert order == ["a", "b", "c"]


def test_the_wait_estimate_counts_the_runs_ahead():
    work, gate = SharedWork(max_bytes=2**20, workers=1), threading.Event()
    work.durations["Decoding"] = [10.0]
    running = work.submit("a", gated(gate, "a"), "s1", "Decoding")
    wait_until(lambda: running.state == "running")
    queued = work.submit("b", gated(gate, "b"), "s2", "Decoding")
    wait = work.place(queued).wait_s
    assert 10.0 < wait <= 20.0  # what is left of the running one plus its own run
    gate.set()
    assert queued.finished.wait(NO_HANG)


def test_one_session_holds_one_queued_run_and_a_run_nobody_waits_for_is_dropped():
    work, gate = SharedWork(max_bytes=2**20, workers=1), threading.Event()
    blocker = work.submit("busy", gated(gate, "busy"), "teacher", "Decoding")
    wait_until(lambda: blocker.state == "running")
    shared = work.submit("x", gated(gate, "x"), "s1", "Decoding")
    work.submit("x", gated(gate, "x"), "s2", "Decoding")
    replaced = work.submit("y", gated(gate, "y"), "s1", "Decoding")  # s1 changed its settings
    assert shared.state == "queued" and shared.waiters == {"s2"}  # s2 still waits for x
    mine = work.submit("z", gated(gate, "z"), "s1", "Decoding")
    assert replaced.state == "dropped" and replaced.finished.is_set()  # nobody else wanted y
    assert [job.key for job in work.queue] == ["x", "z"]
    work.leave(mine, "s1")  # the tab closed
    assert mine.state == "dropped" and [job.key for job in work.queue] == ["x"]
    gate.set()
    assert shared.finished.wait(NO_HANG) and shared.result == "x"
    assert work.store.get("y") is None and work.store.get("z") is None  # neither was computed


def test_store_is_bounded_by_bytes_and_evicts_the_least_recently_used():
    megabyte = np.zeros(2**20, dtype=np.uint8)
    store = ByteBoundedStore(max_bytes=int(2.5 * 2**20))
    assert store.put("a", megabyte.copy()) and store.put("b", megabyte.copy())
    assert store.get("a") is not None  # a is now the most recently used
    assert store.put("c", megabyte.copy())
    assert store.get("b") is None and store.get("a") is not None and store.get("c") is not None
    assert store.bytes <= store.max_bytes
    assert not store.put("huge", np.zeros(3 * 2**20, dtype=np.uint8))  # larger than the whole store
    assert store.get("huge") is None


def test_approx_bytes_counts_buffers_and_shared_objects_once():
    tensor = torch.zeros(1000, dtype=torch.float32)
    assert approx_bytes(tensor) >= 4000
    assert approx_bytes([tensor, tensor]) < 2 * approx_bytes(tensor)
    rows = [{"token": f"t{i}", "p": 0.5} for i in range(1000)]
    assert approx_bytes(rows) > 1000 * 100  # a thousand small dicts with their strings


def test_a_running_job_estimates_what_is_left_from_its_own_progress():
    """A slow step says how long (the Gamma sweep, the lab, Compare the drafters): once a run has reported progress,
    its estimate is its elapsed time times the share still to do over the share done, with no earlier run needed."""
    work, gate, reported = SharedWork(max_bytes=2**20, workers=1), threading.Event(), threading.Event()

    def half_done(on_progress):
        time.sleep(0.2)
        on_progress(1, 2, "half")
        reported.set()
        assert gate.wait(NO_HANG)
        return "done"

    job = work.submit("sweep", half_done, "s1", "Sweeping")
    assert reported.wait(NO_HANG)
    place = work.place(job)
    assert place.progress == (1, 2, "half") and place.wait_s >= 0.2  # about as long again as it has run
    kind, fraction, text = place_message(place, "Sweeping")
    assert kind == "progress" and fraction == 0.5 and "s left" in text
    gate.set()
    assert job.finished.wait(NO_HANG)


def test_an_estimated_runs_estimate_never_climbs_past_twice_its_first_figure_and_ends_on_the_measurement():
    """#45: "about 43 s" must not climb to 2,158 s. A run predicted at 10 s whose first of 32 steps takes 5 s (a load, a
    warm-up), then 0.3 s a step: the estimate starts at the estimate, moves toward the measurement as the run goes (by
    the share done), never passes twice its first figure, and nears what is really left at the end. Without an estimate,
    the same run's first extrapolation alone is 31 x 5 s."""
    job = Job("k", "Decoding", lambda on_progress: None, 1, estimated_s=10.0)
    first = remaining_seconds(job, expected_run(job, {}), now=0.0)
    job.started = 0.0
    figures, truth = [], []
    for done in range(1, 32):
        now = 5.0 + 0.3 * (done - 1)
        job.progress = (done, 32, None)
        job.first_step = job.first_step or (now, done)  # as the pool notes it
        figures.append(remaining_seconds(job, expected_run(job, {}), now))
        truth.append(0.3 * (32 - done))
    assert first == 10.0 and max(figures) <= 2 * first
    assert abs(figures[-1] - truth[-1]) < 0.5  # the last steps: the measurement
    unestimated = Job("k", "Decoding", lambda on_progress: None, 1, started=0.0, progress=(1, 32, None))
    assert remaining_seconds(unestimated, None, now=5.0) == 155.0


def test_a_run_slower_than_its_estimate_says_so_as_it_goes():
    """#70 item 9: estimated at 194 s, the run took 9 min 15 s and still said "about 101 s left" after 412 s. A run
    of 100 steps estimated at 194 s that takes 5.55 s a step: past a quarter of the run its own pace alone counts."""
    job = Job("k", "Decoding the samples", lambda on_progress: None, 1, estimated_s=194.0, started=0.0)
    job.first_step = (5.55, 1)
    job.progress = (74, 100, None)  # 412 s in
    assert remaining_seconds(job, 194.0, now=74 * 5.55) == pytest.approx(26 * 5.55)  # 144 s: what is left


def test_a_running_computation_nobody_waits_for_stops_at_its_next_step_and_the_next_starts():
    work, steps, release = SharedWork(max_bytes=2**20, workers=1), threading.Semaphore(0), threading.Event()

    def stepping(on_progress):  # a decode: one progress report per round, each after the test lets it go on
        for done in range(100):
            on_progress(done, 100)
            assert steps.acquire(timeout=NO_HANG)
        return "all rounds"

    gamma4 = work.submit("γ=4", stepping, "s1", "Decoding")
    wait_until(lambda: gamma4.progress[0] == 0 and gamma4.state == "running")
    shared = work.submit("γ=5", gated(release, "five"), "s2", "Decoding")  # someone else queues γ=5
    gamma8 = work.submit("γ=8", gated(release, "eight"), "s1", "Decoding")  # s1 moved the slider on: left γ=4
    while not gamma4.finished.is_set():  # γ=4 goes on round by round; a second after s1 left, it stops
        steps.release()
        time.sleep(0.05)
    assert gamma4.state == "dropped" and gamma4.result is None and gamma4.progress[0] < 99
    assert work.store.get("γ=4") is None
    release.set()
    assert shared.finished.wait(NO_HANG) and shared.result == "five"  # work others wait for runs on
    assert gamma8.finished.wait(NO_HANG) and gamma8.result == "eight"
    assert len(work.durations["Decoding"]) == 2  # the cut run is no estimate of a run's time


def test_a_page_that_reruns_and_asks_again_keeps_its_running_computation():
    work, steps = SharedWork(max_bytes=2**20, workers=1), threading.Semaphore(0)

    def stepping(on_progress):
        for done in range(5):
            on_progress(done, 5)
            assert steps.acquire(timeout=NO_HANG)
        return "all rounds"

    job = work.submit("γ=4", stepping, "s1", "Decoding")
    wait_until(lambda: job.state == "running")
    work.leave(job, "s1")  # the page's run was stopped by a rerun ...
    assert work.submit("γ=4", stepping, "s1", "Decoding") is job  # ... which asks again at once: same run
    for _ in range(5):
        steps.release()
    assert job.finished.wait(NO_HANG) and job.result == "all rounds" and len(work.durations["Decoding"]) == 1


def test_a_waiting_page_sleeps_longer_the_more_sessions_share_its_run():
    from specviz.serving.pool import LONGEST_SLEEP_SECONDS, POLL_SECONDS, WAKEUPS_PER_SECOND, redraw_interval

    sharers = (1, 8, 9, 100, 300, 1000, 5000)
    sleeps = [redraw_interval(n) for n in sharers]
    assert sleeps[0] == sleeps[1] == POLL_SECONDS and sleeps == sorted(sleeps) and sleeps[-1] == LONGEST_SLEEP_SECONDS
    for n, sleep in zip(sharers[3:-1], sleeps[3:-1]):  # a hall: the looks of all its pages together stay bounded
        assert n / sleep <= WAKEUPS_PER_SECOND


def test_a_run_a_class_waits_for_is_told_from_one_user_computing():
    from specviz.serving.pool import CLASSROOM_SHARERS, classroom_run

    work, gate = SharedWork(max_bytes=2**20, workers=1), threading.Event()
    lone = work.submit("seed 1", gated(gate, "one"), "s0", "Decoding")
    wait_until(lambda: lone.state == "running")
    assert classroom_run(work) is None  # a newcomer does not wait for one user's run
    for i in range(1, CLASSROOM_SHARERS):
        work.submit("seed 1", gated(gate, "one"), f"s{i}", "Decoding")
    assert classroom_run(work) is lone  # a class on one link: newcomers let it run first
    gate.set()
    assert lone.finished.wait(NO_HANG) and classroom_run(work) is None
